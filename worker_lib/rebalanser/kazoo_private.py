"""Every use of kazoo's private surface, in one place (issue 28, 7).

kazoo has no public way to send a request it does not know (``setWatches``, ``getEphemerals``), to
set or drop a watcher in its table without a read, to learn the negotiated session timeout inside the
handshake, or to read the socket in large chunks. The modules that need one of those go through the
names here, and ``tests/unit/test_kazoo_private.py`` checks that each private name this module and
its subclasses of kazoo's connection rely on exists, with the signature they assume: an upgrade of
kazoo that changes one fails that test, not a member at run time.

What is private, and who uses it:

- ``KazooClient._call(request, async_object)``: sends a request object (``serialize``,
  ``deserialize``, ``type``) through kazoo's queue (:mod:`rebalanser.setwatches`,
  :mod:`rebalanser.ephemerals`, the claim transactions of :mod:`rebalanser.claims`).
- ``KazooClient._queue``, ``KazooClient._state`` and ``ConnectionHandler._write_sock``: what ``_call``
  uses, for :func:`send_all` (the chunk reads of :mod:`rebalanser.storage`), which queues several
  requests and wakes the connection once.
- ``KazooClient._data_watchers``: path (with the chroot) -> set of watchers; kazoo fires and pops
  them when a notification for the path arrives (:mod:`rebalanser.setwatches`, :mod:`rebalanser.claims`).
- ``kazoo.protocol.paths._prefix_root``: a path with the client's chroot.
- ``KazooClient._connection``, replaced by a subclass of ``ConnectionHandler`` through ``__class__``
  (:mod:`rebalanser.session`); the subclasses override ``_invoke`` (:mod:`rebalanser.session`),
  ``_read`` and ``_read_socket`` (:mod:`rebalanser.bufferedreads`), ``_send_request`` (one queued
  request sent; :mod:`rebalanser.batchedsends`), and use ``_socket``, ``_read_sock`` (the wake-up
  pipe: a byte per queued request), ``client._queue`` (the requests not yet sent),
  ``_socket_error_handling``, ``handler`` and ``CLOSE_RESPONSE``.
- ``KazooClient._session_timeout``: the requested session timeout, in milliseconds.
- ``KazooClient._session_callback(state)``: called with every ``KeeperState`` the session goes through
  (expired, auth failed, closed as well as connected); :class:`StateObservingClient` reports each one
  (the operator's session close, ``rebalanser_operator.failover.sessionclose``, must tell an
  attach's "expired" from a drop).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionClosedError
from kazoo.interfaces import IAsyncResult
from kazoo.protocol.connection import CLOSE_RESPONSE, ConnectionHandler
from kazoo.protocol.paths import _prefix_root
from kazoo.protocol.states import KeeperState, WatchedEvent

_REFUSING = (KeeperState.AUTH_FAILED, KeeperState.CLOSED, KeeperState.EXPIRED_SESSION)

__all__ = [
    "CLOSE_RESPONSE", "ConnectionHandler", "StateObservingClient", "add_data_watcher", "discard_data_watcher",
    "full_path", "requested_timeout", "send", "send_all", "use_connection_class",
]

Watcher = Callable[[WatchedEvent], None]


def full_path(zk: KazooClient, path: str, trailing: bool = False) -> str:
    """``path`` as the server knows it: with the client's chroot (``trailing``: keep a final slash)."""
    return str(_prefix_root(zk.chroot or "", path, trailing=trailing))


def send(zk: KazooClient, request: Any) -> IAsyncResult:
    """Sends ``request`` (an object with ``type``, ``serialize()`` and ``deserialize(data, offset)``)
    through kazoo's request queue; its result holds the answer (or the error)."""
    result: IAsyncResult = zk.handler.async_result()
    zk._call(request, result)
    return result


def send_all(zk: KazooClient, requests: list[Any]) -> list[IAsyncResult]:
    """Sends ``requests`` (as :func:`send` does) in order, waking kazoo's connection once for all of
    them: one system call instead of one per request, each of which gives the interpreter lock up
    and waits to have it back behind every other thread of the process."""
    results: list[IAsyncResult] = [zk.handler.async_result() for _ in requests]
    if zk._state in _REFUSING or len(requests) < 2:
        for request, result in zip(requests, results, strict=True):
            zk._call(request, result)  # kazoo answers each with its error
        return results
    zk._queue.extend(zip(requests, results, strict=True))
    try:
        zk._connection._write_sock.send(b"\0" * len(requests))
    except Exception:  # closed under us, as kazoo's _call: each request fails
        for result in results:
            result.set_exception(ConnectionClosedError("Connection has been closed"))
    return results


def add_data_watcher(zk: KazooClient, server_path: str, watcher: Watcher) -> None:
    """Registers ``watcher`` as a data watcher of ``server_path`` (with the chroot) in kazoo's table,
    as a read with a watch does when its answer comes."""
    zk._data_watchers[server_path].add(watcher)


def discard_data_watcher(zk: KazooClient, server_path: str, watcher: Watcher) -> None:
    """Takes ``watcher`` off ``server_path`` in kazoo's table (the server's watch stays: its
    notification then finds nobody to tell)."""
    watchers = zk._data_watchers
    found = watchers.get(server_path)
    if found is not None:
        found.discard(watcher)
        if not found:
            watchers.pop(server_path, None)


def requested_timeout(zk: KazooClient) -> float:
    """The session timeout the client asks for, in seconds (the server may negotiate another)."""
    return float(zk._session_timeout) / 1000.0


def use_connection_class(zk: KazooClient, cls: type[ConnectionHandler]) -> None:
    """Makes the client's connection an instance of ``cls``, a subclass of kazoo's ``ConnectionHandler``
    that adds no state of its own at construction (before :meth:`KazooClient.start`)."""
    zk._connection.__class__ = cls


class StateObservingClient(KazooClient):  # type: ignore[misc]
    """A ``KazooClient`` that reports every ``KeeperState`` of its session to :meth:`on_state` before
    kazoo acts on it (kazoo's listeners see only connected, suspended and lost)."""

    def on_state(self, state: KeeperState) -> None:
        """Called on kazoo's connection thread with each state; override it (it must not block)."""

    def _session_callback(self, state: KeeperState) -> None:
        self.on_state(state)
        super()._session_callback(state)
