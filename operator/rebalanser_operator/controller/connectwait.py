"""Waiting for a ZooKeeper session without holding one of the operator's threads.

    if not connected(ctx.pool, zk):     # inside a group's step: never blocks
        ...                             # not connected: report it, the group is woken when it connects

A step that needs a connected session asks :func:`connected`. In a *first attempt*
(:meth:`~rebalanser_operator.controller.core.GroupController.apply` and friends start one), a session
that is not connected yet ends the step at once with :class:`AwaitConnection`: the thread goes back to
the pool, the caller waits for the session on its own (kopf's event loop, or a test's thread) for at
most ``connect_wait`` seconds, and runs the step once more. In that second attempt (and in any step
that is not a first attempt, e.g. the status loop's) :func:`connected` answers at once, so the step
reports an unreachable ZooKeeper without having waited. Either way no pool thread waits for a network.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from kazoo.client import KazooClient

if TYPE_CHECKING:
    from rebalanser_operator.zkpool import ZooKeeperPool

_first_attempt: contextvars.ContextVar[bool] = contextvars.ContextVar("rebalanser_first_attempt", default=False)


class AwaitConnection(Exception):
    """A first attempt met a session that is not connected yet: wait for ``client``, then try again."""

    def __init__(self, client: KazooClient) -> None:
        super().__init__("waiting for a ZooKeeper session")
        self.client = client


@contextmanager
def first_attempt() -> Iterator[None]:
    """Steps submitted inside this block (they copy the caller's context) are first attempts."""
    token = _first_attempt.set(True)
    try:
        yield
    finally:
        _first_attempt.reset(token)


def connected(pool: ZooKeeperPool, client: KazooClient) -> bool:
    """Whether ``client``'s session is connected now (never blocks); in a first attempt, a session not
    connected yet raises :class:`AwaitConnection` instead of answering False."""
    if pool.wait_connected(client, 0):
        return True
    if _first_attempt.get():
        raise AwaitConnection(client)
    return False


def wait_blocking(pool: ZooKeeperPool, client: KazooClient, timeout: float) -> None:
    """The caller's own thread waits (a test, a shutdown): never a pool thread's."""
    pool.wait_connected(client, timeout)


async def wait_async(pool: ZooKeeperPool, client: KazooClient, timeout: float) -> None:
    """Waits on the event loop (no thread at all) until ``client`` connects or ``timeout`` passes."""
    loop = asyncio.get_running_loop()
    ready = loop.create_future()

    def settle() -> None:
        if not ready.done():
            ready.set_result(None)

    def wake() -> None:  # on kazoo's thread, or at once
        try:
            loop.call_soon_threadsafe(settle)
        except RuntimeError:  # the loop is closed: nobody waits any more
            pass

    withdraw = pool.when_connected(client, wake)
    try:
        await asyncio.wait_for(ready, timeout)
    except TimeoutError:
        pass
    finally:
        withdraw()
