"""Global Barrier stops the world only when a resource changes hands between live members. A member
holding nothing that joins, leaves or dies, and a killed member whose resources go to the survivors,
make no busy member stop; a resource moving from one live member to another still stops everyone
before anything starts. Judged from the workers' JSON event streams; ``G/state`` (read as an
administrator would) only tells when the coordinator has finished the rebalance to look at."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from tests.integration.conftest import add_resources
from tests.support.invariants import overlaps, token_regressions
from tests.support.workers import Event, Group, Worker, wait_for


@pytest.fixture
def gb_group(zk_hosts: str, group_path: str, tmp_path: Path) -> Iterator[Group]:
    g = Group(zk_hosts, group_path, tmp_path, algorithm="global-barrier")
    try:
        yield g
    finally:
        g.stop_all()


def state(zk: KazooClient, group: str) -> dict[str, int]:
    """The coordinator's record of its last rebalance (generation, members, ...)."""
    if zk.exists(f"{group}/state") is None:
        return {}
    return dict(json.loads(zk.get(f"{group}/state")[0]))


def since(group: Group, ts: int, *kinds: str) -> list[Event]:
    return [e for e in group.events() if e["event"] in kinds and e["ts"] >= ts]


def rebalanced_for(zk: KazooClient, group: Group, members: int, after: int, timeout: float) -> int:
    """Waits until the coordinator has finished a rebalance above generation ``after`` that counted
    ``members`` members; returns its generation."""
    wait_for(lambda: state(zk, group.path).get("members") == members
             and state(zk, group.path).get("generation", 0) > after, timeout,
             lambda: f"no rebalance for {members} members above generation {after}: {state(zk, group.path)}")
    return int(state(zk, group.path)["generation"])


def worked_after(worker: Worker, ts: int, timeout: float = 10) -> None:
    """Waits for a unit of work ``worker`` did after ``ts``: its events up to then have all been read
    (one process writes them in order), so a stop it made before is in the stream by now."""
    wait_for(lambda: any(e["event"] == "tick" and e["ts"] > ts for e in worker.snapshot()), timeout,
             f"{worker.member_id} did no work after the rebalance")


def check_safety(group: Group) -> None:
    events = group.events()
    assert overlaps(events) == []
    assert token_regressions(events) == []


def test_a_member_holding_nothing_joining_leaving_or_dying_stops_nobody(gb_group: Group, zk: KazooClient) -> None:
    """One resource, three members: two of them hold nothing. A fourth that joins, leaves gracefully,
    and an idle member killed: the busy member neither stops nor starts anything."""
    add_resources(zk, gb_group.path, ["r0"])
    gb_group.spawn("w0")
    gb_group.wait_settled({"r0"}, timeout=30)
    for member in ("w1", "w2"):
        gb_group.spawn(member)
    generation = rebalanced_for(zk, gb_group, 3, 0, 30)
    gb_group.wait_settled({"r0"}, timeout=30)
    busy = gb_group.workers[gb_group.ownership()["r0"]]
    idle = [w for w in gb_group.live() if w is not busy]
    mark = time.monotonic_ns()

    gb_group.spawn("joiner")
    generation = rebalanced_for(zk, gb_group, 4, generation, 30)
    worked_after(busy, time.monotonic_ns())
    assert gb_group.workers["joiner"].of("revoked") == []
    assert gb_group.workers["joiner"].terminate() == 0
    generation = rebalanced_for(zk, gb_group, 3, generation, 30)
    worked_after(busy, time.monotonic_ns())
    idle[0].kill()
    rebalanced_for(zk, gb_group, 2, generation, gb_group.session_timeout + 30)
    worked_after(busy, time.monotonic_ns())

    changes = since(gb_group, mark, "revoked", "assigned")
    assert changes == [], f"a membership change that moves nothing stopped or started work: {changes}"
    assert gb_group.ownership() == {"r0": busy.member_id}
    check_safety(gb_group)


def test_a_killed_members_resources_go_to_the_survivors_without_stopping_them(
    gb_group: Group, zk: KazooClient
) -> None:
    resources = {f"r{i}" for i in range(6)}
    add_resources(zk, gb_group.path, sorted(resources))
    for member in ("w0", "w1", "w2"):
        gb_group.spawn(member)
    gb_group.wait_settled(resources, timeout=40)
    victim = gb_group.workers["w2"]
    lost = victim.owned()
    assert lost, "the victim held nothing: the test would prove nothing"
    mark = time.monotonic_ns()
    victim.kill()
    gb_group.wait_settled(resources, timeout=gb_group.session_timeout + 30)
    survivors = {"w0", "w1"}
    stops = [e for e in since(gb_group, mark, "revoked") if e["id"] in survivors]
    assert stops == [], f"survivors stopped work although only the dead member's resources moved: {stops}"
    started = {r for e in since(gb_group, mark, "assigned") for r in e["resources"]}
    assert started == lost, f"started {sorted(started)}; only the dead member's {sorted(lost)} should be"
    check_safety(gb_group)


def test_a_resource_moving_between_live_members_still_stops_everyone_first(
    gb_group: Group, zk: KazooClient
) -> None:
    resources = {f"r{i}" for i in range(6)}
    add_resources(zk, gb_group.path, sorted(resources))
    for member in ("w0", "w1", "w2"):
        gb_group.spawn(member)
    gb_group.wait_settled(resources, timeout=40)
    busy = {w.member_id for w in gb_group.live() if w.owned()}
    mark = time.monotonic_ns()
    gb_group.spawn("w3")  # 6 resources over 4 members: some move from live members to w3
    wait_for(lambda: len(set(gb_group.ownership().values())) == 4, 30, lambda: gb_group.describe(resources))
    gb_group.wait_settled(resources, timeout=30)
    stops = since(gb_group, mark, "revoked")
    starts = since(gb_group, mark, "assigned")
    assert {e["id"] for e in stops} == busy, f"not every busy member stopped: {stops}"
    assert starts and min(e["ts"] for e in starts) > max(e["ts"] for e in stops), \
        "a member started work before every member had stopped"
    check_safety(gb_group)
