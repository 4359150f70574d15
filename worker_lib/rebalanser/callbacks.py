"""Where ``on_assigned`` and ``on_revoked`` run: one dedicated callback thread, one call at a time.

The member waits for each call, at most a timeout. A call still running then has *overrun*: the member
stops waiting for it and goes on, and the call keeps the thread it runs on. The runner then moves to a
fresh thread, so that one stuck callback cannot stop the member from starting work on other resources;
every later call that concerns any resource of an overrunning one first waits until that one has
returned, on a thread of its own. So calls about one resource never overlap and run in the order the
member made them, and calls never overlap at all unless one has overrun. The member asks which
resources an overrunning call still concerns (:meth:`CallbackRunner.blocked`) before it takes them on,
and steps out of its group until every such call has returned (:meth:`CallbackRunner.when_clear`).
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections.abc import Callable, Collection
from concurrent.futures import Future

from rebalanser.recipes._executor import SerialExecutor

log = logging.getLogger(__name__)


class CallbackOverrun(Exception):
    """The call did not return within its timeout; it goes on running."""


class RunnerClosed(RuntimeError):
    """The runner no longer takes calls (the member has closed)."""


class CallbackRunner:
    """Runs callbacks for the member (call from one thread only: the member's)."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._generation = 0
        self._executor = self._new_executor()
        self._overrunning: list[tuple[frozenset[str], Future[BaseException | None]]] = []
        self._closed = False

    def _new_executor(self) -> SerialExecutor:
        self._generation += 1
        return SerialExecutor(self._name if self._generation == 1 else f"{self._name}-{self._generation}")

    def start(self) -> None:
        self._executor.start()

    def call(
        self, label: str, resources: Collection[str], fn: Callable[[], object], timeout: float
    ) -> BaseException | None:
        """Runs ``fn`` after every earlier call has returned, or after the overrunning ones that share a
        resource with it; returns what it raised (None if nothing). Raises :class:`CallbackOverrun`
        when it has not returned within ``timeout`` and :class:`RunnerClosed` once it is closed."""
        if self._closed:
            raise RunnerClosed(f"{label} not run: the callback runner is closed")
        mine = frozenset(resources)
        self._overrunning = [(rs, f) for rs, f in self._overrunning if not f.done()]
        before = [f for rs, f in self._overrunning if rs & mine]

        def run() -> BaseException | None:
            if before:
                concurrent.futures.wait(before)
            try:
                fn()
            except BaseException as exc:  # handed to the member, never raised on the callback thread
                return exc
            return None

        future = self._executor.submit(run)
        if before:
            self._set_aside(label, mine, future)  # it waits on this thread; later calls get a new one
        try:
            return future.result(timeout)
        except TimeoutError:
            pass
        if not before:
            self._set_aside(label, mine, future)
        raise CallbackOverrun(f"{label} did not return within {timeout}s")

    def blocked(self, resources: Collection[str]) -> set[str]:
        """The resources among ``resources`` that an overrunning call (still running) concerns."""
        self._overrunning = [(rs, f) for rs, f in self._overrunning if not f.done()]
        mine = set(resources)
        return {r for rs, _ in self._overrunning for r in rs & mine}

    def blocked_any(self) -> bool:
        """Whether any overrunning call is still running."""
        return any(not f.done() for _, f in self._overrunning)

    def when_clear(self, fn: Callable[[], object]) -> None:
        """Calls ``fn`` (from another thread, or at once) once every call overrunning now has returned."""
        pending = [f for _, f in self._overrunning if not f.done()]
        if not pending:
            fn()
            return

        def wait() -> None:
            concurrent.futures.wait(pending)
            fn()

        threading.Thread(target=wait, name=f"{self._name}-clear", daemon=True).start()

    def _set_aside(self, label: str, resources: frozenset[str], future: Future[BaseException | None]) -> None:
        """The call keeps its thread, which ends once it returns; later calls run on a new one."""
        self._overrunning.append((resources, future))
        future.add_done_callback(lambda f: _log_late(label, f))
        self._executor.stop(timeout=0)
        self._executor = self._new_executor()
        self._executor.start()

    def close(self) -> None:
        """No more calls; a call still running is not waited for."""
        self._closed = True
        self._executor.stop(timeout=0)


def _log_late(label: str, future: Future[BaseException | None]) -> None:
    failure = None if future.cancelled() else future.result()
    if failure is not None:
        log.error("%s raised %r after the member had stopped waiting for it", label, failure)
