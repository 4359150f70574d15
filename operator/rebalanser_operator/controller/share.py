"""The operator's worker threads, shared out among namespaces: each namespace's steps run on at most a
bounded share of them, so one namespace's slow groups cannot delay another's.

    shares = FairShare(executor, per_lane=8)
    lane = shares.lane("shop")          # an Executor for the groups of namespace "shop"
    future = lane.submit(work)          # runs on the shared pool once "shop" has fewer than 8 running

Guarantees: at most ``per_lane`` callables of one lane run at a time; the others wait in the lane's
queue (first in, first out) without holding a thread, and start as the lane's running ones finish.
Lanes never wait for each other: while one lane is full, another's callables start as soon as the pool
has a free thread. When the pool shuts down, the queued callables' futures are cancelled (a
:class:`~rebalanser_operator.controller.strand.Strand` then fails its steps instead of leaving their
callers waiting).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any, TypeVar

T = TypeVar("T")

_Queued = tuple[Callable[[], Any], "Future[Any]"]


class FairShare:
    def __init__(self, executor: Executor, per_lane: int) -> None:
        if per_lane < 1:
            raise ValueError("a lane needs at least one thread")
        self._executor = executor
        self.per_lane = per_lane
        self._lock = threading.Lock()
        self._lanes: dict[str, Lane] = {}

    def lane(self, key: str) -> Lane:
        with self._lock:
            lane = self._lanes.get(key)
            if lane is None:
                lane = self._lanes[key] = Lane(self._executor, self.per_lane)
            return lane

    def running(self, key: str) -> int:
        """How many of lane ``key``'s callables run now."""
        with self._lock:
            lane = self._lanes.get(key)
        return lane.running if lane is not None else 0


class Lane(Executor):
    """One namespace's view of the shared pool (see :class:`FairShare`)."""

    def __init__(self, executor: Executor, limit: int) -> None:
        self._executor = executor
        self._limit = limit
        self._lock = threading.Lock()
        self._queue: deque[_Queued] = deque()
        self.running = 0

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        future: Future[T] = Future()
        job = (lambda: fn(*args, **kwargs), future)
        with self._lock:
            start = self.running < self._limit
            if start:
                self.running += 1
            else:
                self._queue.append(job)
        if start:
            self._start(job)
        return future

    def _start(self, job: _Queued) -> None:
        fn, future = job
        try:
            started = self._executor.submit(self._run, fn, future)
        except RuntimeError:  # the pool is shut down
            self._cancel_all(future)
            return
        started.add_done_callback(lambda f: self._cancel_all(future) if f.cancelled() else None)

    def _run(self, fn: Callable[[], Any], future: Future[Any]) -> None:
        try:
            if future.set_running_or_notify_cancel():
                try:
                    result = fn()
                except BaseException as exc:
                    future.set_exception(exc)
                else:
                    future.set_result(result)
        finally:
            self._next()

    def _next(self) -> None:
        with self._lock:
            if not self._queue:
                self.running -= 1
                return
            job = self._queue.popleft()  # the slot passes to it
        self._start(job)

    def _cancel_all(self, first: Future[Any]) -> None:
        """The pool refused or dropped a callable: it and every queued one are cancelled."""
        with self._lock:
            jobs, self._queue = list(self._queue), deque()
            self.running = 0
        first.cancel()
        for _, future in jobs:
            future.cancel()
