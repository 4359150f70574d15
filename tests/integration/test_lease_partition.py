"""The self-fencing lease against a follower cut off from the quorum while its clients still reach it.

Such a follower keeps answering reads for up to syncLimit x tickTime, but the leader expires the
sessions of its clients T after it last heard of them. A lease renewed by reads the follower answers
outlives the session; it has to be renewed through the leader. Verdicts come from the workers' JSON
events only.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from tests.support.invariants import handover_gaps, overlaps, token_regressions
from tests.support.partition import PartitionableEnsemble, partitionable_ensemble
from tests.support.workers import Event, Group, Worker, wait_for
from tests.support.zk import admin_client

pytestmark = [pytest.mark.zk, pytest.mark.ensemble]

TICK_MS, SYNC_LIMIT, SESSION_TIMEOUT = 500, 10, 4.0
RESOURCES = {f"r{i}" for i in range(6)}


@pytest.fixture
def ensemble(tmp_path: Path) -> Iterator[PartitionableEnsemble]:
    with partitionable_ensemble(tmp_path / "zk", tick_ms=TICK_MS, sync_limit=SYNC_LIMIT) as cluster:
        yield cluster


@pytest.fixture
def admin(ensemble: PartitionableEnsemble) -> Iterator[KazooClient]:
    with admin_client(ensemble.leader().address) as client:
        yield client


def role(worker: Worker) -> str:
    roles = worker.of("role")
    return str(roles[-1]["role"]) if roles else ""


def ticked(worker: Worker, since: int) -> set[str]:
    return {str(e["resource"]) for e in worker.of("tick") if e["ts"] >= since}


def describe(events: list[Event], resources: set[str], since: int) -> str:
    """When the victim last worked and the survivor first worked on the moved resources."""
    ticks = [e for e in events if e["event"] == "tick" and e["resource"] in resources and e["ts"] >= since]
    last = max((int(e["ts"]) for e in ticks if e["id"] == "victim"), default=since)
    first = min((int(e["ts"]) for e in ticks if e["id"] == "survivor"), default=0)
    return f"victim's last tick {(last - since) / 1e9:.2f}s, survivor's first {(first - since) / 1e9:.2f}s"


@pytest.mark.parametrize("connected_for", ["just-joined", "steady"])
def test_a_member_behind_an_isolated_follower_stops_before_its_resources_move(
    ensemble: PartitionableEnsemble, admin: KazooClient, tmp_path: Path, algorithm: str, connected_for: str
) -> None:
    """``just-joined``: the cut comes right after the victim joined (its lease rests on its handshake);
    ``steady``: after it has renewed its lease for 2 T (the lease rests on its syncs)."""
    leader = ensemble.leader()
    victim_server, other = ensemble.followers()
    group = Group(f"{leader.address},{other.address}", "/lease-partition", tmp_path, algorithm=algorithm,
                  session_timeout=SESSION_TIMEOUT, min_interval=0.3, tick=0.05)
    for name in sorted(RESOURCES):
        admin.create(f"{group.path}/resources/{name}", makepath=True)
    try:
        survivor = group.spawn("survivor")
        wait_for(lambda: role(survivor) == "coordinator", 30, "the survivor never became coordinator")
        victim = group.spawn("victim", hosts=victim_server.address)  # connected to that follower only
        group.wait_settled(RESOURCES, timeout=30)
        victims = victim.owned()
        assert victims
        if connected_for == "steady":
            joined = victim.of("session")[0]["ts"]
            wait_for(lambda: any(e["ts"] - joined > 2 * SESSION_TIMEOUT * 1e9 for e in victim.of("tick")),
                     4 * SESSION_TIMEOUT, "the victim did not keep working for 2 T")

        isolated_at = time.monotonic_ns()
        ensemble.isolate(victim_server.myid)
        wait_for(lambda: survivor.owned() == RESOURCES, SESSION_TIMEOUT + TICK_MS * SYNC_LIMIT / 1000 + 20,
                 lambda: f"the victim's resources did not move: {group.describe(RESOURCES)}")
        # The evidence needs the victim's last tick and the survivor's first on each moved resource.
        wait_for(lambda: not (victim.owned() & victims), 30,
                 lambda: f"the victim still works on {sorted(victim.owned() & victims)}")
        wait_for(lambda: victims <= ticked(survivor, isolated_at), 10, "the survivor never worked on them")
        events = [e for e in group.events() if e["ts"] >= isolated_at]
        gaps = {r: round(g, 3) for r, g in handover_gaps(events).items() if r in victims}
        print(f"[{algorithm}, {connected_for}] after the cut: {describe(events, victims, isolated_at)}; "
              f"handover gaps (s, negative = overlap) {gaps}")
        assert overlaps(events) == [], f"the lease outlived the session: handover gaps {gaps}"
        assert token_regressions(events) == []

        ensemble.heal()
        group.wait_settled(RESOURCES, timeout=SESSION_TIMEOUT + 40)  # the victim rejoins and works again
        assert overlaps(group.events()) == []
    finally:
        group.stop_all()


def longest_tick_gap(events: list[Event], since: int) -> tuple[float, str]:
    """The longest time any resource went without a tick after ``since`` (seconds, resource)."""
    last: dict[str, int] = {}
    worst = (0.0, "")
    for e in events:
        if e["event"] == "tick" and e["ts"] >= since:
            previous = last.get(e["resource"])
            if previous is not None and (e["ts"] - previous) / 1e9 > worst[0]:
                worst = ((e["ts"] - previous) / 1e9, str(e["resource"]))
            last[e["resource"]] = e["ts"]
    return worst


def test_healthy_members_behind_followers_never_lose_their_lease(
    ensemble: PartitionableEnsemble, admin: KazooClient, tmp_path: Path
) -> None:
    """Renewal through the leader must leave room: on a healthy ensemble no lease runs out over 6 T."""
    followers = ensemble.followers()
    group = Group(ensemble.hosts, "/lease-healthy", tmp_path, session_timeout=SESSION_TIMEOUT, min_interval=0.3,
                  tick=0.05)
    resources = {f"h{i}" for i in range(12)}
    for name in sorted(resources):
        admin.create(f"{group.path}/resources/{name}", makepath=True)
    try:
        for i in range(3):
            group.spawn(f"w{i}", hosts=followers[i % len(followers)].address)
        group.wait_settled(resources, timeout=30)
        since = time.monotonic_ns()
        time.sleep(6 * SESSION_TIMEOUT)  # the observation window (a soak, not a synchronisation)
        events = [e for e in group.events() if e["ts"] >= since]
        assert [e for e in events if e["event"] in ("revoked", "assigned", "session")] == [], \
            "a healthy member lost its lease (or its session) during the window"
        gap, resource = longest_tick_gap(events, since)
        assert gap < 1.0, f"{resource} went {gap:.2f}s without work"
        assert {e["resource"] for e in events if e["event"] == "tick"} == resources
    finally:
        group.stop_all()
