"""The worker CLI's event stream is the evidence the checks and the model's conformance read: every
stop of work is reported, also when the (simulated) stop handler fails."""
from __future__ import annotations

import io
import json

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
