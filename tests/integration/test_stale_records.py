"""Valid-looking but stale assignment records written back into a member's assignment node: an earlier
record of its own, and another member's. Neither may take effect (judged from the JSON event streams)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from tests.integration.conftest import add_resources
from tests.support.invariants import liveness_problems, overlaps, token_regressions
from tests.support.workers import Group, Worker

RESOURCES = {f"r{i:02d}" for i in range(6)}


@pytest.fixture
def rb_group(zk_hosts: str, group_path: str, tmp_path: Path) -> Iterator[Group]:
    g = Group(zk_hosts, group_path, tmp_path)
    try:
        yield g
    finally:
        g.stop_all()


def assignment_node(zk: KazooClient, group: Group, member: str) -> str:
    (node,) = [n for n in zk.get_children(f"{group.path}/clients") if f"-{member}-" in n]
    return f"{group.path}/assignment/{node}"


def window_problems(group: Group, resources: set[str], seconds: float = 2.0) -> list[str]:
    start = time.monotonic_ns()
    time.sleep(seconds)  # an observation window for liveness evidence, not synchronisation
    end = time.monotonic_ns()
    live = {w.proc.pid for w in group.live() if w.proc}
    # Each worker's events are read from its stdout by a thread of its own, behind the worker's writes: the
    # window's ticks are awaited (bounded), not only those read by its end. Only "never worked on" clears
    # as they come; a second owner, a dead worker's tick or a non-resource stays.
    deadline = time.monotonic() + 10
    while (problems := liveness_problems(group.events(), resources, live, start, end)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return problems


def stopped_since(worker: Worker, ts: int) -> list[str]:
    return [r for e in worker.of("revoked") if e["ts"] >= ts for r in e["resources"]]


def test_stale_assignment_records_written_back_take_no_effect(rb_group: Group, zk: KazooClient) -> None:
    add_resources(zk, rb_group.path, sorted(RESOURCES))
    w0, w1 = rb_group.spawn("w0"), rb_group.spawn("w1")
    rb_group.wait_settled(RESOURCES, timeout=30)
    mine, theirs = assignment_node(zk, rb_group, "w0"), assignment_node(zk, rb_group, "w1")
    earlier = zk.get(mine)[0]
    gone = sorted(w0.owned())[0]
    zk.delete(f"{rb_group.path}/resources/{gone}")  # w0's assignment is written again without it
    resources = RESOURCES - {gone}
    rb_group.wait_settled(resources, timeout=15)
    assert window_problems(rb_group, resources, 0.5) == []

    mark = time.monotonic_ns()
    zk.set(mine, earlier)  # w0's own earlier record: it still lists the deleted resource
    assert window_problems(rb_group, resources) == [], "an earlier record of w0's took effect"
    zk.set(mine, zk.get(theirs)[0])  # w1's record, in w0's node
    assert window_problems(rb_group, resources) == [], "another member's record took effect"
    assert stopped_since(w0, mark) == [] and stopped_since(w1, mark) == []
    events = rb_group.events()
    assert overlaps(events) == [] and token_regressions(events) == []
