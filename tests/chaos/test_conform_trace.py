"""The conformance traces' mapping of worker events to model steps (tests/chaos/trace.py; pure)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.chaos.trace import JUST_BEFORE_NS, events_of, record_outside_delete, step_lines, trace_lines


def _ev(ts: int, member: str, event: str, **fields: Any) -> dict[str, Any]:
    return {"ts": ts, "member": member, "event": event, **fields}


def _steps(events: list[dict[str, Any]]) -> list[str]:
    return [line for line in trace_lines(events) if not line.startswith(("algo", "join", "note", "tick"))]


def test_work_stops_at_expiry_even_when_its_callback_overruns() -> None:
    """The library's tokens go with the session: the work stops at ``expired`` (as the model's new
    session stops it), not when the hung callback returns or the member steps aside later."""
    events = [
        _ev(1, "w1", "session", state="connected"),
        _ev(2, "w1", "assigned", resources=["r1"], token=5),
        _ev(3, "w1", "session", state="suspended"),
        _ev(4, "w1", "session", state="expired"),
        _ev(5, "w0", "assigned", resources=["r1"], token=9),
        _ev(6, "w1", "session", state="connected"),
        _ev(7, "w1", "session", state="standby"),
        _ev(8, "w1", "revoked", resources=["r1"]),
        _ev(9, "w1", "session", state="rejoining"),
    ]
    assert _steps(events) == [
        "start w1 r1 5", "suspend w1", "stop w1 r1", "expired w1", "start w0 r1 9", "standby w1", "rejoin w1"]


def test_a_prompt_revoked_after_expiry_is_the_callback_returning() -> None:
    events = [
        _ev(1, "w1", "session", state="connected"),
        _ev(2, "w1", "assigned", resources=["r1", "r2"], token=5),
        _ev(3, "w1", "session", state="expired"),
        _ev(4, "w1", "revoked", resources=["r1", "r2"]),
        _ev(5, "w1", "session", state="connected"),
        _ev(6, "w1", "assigned", resources=["r1"], token=8),
    ]
    lines = list(trace_lines(events))
    assert not [line for line in lines if line.startswith("unmapped")], lines
    assert _steps(events) == ["start w1 r1 5", "start w1 r2 5", "stop w1 r1", "stop w1 r2", "expired w1",
                              "start w1 r1 8"]


def test_bad_data_and_a_waiting_join_are_folded() -> None:
    events = [
        _ev(1, "w1", "session", state="connected"),
        _ev(2, "w1", "session", state="waiting"),
        _ev(3, "w1", "assigned", resources=["r1"], token=5),
        _ev(4, "w1", "error", path="/g/config", reason="not JSON"),
    ]
    lines = list(trace_lines(events))
    assert not [line for line in lines if line.startswith("unmapped")], lines
    assert _steps(events) == ["start w1 r1 5"]


def test_a_process_id_used_again_is_another_member(tmp_path: Path) -> None:
    """A long campaign reuses process ids: a process after one that stopped is a new member."""
    records = [
        {"event": "session", "id": "w1", "ts": 1, "state": "connected", "_pid": 7},
        {"event": "stopped", "id": "w1", "ts": 2, "_pid": 7},
        {"event": "session", "id": "w1", "ts": 3, "state": "connected", "_pid": 8},
        {"event": "stopped", "id": "w1", "ts": 4, "_pid": 8},
        {"event": "session", "id": "w1", "ts": 5, "state": "connected", "_pid": 7},
    ]
    (tmp_path / "w1.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    assert [e["member"] for e in events_of(tmp_path)] == ["w1/7", "w1/7", "w1/8", "w1/8", "w1/7.1"]


def test_a_coordinator_killed_as_the_step_begins_is_in_its_preamble() -> None:
    """A process killed at a step's start has no event in the step: its last events, just before,
    make it live at the start (in office, working), so that its followers' work has a cause; a
    process silent since an earlier step is not."""
    second = 1_000_000_000
    start = 100 * second
    events = [
        _ev(1, "w0", "session", state="connected"),
        _ev(2, "w0", "role", role="coordinator"),
        _ev(3, "w0", "assigned", resources=["r0"], token=4),
        _ev(4, "w1", "session", state="connected"),
        _ev(5, "w1", "assigned", resources=["r1"], token=5),
        _ev(6, "w2", "session", state="connected"),
        _ev(7, "w2", "assigned", resources=["r2"], token=6),
        _ev(start - 10 * JUST_BEFORE_NS, "w2", "tick", resource="r2", token=6),
        _ev(start - JUST_BEFORE_NS // 2, "w0", "tick", resource="r0", token=4),
        _ev(start + second, "w1", "tick", resource="r1", token=5),
    ]
    lines = [line.split("  #")[0] for line in step_lines(events, "resource", start, start + 2 * second)]
    preamble = lines[:6]  # the members in any order, then who is in office, then who works on what
    assert preamble[0] == "algo resource" and preamble[3] == "office w0", lines
    assert set(preamble[1:3]) == {"join w0", "join w1"}, lines
    assert set(preamble[4:6]) == {"start w0 r0 0", "start w1 r1 0"}, lines
    assert not [line for line in lines if "w2" in line], lines


def test_an_outside_deletion_recorded_by_the_explorer_is_a_delete_line_in_its_place(tmp_path: Path) -> None:
    """The explorer records each claim it deletes (``outside.jsonl``, stamped when the delete was sent):
    the trace has a ``delete`` line there, between the owner's events, and no member of its own."""
    with open(tmp_path / "w1.jsonl", "w") as out:
        for record in [
            {"ts": 1, "id": "w1", "_pid": 7, "event": "assigned", "resources": ["r1"], "token": 5},
            {"ts": 3, "id": "w1", "_pid": 7, "event": "session", "state": "suspended"},
            {"ts": 6, "id": "w1", "_pid": 7, "event": "revoked", "resources": ["r1"]},
        ]:
            out.write(json.dumps(record) + "\n")
    record_outside_delete(tmp_path, "r1", 4)
    lines = list(trace_lines(events_of(tmp_path)))
    assert lines == ["algo resource", "join w1", "start w1 r1 5", "suspend w1", "delete r1", "stop w1 r1"]


def test_a_claim_deleted_while_its_owner_was_away_stops_at_its_reconnection() -> None:
    """At the handshake every claim stops counting until the re-check, which finds the deleted one gone:
    its work has stopped by the owner's ``reconnected``, whatever its loop is busy with; the ``revoked``
    that comes once the loop has run the stop callback is the callback returning. A claim not deleted
    (r2) counts again after the re-check."""
    events = [
        _ev(1, "w1", "assigned", resources=["r1", "r2"], token=5),
        _ev(2, "w1", "session", state="suspended"),
        {"ts": 3, "member": "outside", "id": "outside", "event": "claim-deleted", "resource": "r1"},
        _ev(4, "w0", "assigned", resources=["r1"], token=9),
        _ev(5, "w1", "session", state="reconnected"),
        _ev(6, "w1", "tick", resource="r2", token=5),
        _ev(7, "w1", "revoked", resources=["r1"]),
    ]
    lines = list(trace_lines(events))
    assert not [line for line in lines if line.startswith("unmapped")], lines
    assert _steps(events) == ["start w1 r1 5", "start w1 r2 5", "suspend w1", "delete r1", "start w0 r1 9",
                              "stop w1 r1", "resume w1"]
    assert "note w1 revoked r1: its callback returned (stopped before)" in lines


def test_two_drops_reported_before_their_two_reconnections_are_one_disconnection() -> None:
    """kazoo dropped, reconnected and dropped again before the library reported the first reconnection:
    the events read suspended, suspended, reconnected, reconnected. The model's member is disconnected
    once and re-checks once (a second ``resume`` has no step to match: explorer point reconnect-start
    #5 drop did not conform)."""
    events = [
        _ev(1, "w1", "session", state="connected"),
        _ev(2, "w1", "assigned", resources=["r1"], token=5),
        _ev(3, "w1", "session", state="suspended"),
        _ev(4, "w1", "session", state="suspended"),
        _ev(5, "w1", "session", state="reconnected"),
        _ev(6, "w1", "session", state="reconnected"),
    ]
    lines = list(trace_lines(events))
    assert _steps(events) == ["start w1 r1 5", "suspend w1", "resume w1"]
    assert "note w1 reconnected again (its disconnection between was not reported)" in lines
