"""One group's steps, one at a time, on a shared thread pool: the thread the group's state belongs to.

    strand = Strand(executor)
    future = strand.submit(step)        # from any thread; runs after the steps submitted before it
    value = strand.call(step)           # the same, waiting for the outcome (inline on the strand)

Guarantees: the steps of one strand never overlap, and run in the order they were submitted; each
sees everything the steps before it wrote (a lock hands the queue over between threads). A step that
raises fails its own future only. A step submitted from a running step of the same strand with
:meth:`Strand.call` runs at once, inline (no deadlock). Steps of different strands run in parallel,
on at most the pool's threads; a strand holds no thread while it has nothing to do. When the pool shuts
down, steps that have not started fail (with :class:`RuntimeError`) instead of leaving their callers
waiting.
"""

from __future__ import annotations

import contextvars
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any, TypeVar

T = TypeVar("T")

_Job = tuple[Callable[[], Any], "Future[Any]", contextvars.Context]


class Strand:
    def __init__(self, executor: Executor) -> None:
        self._executor = executor
        self._lock = threading.Lock()
        self._jobs: deque[_Job] = deque()
        self._draining = False
        self._thread: int | None = None

    def submit(self, step: Callable[[], T], context: contextvars.Context | None = None) -> Future[T]:
        """Queues ``step``, run in a copy of the caller's context variables (kopf's Event poster), or of
        ``context``."""
        future: Future[T] = Future()
        with self._lock:
            self._jobs.append((step, future, contextvars.copy_context() if context is None else context.copy()))
            start, self._draining = not self._draining, True
        if start:
            try:
                self._executor.submit(self._drain).add_done_callback(self._drained)
            except RuntimeError as exc:  # the pool is shut down (the operator stops)
                self._abandon(exc)
        return future

    def _drained(self, drain: Future[None]) -> None:
        if drain.cancelled():  # the pool shut down before it ran: nobody may wait for ever
            self._abandon(RuntimeError("the operator's thread pool shut down"))

    def _abandon(self, exc: BaseException) -> None:
        with self._lock:
            self._draining = False
            jobs, self._jobs = list(self._jobs), deque()
        for _, waiting, _ in jobs:
            if waiting.set_running_or_notify_cancel():
                waiting.set_exception(exc)

    def call(self, step: Callable[[], T], timeout: float | None = None) -> T:
        """Runs ``step`` on the strand and returns its outcome (inline when already on the strand)."""
        if self.on_strand():
            return step()
        return self.submit(step).result(timeout)

    def on_strand(self) -> bool:
        """Whether the calling thread is running one of this strand's steps."""
        return self._thread == threading.get_ident()

    def _drain(self) -> None:
        while True:
            with self._lock:
                if not self._jobs:
                    self._draining = False
                    return
                step, future, context = self._jobs.popleft()
            if not future.set_running_or_notify_cancel():
                continue
            self._thread = threading.get_ident()
            try:
                result = context.run(step)
            except BaseException as exc:
                future.set_exception(exc)
            else:
                future.set_result(result)
            finally:
                self._thread = None
