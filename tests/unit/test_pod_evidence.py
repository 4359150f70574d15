"""The pure parts of the pod end-to-end evidence: log parsing, merging, minimum movement, tick gaps."""

from __future__ import annotations

import json
import subprocess

from hypothesis import given
from hypothesis import strategies as st
from rebalanser.assignment import assign

from tests.support.invariants import balanced_counts, minimum_moved, tick_gaps
from tests.support.kubectl import JsonStream
from tests.support.podlogs import merge, parse_log


def test_parse_log_keeps_events_and_skips_other_lines() -> None:
    text = "\n".join([
        json.dumps({"event": "tick", "id": "w-1", "ts": 5, "resource": "r", "token": 1}),
        "2026-01-01 WARNING rebalanser: something on stderr",
        "{not json",
        json.dumps({"no": "event"}),
        json.dumps({"event": "stopped", "id": "w-1", "ts": 9}),
    ])
    events = parse_log(text, instance=2)
    assert [e["event"] for e in events] == ["tick", "stopped"]
    assert {e["_pid"] for e in events} == {2}


def test_merge_drops_what_following_and_previous_both_saw() -> None:
    a = parse_log('{"event": "tick", "id": "w", "ts": 3, "resource": "r", "token": 1}\n', 0)
    b = parse_log('{"event": "tick", "id": "w", "ts": 3, "resource": "r", "token": 1}\n'
                  '{"event": "tick", "id": "w", "ts": 1, "resource": "r", "token": 1}\n', 0)
    c = parse_log('{"event": "tick", "id": "w", "ts": 3, "resource": "r", "token": 1}\n', 1)
    assert [(e["ts"], e["_pid"]) for e in merge([a, b, c])] == [(1, 0), (3, 0), (3, 1)]


def test_tick_gaps_count_the_window_edges() -> None:
    events = [{"event": "tick", "id": "w", "ts": t, "resource": "r", "token": 1} for t in (10, 12, 30)]
    assert tick_gaps(events, {"r", "s"}, start=5, end=40) == {"r": 18, "s": 35}


def test_minimum_moved_examples() -> None:
    held = dict(zip("abc", balanced_counts(12, 3), strict=True))  # 4, 4, 4
    assert minimum_moved(held, {"a", "b", "c", "d", "e"}, 12) == 4  # quotas 3, 3, 2 for a, b, c
    assert minimum_moved(held, {"a", "b", "c", "d"}, 12) == 3
    held = dict(zip("abcd", balanced_counts(12, 4), strict=True))  # 3, 3, 3, 3
    assert minimum_moved(held, set("abcde"), 12) == 2


@given(st.integers(1, 60), st.integers(1, 8), st.integers(0, 8))
def test_minimum_moved_is_what_the_library_moves_on_joins(total: int, before: int, joining: int) -> None:
    old = [f"m{i}" for i in range(before)]
    resources = [f"r{i}" for i in range(total)]
    start = assign(old, resources, {})
    held = {m: len(rs) for m, rs in start.by_member(old).items()}
    new = old + [f"n{i}" for i in range(joining)]
    assert assign(new, resources, start.owners).moved == minimum_moved(held, set(new), total)


def test_json_stream_decodes_kubectl_watch_output() -> None:
    docs = [{"a": 1, "b": {"c": [1, 2]}}, {"a": 2}]
    text = "".join(json.dumps(d, indent=4) + "\n" for d in docs)
    proc = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    stream = JsonStream(proc)
    stream.start()
    assert proc.stdin is not None
    proc.stdin.write(text)
    proc.stdin.close()
    proc.wait(10)
    stream.thread.join(10)
    assert [v.obj for v in stream.snapshot()] == docs
