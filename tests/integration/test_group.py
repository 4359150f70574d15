"""Real worker processes on a real ZooKeeper: the two invariants and minimal movement, from evidence."""

from __future__ import annotations

import time

from kazoo.client import KazooClient

from tests.integration.conftest import add_resources
from tests.support.invariants import liveness_problems, overlaps, token_regressions
from tests.support.workers import Group, wait_for

RESOURCES = {f"r{i:02d}" for i in range(30)}


def start(group: Group, zk: KazooClient, n: int) -> None:
    add_resources(zk, group.path, sorted(RESOURCES))
    for i in range(n):
        group.spawn(f"w{i}")
    group.wait_settled(RESOURCES, timeout=30)


def bound(group: Group) -> float:
    return group.session_timeout + group.min_interval + 5


def check_safety(group: Group) -> None:
    events = group.events()
    assert overlaps(events) == []
    assert token_regressions(events) == []


def check_settled_window(group: Group, resources: set[str], seconds: float = 0.5) -> None:
    start_ns = time.monotonic_ns()
    time.sleep(seconds)  # an observation window for liveness evidence, not synchronisation
    end_ns = time.monotonic_ns()
    live = {w.proc.pid for w in group.live() if w.proc}

    # Each worker's events are read from its stdout by a thread of its own, behind the worker's writes: the
    # window's ticks are awaited (bounded), not only those read by its end. Only "never worked on" clears
    # as they come; a second owner, a dead worker's tick or a non-resource stays.
    def problems() -> list[str]:
        return liveness_problems(group.events(), resources, live, start_ns, end_ns)

    wait_for(lambda: not problems(), 10, lambda: f"liveness problems in the window: {problems()}")


def test_every_resource_is_worked_on_by_exactly_one_worker(group: Group, zk: KazooClient) -> None:
    start(group, zk, 3)
    check_settled_window(group, RESOURCES)
    check_safety(group)


def test_a_join_moves_exactly_the_newcomers_share(group: Group, zk: KazooClient) -> None:
    start(group, zk, 3)
    before = group.ownership()
    group.spawn("w3")
    group.wait_settled(RESOURCES, timeout=bound(group))
    after = group.ownership()
    moved = {r for r in RESOURCES if before[r] != after[r]}
    assert moved == {r for r, w in after.items() if w == "w3"}
    assert len(moved) in (7, 8)  # 30 / 4
    check_safety(group)


def test_a_graceful_leave_moves_exactly_the_leavers_resources(group: Group, zk: KazooClient) -> None:
    start(group, zk, 3)
    before = group.ownership()
    assert group.workers["w1"].terminate() == 0
    group.wait_settled(RESOURCES, timeout=bound(group))
    after = group.ownership()
    assert {r for r in RESOURCES if before[r] != after[r]} == {r for r, w in before.items() if w == "w1"}
    leaver = group.workers["w1"]
    revoked_at = max(e["ts"] for e in leaver.of("revoked"))
    assert all(e["ts"] < revoked_at for e in leaver.of("tick")), "ticked after its stop callback returned"
    check_safety(group)


def test_a_killed_worker_is_replaced_within_the_session_timeout(group: Group, zk: KazooClient) -> None:
    start(group, zk, 3)
    group.workers["w0"].kill()
    took = group.wait_settled(RESOURCES, timeout=bound(group))
    assert took < bound(group)
    check_settled_window(group, RESOURCES)
    check_safety(group)


def test_killing_the_coordinator_fails_over(group: Group, zk: KazooClient) -> None:
    start(group, zk, 3)
    coordinator = next(w for w in group.live() if any(e["role"] == "coordinator" for e in w.of("role")))
    epoch = max(e["epoch"] for e in coordinator.of("role"))
    coordinator.kill()
    group.wait_settled(RESOURCES, timeout=bound(group))
    wait_for(lambda: any(e["role"] == "coordinator" and e["epoch"] > epoch for w in group.live() for e in w.of("role")),
             bound(group), "no member took over as coordinator with a higher epoch")
    check_safety(group)


def test_resources_added_and_removed_follow(group: Group, zk: KazooClient) -> None:
    start(group, zk, 2)
    add_resources(zk, group.path, ["extra-1", "extra-2"])
    zk.delete(f"{group.path}/resources/r00")
    now = (RESOURCES | {"extra-1", "extra-2"}) - {"r00"}
    group.wait_settled(now, timeout=bound(group))
    check_safety(group)


def test_a_deleted_and_recreated_resource_is_never_worked_on_twice(group: Group, zk: KazooClient) -> None:
    start(group, zk, 3)
    for _ in range(5):
        zk.delete(f"{group.path}/resources/r05")
        zk.create(f"{group.path}/resources/r05")
    group.spawn("w3")
    group.wait_settled(RESOURCES, timeout=bound(group))
    check_settled_window(group, RESOURCES)
    check_safety(group)


def test_a_rolling_restart_keeps_both_invariants(group: Group, zk: KazooClient) -> None:
    start(group, zk, 3)
    for member in ["w0", "w1", "w2"]:
        assert group.workers[member].terminate() == 0
        group.spawn(member)
        group.wait_settled(RESOURCES, timeout=bound(group))
    check_settled_window(group, RESOURCES)
    check_safety(group)
