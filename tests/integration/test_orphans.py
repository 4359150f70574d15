"""Orphans are handed out at once: a departed member's resources are worked on again long before the
rebalance interval allows the next full rebalance, and no live member is stopped or loses a resource
for it (under Global Barrier too).

Evidence is the workers' own JSON events: the first ``tick`` a survivor makes on each orphan after
the fault, and the ``revoked`` events (none may come from a survivor)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from tests.integration.conftest import add_resources
from tests.support.workers import Group, Worker, wait_for

INTERVAL = 30.0  # as the adaptive policy sets it right after a group formed
RESOURCES = {f"r{i}" for i in range(9)}
LIVENESS = 12.0  # generous, and well below INTERVAL: a wait for the interval cannot pass


def coordinator(group: Group) -> Worker:
    return next(w for w in group.live() if w.of("role") and w.of("role")[-1]["role"] == "coordinator")


def worked_again(survivors: list[Worker], orphans: set[str], since_ns: int) -> dict[str, int]:
    """Each orphan's first tick by a survivor after ``since_ns`` (monotonic ns, one clock per machine)."""
    first: dict[str, int] = {}
    for worker in survivors:
        for event in worker.of("tick"):
            if event["ts"] > since_ns and event["resource"] in orphans:
                first[event["resource"]] = min(first.get(event["resource"], event["ts"]), event["ts"])
    return first


def revoked_since(survivors: list[Worker], since_ns: int) -> list[tuple[str, list[str]]]:
    return [(w.member_id, e["resources"]) for w in survivors for e in w.of("revoked") if e["ts"] > since_ns]


def hand_out_after(group: Group, leaver: Worker, fault: str) -> float:
    """Applies ``fault`` to ``leaver``; returns seconds from the fault until each of its resources was
    ticked by a survivor (the slowest), asserting no survivor lost anything meanwhile."""
    orphans = leaver.owned()
    assert orphans, f"{leaver.member_id} owned nothing"
    survivors = [w for w in group.live() if w is not leaver]
    at = time.monotonic_ns()
    if fault == "kill -9":
        leaver.kill()
    else:
        assert leaver.terminate() == 0
    wait_for(lambda: set(worked_again(survivors, orphans, at)) == orphans, LIVENESS,
             lambda: f"orphans of {leaver.member_id} ({fault}) not worked on again: {group.describe(RESOURCES)}")
    assert not revoked_since(survivors, at), f"a live member lost resources: {revoked_since(survivors, at)}"
    return (max(worked_again(survivors, orphans, at).values()) - at) / 1e9


@pytest.mark.parametrize("algorithm", ["resource-barrier", "global-barrier"])
def test_orphans_do_not_wait_for_the_interval(
    zk: KazooClient, zk_hosts: str, group_path: str, tmp_path: Path, algorithm: str
) -> None:
    """Right after the group formed (the interval just restarted, 30 s): a member killed with -9 (its
    session expires after T = 2 s), then the coordinator leaving gracefully (its successor hands out
    at once). Both within the liveness bound, nothing taken from a live member."""
    group = Group(zk_hosts, group_path, tmp_path, algorithm=algorithm, min_interval=INTERVAL, session_timeout=2.0)
    try:
        add_resources(zk, group_path, sorted(RESOURCES))
        for name in ("a", "b", "c", "d"):
            group.spawn(name)
        group.wait_settled(RESOURCES, 3 * INTERVAL)
        chief = coordinator(group)
        victim = next(w for w in group.live() if w is not chief)
        killed = hand_out_after(group, victim, "kill -9")
        assert killed < LIVENESS
        left = hand_out_after(group, chief, "leave")
        assert left < LIVENESS
        print(f"{algorithm}: worked again {killed:.2f}s after kill -9 (T 2s), {left:.2f}s after the coordinator left")
    finally:
        group.stop_all()


def test_reserved_resources_wait_for_their_member_not_for_the_interval(
    zk: KazooClient, zk_hosts: str, group_path: str, tmp_path: Path
) -> None:
    """With a departure grace, a killed member's resources stay reserved (not orphans), and are worked
    on again as soon as the member is back under a new node, though the 30 s interval has just
    restarted; a second killed member that stays away has its resources handed out once the grace
    ends, again without waiting for the interval."""
    grace = 4.0
    group = Group(zk_hosts, group_path, tmp_path, min_interval=INTERVAL, session_timeout=2.0,
                  extra=["--departure-grace", str(grace)])
    try:
        add_resources(zk, group_path, sorted(RESOURCES))
        for name in ("a", "b", "c"):
            group.spawn(name)
        group.wait_settled(RESOURCES, 3 * INTERVAL)
        chief = coordinator(group)
        back, away = [w for w in group.live() if w is not chief]
        held, lost = back.owned(), away.owned()
        back.kill()
        wait_for(lambda: not any(m.split("-")[1] == back.member_id for m in zk.get_children(f"{group_path}/clients")),
                 LIVENESS, "the killed member's session never expired")
        at = time.monotonic_ns()
        returned = group.spawn(back.member_id)
        wait_for(lambda: set(worked_again([returned], held, at)) == held, LIVENESS,
                 lambda: f"the returning member's reserved resources waited: {group.describe(RESOURCES)}")
        survivors = [w for w in group.live() if w is not away]
        at = time.monotonic_ns()
        away.kill()
        wait_for(lambda: set(worked_again(survivors, lost, at)) == lost, 2.0 + grace + LIVENESS,
                 lambda: f"resources waited after the grace ended: {group.describe(RESOURCES)}")
        assert not revoked_since(survivors, at), f"a live member lost resources: {revoked_since(survivors, at)}"
    finally:
        group.stop_all()
