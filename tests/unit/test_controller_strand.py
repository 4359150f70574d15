"""The strand a group's controller runs its steps on: one at a time, in order, inline when nested."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from rebalanser_operator.controller.strand import Strand

WAIT = 10.0


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    executor = ThreadPoolExecutor(max_workers=8)
    yield executor
    executor.shutdown(wait=True)


def test_steps_never_overlap_and_run_in_the_order_submitted(pool: ThreadPoolExecutor) -> None:
    strand = Strand(pool)
    running = 0
    overlaps: list[int] = []
    order: list[int] = []

    def step(i: int) -> int:
        nonlocal running
        running += 1
        if running > 1:
            overlaps.append(i)
        order.append(i)
        running -= 1
        return i

    futures = [strand.submit(lambda i=i: step(i)) for i in range(500)]
    assert [f.result(WAIT) for f in futures] == list(range(500))
    assert order == list(range(500)) and not overlaps


def test_two_strands_run_in_parallel(pool: ThreadPoolExecutor) -> None:
    first, second = Strand(pool), Strand(pool)
    both = threading.Barrier(2, timeout=WAIT)  # breaks (fails the step) unless both run at once
    a, b = first.submit(both.wait), second.submit(both.wait)
    a.result(WAIT)
    b.result(WAIT)


def test_a_nested_call_runs_inline_instead_of_waiting_for_itself(pool: ThreadPoolExecutor) -> None:
    strand = Strand(pool)
    assert strand.call(lambda: strand.call(lambda: strand.on_strand()), timeout=WAIT) is True
    assert not strand.on_strand()


def test_a_failing_step_fails_only_its_own_future(pool: ThreadPoolExecutor) -> None:
    strand = Strand(pool)

    def boom() -> None:
        raise RuntimeError("boom")

    failed, after = strand.submit(boom), strand.submit(lambda: "next")
    with pytest.raises(RuntimeError, match="boom"):
        failed.result(WAIT)
    assert after.result(WAIT) == "next"


def test_a_step_runs_in_the_submitters_context_variables(pool: ThreadPoolExecutor) -> None:
    import contextvars

    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")
    strand = Strand(pool)
    var.set("kopf's poster")
    assert strand.submit(var.get).result(WAIT) == "kopf's poster"


def test_a_step_given_a_context_runs_in_a_copy_of_it_even_an_empty_one(pool: ThreadPoolExecutor) -> None:
    import contextvars

    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")
    strand = Strand(pool)
    var.set("the submitter's")
    home = contextvars.copy_context()
    var.set("the poll's")

    def change() -> str:
        var.set("changed by the step")
        return "done"

    assert strand.submit(var.get, home).result(WAIT) == "the submitter's"
    assert strand.submit(change, home).result(WAIT) == "done" and home[var] == "the submitter's"  # a copy
    assert strand.submit(var.get, contextvars.Context()).result(WAIT) == "unset"


def test_a_shut_down_pool_fails_the_step_instead_of_hanging() -> None:
    executor = ThreadPoolExecutor(max_workers=1)
    executor.shutdown()
    with pytest.raises(RuntimeError):
        Strand(executor).submit(lambda: 1).result(WAIT)


def test_steps_queued_when_the_pool_shuts_down_fail_instead_of_hanging() -> None:
    executor = ThreadPoolExecutor(max_workers=1)
    blocker = threading.Event()
    executor.submit(blocker.wait, WAIT)  # the only thread is busy: the strand's drain stays queued
    strand = Strand(executor)
    queued = strand.submit(lambda: 1)
    executor.shutdown(wait=False, cancel_futures=True)
    blocker.set()
    with pytest.raises(RuntimeError, match="shut down"):
        queued.result(WAIT)
