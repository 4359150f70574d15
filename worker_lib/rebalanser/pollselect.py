"""kazoo's threading handler with a ``select`` that costs one system call instead of five.

kazoo's connection thread waits in ``handler.select`` before every message it reads and every request
it sends (``rebalanser.bufferedreads`` cut the count; each one is still there). kazoo's own ``select``
builds a ``selectors.DefaultSelector`` for each call: on Linux an epoll descriptor created, two
descriptors registered, the wait, and the descriptor closed, all through the ``selectors`` module's
Python layer. In a process of 25 members at a join of N = 50 that was about a tenth of the time the
process held the interpreter lock (py-spy), time every other member's thread waited for.

:func:`poll_select` answers the same question with one ``poll`` call (no descriptor of its own, any
descriptor number, as kazoo's). :class:`PollingHandler` is kazoo's handler with it.
"""

from __future__ import annotations

import math
import select
from collections.abc import Sequence
from typing import Any

from kazoo.handlers.threading import SequentialThreadingHandler
from kazoo.handlers.utils import fileobj_to_fd

_READ = select.POLLIN
_WRITE = select.POLLOUT
_READY_READ = ~_WRITE  # anything but writability: data, hang-up, error (as ``selectors`` counts it)
_READY_WRITE = ~_READ


def poll_select(rlist: Sequence[Any], wlist: Sequence[Any], xlist: Sequence[Any],
                timeout: float | None = None) -> tuple[list[Any], list[Any], list[Any]]:
    """Like kazoo's ``selector_select``: the objects of ``rlist`` readable and of ``wlist`` writable
    within ``timeout`` seconds (None: no limit); ``xlist`` is never reported. A descriptor that is not
    open raises ValueError, as kazoo's does."""
    if timeout is not None:
        if not isinstance(timeout, int | float):
            raise TypeError("timeout must be a number")
        if timeout < 0:
            raise ValueError("timeout must be non-negative")
    masks: dict[int, int] = {}
    readers: dict[int, list[Any]] = {}
    writers: dict[int, list[Any]] = {}
    for objects, mask, table in ((rlist, _READ, readers), (wlist, _WRITE, writers)):
        for obj in objects:
            fd = fileobj_to_fd(obj)
            masks[fd] = masks.get(fd, 0) | mask
            table.setdefault(fd, []).append(obj)
    poller = select.poll()
    for fd, mask in masks.items():
        poller.register(fd, mask)
    ready = poller.poll(None if timeout is None else math.ceil(timeout * 1000))
    readable: list[Any] = []
    writable: list[Any] = []
    for fd, events in ready:
        if events & select.POLLNVAL:
            raise ValueError("Invalid event mask or fd")
        if events & _READY_READ and fd in readers:
            readable.extend(readers[fd])
        if events & _READY_WRITE and fd in writers:
            writable.extend(writers[fd])
    return readable, writable, []


class PollingHandler(SequentialThreadingHandler):  # type: ignore[misc]
    """kazoo's threading handler, waiting with :func:`poll_select`."""

    def select(self, *args: Any, **kwargs: Any) -> tuple[list[Any], list[Any], list[Any]]:
        return poll_select(*args, **kwargs)
