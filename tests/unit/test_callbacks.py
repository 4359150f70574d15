"""The callback runner on its own: order, overruns, and which calls wait for an overrunning one."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from rebalanser.callbacks import CallbackOverrun, CallbackRunner, RunnerClosed


@pytest.fixture
def runner() -> Iterator[CallbackRunner]:
    r = CallbackRunner("test-callbacks")
    r.start()
    yield r
    r.close()


def test_calls_run_one_after_another_on_one_dedicated_thread(runner: CallbackRunner) -> None:
    threads: list[threading.Thread] = []
    for i in range(3):
        assert runner.call(f"c{i}", {"a"}, lambda: threads.append(threading.current_thread()), 5) is None
    assert len(set(threads)) == 1 and threads[0] is not threading.current_thread()


def test_what_a_callback_raises_is_returned_not_raised(runner: CallbackRunner) -> None:
    def boom() -> None:
        raise ValueError("user bug")

    failure = runner.call("boom", {"a"}, boom, 5)
    assert isinstance(failure, ValueError)
    assert runner.call("next", {"a"}, lambda: None, 5) is None, "the runner survives a raising callback"


def test_a_call_on_the_resources_of_an_overrunning_one_waits_until_it_returns(runner: CallbackRunner) -> None:
    release, events = threading.Event(), []

    def slow() -> None:
        events.append("slow started")
        release.wait(10)
        events.append("slow returned")

    with pytest.raises(CallbackOverrun):
        runner.call("slow", {"a", "b"}, slow, 0.05)
    with pytest.raises(CallbackOverrun):
        runner.call("same", {"b"}, lambda: events.append("same ran"), 0.2)
    assert events == ["slow started"], "a call sharing a resource ran while the overrunning one was going"
    release.set()
    runner.call("after", {"b"}, lambda: events.append("after ran"), 5)
    assert events == ["slow started", "slow returned", "same ran", "after ran"]


def test_a_call_on_other_resources_goes_ahead_of_an_overrunning_one(runner: CallbackRunner) -> None:
    release, ran = threading.Event(), threading.Event()
    try:
        with pytest.raises(CallbackOverrun):
            runner.call("stuck", {"a"}, lambda: release.wait(10), 0.05)
        assert runner.call("other", {"b"}, ran.set, 5) is None
        assert ran.is_set() and not release.is_set()
    finally:
        release.set()


def test_a_closed_runner_takes_no_calls(runner: CallbackRunner) -> None:
    runner.close()
    with pytest.raises(RunnerClosed):
        runner.call("late", {"a"}, lambda: None, 1)


def test_blocked_names_the_resources_of_calls_still_overrunning_and_when_clear_waits_for_them(
    runner: CallbackRunner,
) -> None:
    release, cleared = threading.Event(), threading.Event()
    assert runner.blocked({"a"}) == set() and not runner.blocked_any()
    runner.when_clear(cleared.set)
    assert cleared.is_set(), "with nothing overrunning, when_clear calls at once"
    cleared.clear()
    try:
        with pytest.raises(CallbackOverrun):
            runner.call("stuck", {"a", "b"}, lambda: release.wait(10), 0.05)
        assert runner.blocked({"b", "c"}) == {"b"} and runner.blocked_any()
        runner.when_clear(cleared.set)
        assert not cleared.wait(0.2), "when_clear called back while a call was still overrunning"
    finally:
        release.set()
    assert cleared.wait(5), "when_clear never called back after the overrunning call returned"
    assert runner.blocked({"a", "b"}) == set() and not runner.blocked_any()
