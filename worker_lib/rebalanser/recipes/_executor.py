"""A single daemon thread that runs tasks in submission order.

Every recipe does its ZooKeeper work and runs user callbacks on threads like this one, never on kazoo's
connection thread (state listeners) or its event thread (watch callbacks), which are only used to hand
work over.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")
_Task = tuple[Callable[[], Any], "Future[Any]"]


class SerialExecutor:
    """Runs submitted callables one at a time, in order, on one named daemon thread."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._tasks: queue.SimpleQueue[_Task | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False

    @property
    def name(self) -> str:
        return self._name

    def start(self) -> None:
        with self._lock:
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()

    def submit(self, fn: Callable[[], T]) -> Future[T]:
        """Queues ``fn``; the future is cancelled if the executor is already stopped."""
        future: Future[T] = Future()
        with self._lock:
            if self._closed:
                future.cancel()
            else:
                self._tasks.put((fn, future))
        return future

    def spawn(self, fn: Callable[[], object]) -> None:
        """Queues ``fn`` without a caller waiting for it; its exceptions are logged."""
        self.submit(fn).add_done_callback(self._log_failure)

    def call_later(self, delay: float, fn: Callable[[], object]) -> None:
        timer = threading.Timer(delay, self.spawn, args=(fn,))
        timer.daemon = True
        timer.start()

    def is_current(self) -> bool:
        return threading.current_thread() is self._thread

    def stop(self, timeout: float = 10.0) -> None:
        """Runs what is already queued, then ends the thread (does not wait when called from it)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            thread = self._thread
            self._tasks.put(None)
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _run(self) -> None:
        while (task := self._tasks.get()) is not None:
            fn, future = task
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = fn()
            except BaseException as exc:  # handed to whoever holds the future
                future.set_exception(exc)
            else:
                future.set_result(result)

    def _log_failure(self, future: Future[Any]) -> None:
        if not future.cancelled() and future.exception() is not None:
            log.error("task on %s failed", self._name, exc_info=future.exception())
