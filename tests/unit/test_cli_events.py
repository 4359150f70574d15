"""The worker CLI's event stream is the evidence the checks and the model's conformance read: every
stop of work is reported, also when the (simulated) stop handler fails."""
from __future__ import annotations

import io
import json
import time

import pytest
from rebalanser.cli import EventLog, SimulatedWork


def _events(out: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_a_failing_stop_handler_still_reports_revoked() -> None:
    out = io.StringIO()
    work = SimulatedWork(EventLog("w0", True, out), tick=0.1, stop_behaviour="fail")
    work.on_assigned({"a": 7, "b": 7})
    with pytest.raises(RuntimeError, match="simulated stop failure"):
        work.on_revoked(["a"])
    revoked = [e for e in _events(out) if e["event"] == "revoked"]
    assert revoked and revoked[0]["resources"] == ["a"], _events(out)


def test_a_slow_start_handler_reports_assigned_when_called_and_works_once_it_returns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The model's Start is the library's call of the handler (conformance reads ``assigned`` as it): the
    event comes at once, the work (and so every tick) only once the simulated start has returned."""
    slept: list[float] = []
    real_sleep = time.sleep

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        real_sleep(seconds)

    class Probe(io.StringIO):
        """Notes, as each event is written, whether the simulated start had begun its delay and what the
        work held (read on the writing thread: no other thread's timing decides it)."""

        def write(self, text: str) -> int:
            at_write.append((list(slept), dict(work._resources)))
            return super().write(text)

    at_write: list[tuple[list[float], dict[str, int]]] = []
    out = Probe()
    work = SimulatedWork(EventLog("w0", True, out), tick=0.1, start_delay=0.3)
    monkeypatch.setattr(time, "sleep", sleep)
    began = time.monotonic()
    work.on_assigned({"a": 7})
    assert time.monotonic() - began >= 0.3 and slept == [0.3]
    assert [e["event"] for e in _events(out)] == ["assigned"]
    assert at_write == [([], {})], "the event must be written before the delay, the work begun after it"
    assert work._resources == {"a": 7}


class ClosedPipe(io.StringIO):
    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")


def test_a_closed_output_calls_on_closed_once_and_silences_the_rest() -> None:
    """``rebalanser worker | head``: the worker leaves as on SIGTERM, and nothing more fails on stdout."""
    calls: list[int] = []
    log = EventLog("w0", True, ClosedPipe())
    log.on_closed = lambda: calls.append(1)
    for _ in range(3):
        log.emit("tick", resource="a", token=1)
    assert calls == [1]


def test_without_json_ticks_are_counted_not_printed() -> None:
    out = io.StringIO()
    log = EventLog("w0", False, out, summary_interval=0.01)
    log.emit("assigned", resources=["a", "b"], token=3)
    for _ in range(50):
        log.emit("tick", resource="a", token=3)
    assert out.getvalue().splitlines() == ["[w0] assigned resources=a,b token=3"]
    log.start_summaries()
    deadline = time.monotonic() + 10
    while "working on" not in out.getvalue() and time.monotonic() < deadline:
        time.sleep(0.01)
    log.close()
    assert "[w0] working on 2 resources: a, b; 50 units of work in the last 0.01 s" in out.getvalue()
