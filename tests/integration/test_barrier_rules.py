"""Who obeys a stop order in ``G/barrier``, what undoes one, and what a round costs when members come and
go: stray and stale stop orders, an algorithm switch in the middle of a barrier, a re-created group, a
graceful leave in the middle of a round. Judged from the workers' JSON event streams (and, for the
number of rounds, from the barrier records an administrator reads in ZooKeeper)."""

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
from tests.support.zk import purge


@pytest.fixture
def rb_group(zk_hosts: str, group_path: str, tmp_path: Path) -> Iterator[Group]:
    g = Group(zk_hosts, group_path, tmp_path)
    try:
        yield g
    finally:
        g.stop_all()


@pytest.fixture
def gb_group(zk_hosts: str, group_path: str, tmp_path: Path) -> Iterator[Group]:
    g = Group(zk_hosts, group_path, tmp_path, algorithm="global-barrier")
    try:
        yield g
    finally:
        g.stop_all()


def names(prefix: str, n: int) -> set[str]:
    return {f"{prefix}{i:02d}" for i in range(n)}


def since(group: Group, ts: int, kind: str) -> list[Event]:
    return [e for e in group.events() if e["event"] == kind and e["ts"] >= ts]


def set_barrier(zk: KazooClient, group: str, record: dict[str, object]) -> None:
    path, data = f"{group}/barrier", json.dumps(record).encode()
    if zk.exists(path) is None:
        zk.create(path, data)
    else:
        zk.set(path, data)


def barrier(zk: KazooClient, group: str) -> dict[str, object]:
    return dict(json.loads(zk.get(f"{group}/barrier")[0]))


def check_safety(group: Group) -> None:
    events = group.events()
    assert overlaps(events) == []
    assert token_regressions(events) == []


def test_a_stray_stop_order_does_not_halt_a_resource_barrier_group(rb_group: Group, zk: KazooClient) -> None:
    """``{"phase":"stop","generation":1}`` written by hand: no coordinator of this group gave it."""
    resources = names("r", 6)
    add_resources(zk, rb_group.path, sorted(resources))
    for i in range(3):
        rb_group.spawn(f"w{i}")
    rb_group.wait_settled(resources, timeout=30)
    mark = time.monotonic_ns()
    set_barrier(zk, rb_group.path, {"phase": "stop", "generation": 1})
    add_resources(zk, rb_group.path, ["late"])  # a rebalance behind it: members have read the stop by then
    rb_group.wait_settled(resources | {"late"}, timeout=rb_group.min_interval + 15)
    assert since(rb_group, mark, "revoked") == [], "members stopped work on a stop order nobody gave"
    check_safety(rb_group)


def test_a_stop_order_forged_under_the_current_epoch_is_undone_by_the_coordinator(
    rb_group: Group, zk: KazooClient
) -> None:
    resources = names("r", 6)
    add_resources(zk, rb_group.path, sorted(resources))
    for i in range(3):
        rb_group.spawn(f"w{i}")
    rb_group.wait_settled(resources, timeout=30)
    epoch = zk.exists(f"{rb_group.path}/epoch").version
    mark = time.monotonic_ns()
    set_barrier(zk, rb_group.path, {"phase": "stop", "generation": 10**6, "epoch": epoch})
    # A member may read G/barrier only after the coordinator has ended the order: one that stops is enough.
    wait_for(lambda: bool(since(rb_group, mark, "revoked")), 15, "no member obeyed a stop order of the current epoch")
    rb_group.wait_settled(resources, timeout=rb_group.min_interval + 15)
    assert barrier(zk, rb_group.path)["phase"] == "assigned", "the stop order was left standing"
    check_safety(rb_group)


def test_switching_to_resource_barrier_in_the_middle_of_a_barrier_leaves_nobody_idle(
    gb_group: Group, zk: KazooClient
) -> None:
    """The Global Barrier coordinator dies while it waits for a slow member's stop; the group has been
    switched to Resource Barrier meanwhile. Its successor must end the open barrier: members that
    stopped for it and whose assignment does not change would otherwise never work again."""
    resources = names("r", 8)
    add_resources(zk, gb_group.path, sorted(resources))
    for member in ("w0", "w1", "w2"):
        gb_group.spawn(member)
    gb_group.spawn("slow", "--simulate-stop-delay", "4")
    gb_group.wait_settled(resources, timeout=40)
    coordinator = next(w for w in gb_group.live() if w.of("role")[-1]["role"] == "coordinator")
    mark = time.monotonic_ns()
    gb_group.spawn("late")  # 8 resources over 5 members: some move between live members, a round stops all
    wait_for(lambda: len({e["id"] for e in since(gb_group, mark, "revoked")} - {"slow"}) >= 2, 15,
             "no barrier stop seen")
    assert barrier(zk, gb_group.path)["phase"] == "stop"
    config = {"algorithm": "ResourceBarrier", "minIntervalSeconds": 0.3, "maxIntervalSeconds": 5}
    zk.create(f"{gb_group.path}/config", json.dumps(config).encode())
    coordinator.kill()
    gb_group.wait_settled(resources, timeout=gb_group.session_timeout + 20)
    check_safety(gb_group)


def test_a_recreated_global_barrier_group_rebalances_without_waiting_for_the_barrier_timeout(
    gb_group: Group, zk: KazooClient
) -> None:
    """Generations count from 1 again in a re-created group. A member that remembers having stopped
    for a higher generation of the old group must still answer the new group's stop orders, or every
    round waits for the barrier timeout (30 s)."""
    resources = names("r", 6)
    add_resources(zk, gb_group.path, sorted(resources))
    for i in range(3):
        gb_group.spawn(f"w{i}")
    gb_group.wait_settled(resources, timeout=40)
    for extra in ("x0", "x1"):  # joins that take resources from live members: stop-the-world rounds
        gb_group.spawn(extra)
        wait_for(lambda: len(set(gb_group.ownership().values())) == len(gb_group.live()), 30,
                 lambda: gb_group.describe(resources))
        gb_group.wait_settled(resources, timeout=30)
    stopped_for = {e["id"] for e in gb_group.events() if e["event"] == "revoked"}
    assert {"w0", "w1", "w2"} <= stopped_for, f"the old group ran no round that stopped everyone: {stopped_for}"
    purge(zk, gb_group.path)
    add_resources(zk, gb_group.path, sorted(resources))
    gb_group.wait_settled(resources, timeout=gb_group.session_timeout + 20)
    mark = time.monotonic_ns()
    gb_group.spawn("y0")  # a round of a low generation in the new group: every busy member must stop for it
    wait_for(lambda: len(set(gb_group.ownership().values())) == len(gb_group.live()), 20,
             lambda: f"the round after the re-creation did not finish: {gb_group.describe(resources)}")
    gb_group.wait_settled(resources, timeout=20)
    assert since(gb_group, mark, "revoked"), "no round ran in the re-created group"
    check_safety(gb_group)


def test_a_graceful_leave_in_the_middle_of_a_global_barrier_round_costs_no_extra_round(
    gb_group: Group, zk: KazooClient
) -> None:
    resources = names("r", 10)
    add_resources(zk, gb_group.path, sorted(resources))
    # w0 joins alone first, so it holds the lowest sequence and coordinates throughout: the leaver
    # must be an ordinary member (a coordinator's leave rightly starts a new epoch and a new round).
    gb_group.spawn("w0")
    gb_group.wait_settled(resources, timeout=40)
    for member in ("w1", "leaver"):
        gb_group.spawn(member)
    gb_group.spawn("slow", "--simulate-stop-delay", "3")
    gb_group.wait_settled(resources, timeout=40)
    leaver: Worker = gb_group.workers["leaver"]
    before = int(str(barrier(zk, gb_group.path)["generation"]))
    mark = time.monotonic_ns()
    gb_group.spawn("w3")  # 10 resources over 5 members: some move between live members, a round stops all
    # The joiner's process takes a while to start: wait for its round (a stop order above `before`, kept
    # standing for 3 s by the slow member), then for the leaver's stop.
    wait_for(lambda: barrier(zk, gb_group.path)["phase"] == "stop"
             and int(str(barrier(zk, gb_group.path)["generation"])) > before, 30, "no round started for the join")
    wait_for(lambda: any(e["id"] == "leaver" for e in since(gb_group, mark, "revoked")), 15,
             "the leaver never stopped for the barrier")
    stop = barrier(zk, gb_group.path)
    assert stop["phase"] == "stop", f"the round was over before the leave: {stop}"
    assert leaver.terminate() == 0
    survivors = {"w0", "w1", "slow"}
    wait_for(lambda: gb_group.settled(resources) and barrier(zk, gb_group.path)["phase"] == "assigned",
             30, lambda: f"not settled: {gb_group.describe(resources)}")
    time.sleep(1.0)  # an observation window: a further round would start within the interval
    final = barrier(zk, gb_group.path)
    assert final == {**stop, "phase": "assigned"}, f"the round of {stop} ended as {final}: an extra round ran"
    stops = [e["id"] for e in since(gb_group, mark, "revoked") if e["id"] in survivors]
    assert sorted(stops) == sorted(survivors), f"survivors stopped more than once: {stops}"
    check_safety(gb_group)
