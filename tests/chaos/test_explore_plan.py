"""The explorer's enumeration and its resumption, without a server: which points a scenario has, in
which order they are run, how shards split them, and what a later sitting reads back from the progress
files of an earlier one (:mod:`tests.chaos.explore`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import pytest

from tests.chaos.checks import Episode
from tests.chaos.explore import (
    ALL_FAULTS,
    SCENARIOS,
    Explorer,
    Point,
    Recording,
    _shard,
    doc_from_files,
    explored,
    in_away_window,
    markdown_lines,
    plan,
    progress_files,
    recorded,
    schedule,
    spread,
    unverified_starts,
)
from tests.chaos.proxy import BACKGROUND_OPS, CONNECT, FAULTS, GATED, RequestTap
from tests.support.zk import ZkCluster


def test_a_scenario_has_every_request_times_its_faults() -> None:
    join = SCENARIOS["join"]
    assert join.points(3) == [(i, f) for i in range(3) for f in FAULTS]


def test_the_failover_expiry_has_a_point_before_every_request_and_one_after_the_last() -> None:
    scenario = SCENARIOS["failover-expiry"]
    assert scenario.faults == (GATED,)
    assert scenario.points(7) == [(i, GATED) for i in range(8)]
    assert "failover" in scenario.connects  # the attach's handshake is a point of its own


def test_the_reconnection_seams_count_the_recheck_and_give_the_callback_its_time() -> None:
    for name in ("reconnect-stop", "reconnect-start"):
        scenario = SCENARIOS[name]
        assert 101 in scenario.also and scenario.callback_grace
        assert scenario.points(2) == [(i, f) for i in range(2) for f in FAULTS]


def test_a_start_under_a_claim_deleted_before_it_is_a_violation() -> None:
    deleted = [("r04", 17, 1_000)]
    before = {"event": "assigned", "id": "w1", "ts": 999, "resources": ["r04"], "token": 17}
    renewed = {"event": "assigned", "id": "w1", "ts": 2_000, "resources": ["r04"], "token": 19}
    assert unverified_starts([before, renewed], deleted) == []
    stale = {"event": "assigned", "id": "w1", "ts": 1_500, "resources": ["r03", "r04"], "token": 17}
    assert [c for c, _ in unverified_starts([stale], deleted)] == ["unverified"]


def test_the_plan_spreads_the_requests_and_leaves_out_what_was_done() -> None:
    join = SCENARIOS["join"]
    points = plan(join, 13, faults=["drop"])
    assert [i for i, _ in points] == spread(13)
    done = {("join", 0, "drop"), ("join", 8, "drop"), ("leave", 4, "drop")}
    assert [i for i, _ in plan(join, 13, faults=["drop"], done=done)] == [i for i in spread(13) if i not in (0, 8)]
    assert plan(join, 13, indices=[2], faults=None) == [(2, f) for f in FAULTS]
    after = plan(SCENARIOS["failover-expiry"], 7)
    assert sorted(after) == [(i, GATED) for i in range(8)] and after[0] == (0, GATED)


def _queues() -> list[list[Any]]:
    out = []
    for name, n in (("join", 5), ("failover-expiry", 3)):
        scenario = SCENARIOS[name]
        out.append([(scenario, None, i, f) for i, f in plan(scenario, n)])
    return out


def test_shards_split_the_whole_order_between_them_and_skip_what_was_done() -> None:
    queues = _queues()
    everything, todo = schedule(queues, (0, 1), set())
    assert everything == todo and len(everything) == 5 * 4 + 4
    assert [p[0].name for p in everything[:2]] == ["join", "failover-expiry"]  # the scenarios in turn
    shards = [schedule(queues, (k, 3), set())[0] for k in range(3)]
    assert sorted(repr(p) for shard in shards for p in shard) == sorted(map(repr, everything))
    first = everything[0]
    mine, left = schedule(queues, (0, 3), {(first[0].name, first[2], first[3])})
    assert mine == shards[0] and left == shards[0][1:]


def test_a_shard_is_k_of_n() -> None:
    assert _shard("2/3") == (1, 3)
    for bad in ("0/3", "4/3"):
        with pytest.raises(Exception, match="shard"):
            _shard(bad)


def _write(path: Path, records: list[dict[str, Any]], tail: str = "") -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + tail)


def test_a_later_sitting_reads_the_recordings_and_points_back_and_numbers_its_runs_on(tmp_path: Path) -> None:
    recording = Recording("failover-expiry", [("failover", 0, "connect"), ("failover", 1, "exists")], [])
    first = Point("failover-expiry", 2, GATED, "", -1, "after every request", True, seconds=4.0)
    second = Point("join", 0, "drop", "w2", 0, "create", True, [["overlap", "r01"]], seconds=9.0)
    _write(tmp_path / "points.jsonl", [{"recording": recording.__dict__}, first.to_dict()])
    # another shard's file, its last line cut short by a kill
    _write(tmp_path / "points.shard-2-of-2.jsonl", [second.to_dict()], tail='{"scenario": "join", "requ')
    files = progress_files(tmp_path)
    assert [f.name for f in files] == ["points.jsonl", "points.shard-2-of-2.jsonl"]
    assert explored(files) == {("failover-expiry", 2, GATED), ("join", 0, "drop")}
    again = recorded(files)["failover-expiry"]
    assert again.requests == recording.requests
    runs = tmp_path / "runs"
    (runs / "0007-join-0-drop").mkdir(parents=True)
    (runs / "shard-1-of-2-0003-join-1-drop").mkdir()
    explorer = Explorer(cast(ZkCluster, None), runs, recorded(files))
    assert explorer.resumed == {"failover-expiry"}
    assert explorer._dir("x").name == "0008-x"
    assert Explorer(cast(ZkCluster, None), runs, prefix="shard-1-of-2-")._dir("y").name == "shard-1-of-2-0004-y"


def test_the_report_counts_every_scenarios_own_product(tmp_path: Path) -> None:
    recording = Recording("failover-expiry", [("failover", 0, "connect"), ("failover", 1, "exists")], [])
    points = [Point("failover-expiry", i, GATED, "failover", i, "x", True, seconds=4.0) for i in range(3)]
    _write(tmp_path / "points.jsonl", [{"recording": recording.__dict__}, *(p.to_dict() for p in points)])
    doc = doc_from_files(progress_files(tmp_path))
    assert doc["faults"] == list(ALL_FAULTS)
    assert doc["scenarios"]["failover-expiry"]["product"] == 3
    text = "\n".join(markdown_lines(doc))
    assert "**3 points explored (of the product's 3" in text and "0 with violations" in text


def test_a_tap_counts_background_requests_and_handshakes_only_when_asked() -> None:
    setwatches = next(op for op, name in BACKGROUND_OPS.items() if name == "setWatches")
    plain, counting = RequestTap(), RequestTap(also=frozenset({setwatches}), connects=True)
    for tap in (plain, counting):
        tap.count(setwatches)
        tap.count(4)
    counting.count(CONNECT)
    assert plain.seen == ["getData"]
    assert counting.seen == ["setWatches", "getData", "connect"]
    gated = RequestTap(GATED, 1)
    assert [gated.count(op) for op in (3, 4)] == [False, True]


def test_the_failover_expiry_holds_the_live_member_to_what_it_took() -> None:
    assert SCENARIOS["failover-expiry"].steady == ("w0",)


def test_only_the_away_window_excuses_an_overlap() -> None:
    """An owner whose claim was deleted from outside while it was away may work until its reconnection
    (within its lease) beside the new owner; not after the handshake, not on a claim nobody deleted, not
    beside a smaller token."""
    ms = 1_000_000
    deleted = [("r04", 17, 110 * ms)]
    marks = {"away_ns": 100 * ms, "reconnected_ns": 900 * ms}
    lease = 2_000 * ms

    def episodes(old_last: int, new_token: int = 19, old_token: int = 17) -> tuple[Episode, Episode]:
        old = Episode("r04", "w1", 1, old_token, 0, 50 * ms, old_last * ms, 5)
        new = Episode("r04", "w2", 2, new_token, 1, 150 * ms, 1_000 * ms, 9)
        return old, new

    assert in_away_window(deleted, marks, "r04", *episodes(200), lease)
    assert not in_away_window(deleted, marks, "r04", *episodes(950), lease), "work after the handshake"
    assert not in_away_window(deleted, marks, "r04", *episodes(200, new_token=15), lease), "a smaller token"
    assert not in_away_window(deleted, marks, "r04", *episodes(200, old_token=16), lease), "not the deleted claim"
    assert not in_away_window([], marks, "r04", *episodes(200), lease), "nothing deleted"
    assert not in_away_window(deleted, {"away_ns": 100 * ms}, "r04", *episodes(200), lease), "no reconnection"
    assert not in_away_window(deleted, marks, "r04", *episodes(200), 50 * ms), "past the lease"
    assert not in_away_window([("r04", 17, 90 * ms)], marks, "r04", *episodes(200), lease), "deleted before away"
