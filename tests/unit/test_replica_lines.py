"""The replicas' log evidence (tests/support/replicalines.py): what the replica tests conclude from the
``replica-serve``/``-write``/``-stop`` lines, on hand-written logs."""

from __future__ import annotations

import json

import pytest

from tests.support.replicalines import (
    Line,
    check_one_at_a_time,
    handovers,
    intervals,
    parse,
    serving_now,
    taken_after,
)

INF = float("inf")


def line(kind: str, member: str, at: float, token: int = 1, group: str = "ns/g") -> Line:
    return Line(kind, member, group, token, at)


def test_parse_finds_the_lines_in_json_logs_and_renames_the_member() -> None:
    text = "\n".join([
        json.dumps({"message": "replica-serve member=op-a group=ns/g token=7 at=100.250", "level": "INFO"}),
        json.dumps({"message": "something else"}),
        json.dumps({"message": "replica-write member=op-a group=ns/g token=7 at=100.500 phase=Stable"}),
    ])
    assert parse(text) == [Line("serve", "op-a", "ns/g", 7, 100.25), Line("write", "op-a", "ns/g", 7, 100.5)]
    assert {x.member for x in parse(text, member="op-a#1")} == {"op-a#1"}


def test_a_handover_with_a_growing_token_passes_and_its_gap_is_measured() -> None:
    lines = [line("serve", "a", 1.0, 1), line("write", "a", 1.5, 1), line("stop", "a", 2.0, 1),
             line("serve", "b", 2.3, 5), line("write", "b", 2.4, 5)]
    spans = check_one_at_a_time(lines)
    assert serving_now(spans) == {"ns/g": "b"}
    (moved,) = handovers(spans)
    assert (moved.before, moved.after) == ("a", "b") and moved.gap == pytest.approx(0.3)
    assert handovers(spans, since=2.1) == []


def test_overlapping_servers_are_refused() -> None:
    lines = [line("serve", "a", 1.0, 1), line("serve", "b", 1.5, 2), line("stop", "a", 2.0, 1)]
    with pytest.raises(AssertionError, match="served until"):
        check_one_at_a_time(lines)


def test_a_token_that_does_not_grow_is_refused() -> None:
    lines = [line("serve", "a", 1.0, 3), line("stop", "a", 2.0, 3), line("serve", "b", 2.5, 3)]
    with pytest.raises(AssertionError, match="did not grow"):
        check_one_at_a_time(lines)


def test_a_write_outside_the_writers_interval_is_refused() -> None:
    lines = [line("serve", "a", 1.0, 1), line("stop", "a", 2.0, 1), line("serve", "b", 2.5, 2),
             line("write", "a", 3.0, 1)]
    with pytest.raises(AssertionError, match="outside its writer's interval"):
        check_one_at_a_time(lines)


def test_a_killed_or_frozen_member_is_cut_at_its_fault() -> None:
    # "a" killed at 5.0 never writes its stop line; "b" takes over at 5.4.
    lines = [line("serve", "a", 1.0, 1), line("serve", "b", 5.4, 2)]
    with pytest.raises(AssertionError, match="served until"):
        check_one_at_a_time(lines)
    spans = check_one_at_a_time(lines, cut={"a": 5.0})
    assert spans["ns/g"] == [("a", 1, 1.0, 5.0), ("b", 2, 5.4, INF)]
    assert serving_now(spans) == {"ns/g": "b"}
    assert [round(h.gap, 3) for h in handovers(spans)] == [0.4]
    # a frozen one's stop line comes after its thaw: the cut still ends its interval at the freeze
    late = [*lines, line("stop", "a", 20.0, 1)]
    assert intervals(late, cut={"a": 5.0})["ns/g"][0] == ("a", 1, 1.0, 5.0)


def test_a_fault_times_only_the_takeovers_after_it() -> None:
    # "a" killed at 5.0: "b" takes ns/g over at 5.4 (and had served it before, at 2.0); ns/h moved to "c" at
    # 3.0, before the kill (the replicas' share changed): not the kill's takeover, left out, not an error.
    lines = [line("serve", "b", 2.0, 1), line("serve", "a", 3.5, 2), line("serve", "b", 5.4, 3),
             line("serve", "b", 6.0, 4), line("serve", "c", 3.0, 1, group="ns/h")]
    taken = taken_after(lines, {"ns/g", "ns/h"}, 5.0)
    assert {g: round(s, 3) for g, s in taken.items()} == {"ns/g": 0.4}
    assert taken_after(lines, {"ns/h"}, 5.0) == {}


def test_a_killed_workers_gaps_run_from_its_last_tick_to_the_next_by_another_instance() -> None:
    from tests.support.workergaps import tick_gaps_after

    def tick(member: str, pid: int, resource: str, ts: float) -> dict[str, object]:
        return {"event": "tick", "id": member, "_pid": pid, "resource": resource, "ts": int(ts * 1e9)}

    events = [tick("v", 0, "a", 9.8), tick("v", 0, "b", 9.9), tick("s", 0, "c", 10.1),
              tick("v", 1, "a", 11.0),  # the victim's restarted container: another instance
              tick("s", 0, "b", 12.4), tick("s", 0, "b", 12.5)]
    gaps = tick_gaps_after(events, "v", 0, {"a", "b", "z"}, int(10.0 * 1e9))
    assert gaps == {"a": pytest.approx(1.2), "b": pytest.approx(2.5)}
