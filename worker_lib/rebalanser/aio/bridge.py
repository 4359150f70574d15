"""From the member's threads to the user's event loop, never the other way round.

The member (the threaded :class:`rebalanser.client.Client`, the one protocol implementation) calls its
handler on its own callback thread. :class:`LoopBridge` turns such a call into a task on the user's
loop and waits for it *in that thread*: the loop only ever receives short ``call_soon_threadsafe``
hand-overs, so nothing the library does blocks it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any

from rebalanser.client import StopTimeoutError

log = logging.getLogger(__name__)

_POLL = 0.25  # how often a waiting thread looks whether the loop has been closed under it


class LoopClosed(RuntimeError):
    """The event loop the client runs on has been closed; nothing can run on it any more."""


class _Call:
    """One coroutine call on the loop, created and cancelled there, awaited from a thread."""

    def __init__(self, make: Callable[[], Coroutine[Any, Any, object]]) -> None:
        self._make = make
        self._task: asyncio.Task[object] | None = None
        self._cancelled = False
        # True once the call returned, False once it ended cancelled (a cancelled concurrent future
        # would not wake concurrent.futures.wait), or the exception it raised.
        self.done: concurrent.futures.Future[bool] = concurrent.futures.Future()

    def begin(self) -> None:  # on the loop
        if self._cancelled:
            self.done.set_result(False)
            return
        try:
            self._task = asyncio.ensure_future(self._make())
        except BaseException as exc:  # e.g. a handler method that is not ``async``
            self.done.set_exception(exc)
            return
        self._task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[object]) -> None:
        if task.cancelled():
            self.done.set_result(False)
        elif (exc := task.exception()) is not None:
            self.done.set_exception(exc)
        else:
            self.done.set_result(True)

    def cancel(self) -> None:  # on the loop
        self._cancelled = True
        if self._task is not None:
            self._task.cancel()


class LoopBridge:
    """Hands work to one event loop from other threads."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop

    def post(self, fn: Callable[..., object], *args: object) -> bool:
        """Schedules ``fn(*args)`` on the loop (False when the loop is closed: it is dropped)."""
        try:
            self.loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:
            return False
        return True

    def run(self, label: str, make: Callable[[], Coroutine[Any, Any, object]], timeout: float,
            grace: float) -> None:
        """Runs ``make()`` as a task on the loop and waits for it in this thread, at most ``timeout``; then
        cancels it and waits at most ``grace`` more for it to end. Raises what the coroutine raised,
        :class:`StopTimeoutError` when it was cancelled at the timeout, :class:`LoopClosed` when the
        loop is (or gets) closed."""
        call = _Call(make)
        if not self.post(call.begin):
            raise LoopClosed(f"{label} not run: the event loop is closed")
        if self._wait(label, call.done, timeout):
            if not call.done.result():
                raise RuntimeError(f"{label} was cancelled on the event loop before it returned")
            return
        self.post(call.cancel)
        ended = self._wait(label, call.done, grace)
        raise StopTimeoutError(f"{label} did not return within {timeout}s and was cancelled"
                               + ("" if ended else f"; it had not ended {grace}s later"))

    def _wait(self, label: str, done: concurrent.futures.Future[bool], seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        remaining = seconds
        while remaining > 0:
            finished, _ = concurrent.futures.wait([done], timeout=min(_POLL, remaining))
            if finished:
                return True
            if self.loop.is_closed():
                raise LoopClosed(f"{label} abandoned: the event loop was closed while it ran")
            remaining = deadline - time.monotonic()
        return done.done()
