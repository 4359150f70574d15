"""Global Barrier waits for real stops; departure grace hands resources back to a returning member."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from rebalanser.client import Client
from rebalanser.config import Algorithm
from rebalanser.options import Options

from tests.integration.conftest import add_resources
from tests.support.invariants import overlaps
from tests.support.recorder import Recorder
from tests.support.workers import Event, Group, wait_for

RESOURCES = {f"r{i:02d}" for i in range(9)}


@pytest.fixture
def gb_group(zk_hosts: str, zk: KazooClient, group_path: str, tmp_path: Path) -> Iterator[Group]:
    """A Global Barrier group with RESOURCES and no members yet."""
    group = Group(zk_hosts, group_path, tmp_path, algorithm="global-barrier")
    add_resources(zk, group_path, sorted(RESOURCES))
    try:
        yield group
    finally:
        group.stop_all()


def test_global_barrier_starts_nothing_before_every_member_has_stopped(
    gb_group: Group, zk: KazooClient, group_path: str
) -> None:
    group = gb_group
    group.spawn("w0")
    group.spawn("w1")
    group.spawn("slow", "--simulate-stop-delay", "1.5")
    group.wait_settled(RESOURCES, timeout=30)
    # Stale markers from an old generation must not count as "stopped".
    for member in zk.get_children(f"{group_path}/clients"):
        zk.create(f"{group_path}/stopped/g000000000000/{member}", makepath=True)
    mark = len(group.events())
    group.spawn("w3")  # 9 resources over 4 members: some move between live members, a round stops all
    wait_for(lambda: len(set(group.ownership().values())) == 4, 30, lambda: group.describe(RESOURCES))
    group.wait_settled(RESOURCES, timeout=20)
    after = group.events()[mark:]
    slow_stop = next(e["ts"] for e in after if e["event"] == "revoked" and e["id"] == "slow")
    starts = [e["ts"] for e in after if e["event"] == "assigned"]
    assert starts and min(starts) > slow_stop, "a member started before the slow member had stopped"
    assert overlaps(group.events()) == []


def test_a_killed_member_gets_its_resources_back_within_the_grace_window(
    zk_hosts: str, zk: KazooClient, group_path: str, tmp_path: Path
) -> None:
    group = Group(zk_hosts, group_path, tmp_path, extra=["--departure-grace", "30"])
    try:
        add_resources(zk, group_path, sorted(RESOURCES))
        for member in ("w0", "w1", "w2"):
            group.spawn(member)
        group.wait_settled(RESOURCES, timeout=30)
        before = group.workers["w2"].owned()
        group.workers["w2"].kill()
        wait_for(lambda: not any(m.split("-")[1] == "w2" for m in zk.get_children(f"{group_path}/clients")),
                 group.session_timeout + 10, "the killed member's session never expired")
        survivors = set().union(*(w.owned() for w in group.live()))
        assert not (survivors & before), "reserved resources moved during the grace window"
        group.spawn("w2")
        group.wait_settled(RESOURCES, timeout=20)
        assert group.workers["w2"].owned() == before
        assert overlaps(group.events()) == []
    finally:
        group.stop_all()


def test_grace_is_bounded_resources_move_once_it_ends(
    zk_hosts: str, zk: KazooClient, group_path: str, tmp_path: Path
) -> None:
    group = Group(zk_hosts, group_path, tmp_path, extra=["--departure-grace", "1"])
    try:
        add_resources(zk, group_path, sorted(RESOURCES))
        for member in ("w0", "w1", "w2"):
            group.spawn(member)
        group.wait_settled(RESOURCES, timeout=30)
        group.workers["w2"].kill()
        group.wait_settled(RESOURCES, timeout=group.session_timeout + 1 + 10)
    finally:
        group.stop_all()


def _tokens(events: list[Event]) -> dict[str, tuple[str, int]]:
    """resource -> (worker, token) of its latest ``assigned`` event."""
    latest: dict[str, tuple[str, int]] = {}
    for e in events:
        if e["event"] == "assigned":
            for r in e["resources"]:
                latest[r] = (e["id"], int(e["token"]))
    return latest


def test_global_barrier_keeps_the_claims_of_resources_that_stay(gb_group: Group) -> None:
    group = gb_group
    group.spawn("w0")
    group.spawn("w1")
    group.wait_settled(RESOURCES, timeout=30)
    before = _tokens(group.events())
    mark = len(group.events())
    group.spawn("w2")
    wait_for(lambda: len(group.ownership()) == len(RESOURCES) and len(set(group.ownership().values())) == 3,
             30, lambda: group.describe(RESOURCES))
    group.wait_settled(RESOURCES, timeout=30)
    after = group.events()[mark:]
    assert any(e["event"] == "revoked" and e["id"] in ("w0", "w1") for e in after), "no barrier stop seen"
    now = _tokens(after)
    stayed = [r for r in RESOURCES if now[r][0] == before[r][0]]
    moved = [r for r in RESOURCES if now[r][0] != before[r][0]]
    assert stayed and moved, f"expected some resources to stay and some to move: {now}"
    assert all(now[r][1] == before[r][1] for r in stayed), f"kept resources were re-claimed: {before} -> {now}"
    assert all(now[r][1] > before[r][1] for r in moved), f"moved resources kept an old token: {before} -> {now}"
    assert overlaps(group.events()) == []


def test_a_barrier_created_between_a_members_two_reads_is_still_seen(
    zk_hosts: str, zk: KazooClient, group_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Replays the race found at start-up: the member's read of G/barrier fails with NoNode, the
    coordinator creates it, then the member's ``exists`` finds it. An exists watch fires only on the next
    change, so the member must read again at once, or the barrier waits for its timeout.

    G/barrier is created by the first round that stops: here the joining member's own, as it takes
    resources from the member already working."""
    add_resources(zk, group_path, sorted(RESOURCES))
    barrier = f"{group_path}/barrier"
    real_get, raced, armed = KazooClient.get, threading.Event(), threading.Event()
    first: list[KazooClient] = []

    def get(self: KazooClient, path: str, watch: object = None) -> object:
        if path == barrier and watch is not None and armed.is_set() and self not in first and not raced.is_set():
            raced.set()
            wait_for(lambda: zk.exists(barrier) is not None, 20, lambda: "the coordinator never created G/barrier")
            raise NoNodeError()
        return real_get(self, path, watch=watch)  # type: ignore[arg-type]

    monkeypatch.setattr(KazooClient, "get", get)

    def member(name: str) -> tuple[Client, Recorder]:
        options = Options(zk_hosts, group_path, member_id=name, algorithm=Algorithm.GLOBAL_BARRIER,
                          session_timeout=4, min_interval=0.2, barrier_timeout=30)
        recorder = Recorder()
        return Client(options, recorder), recorder

    busy, busy_work = member("m1")
    busy.start()
    clients = [busy]
    try:
        wait_for(lambda: busy_work.owned == RESOURCES, 15, lambda: f"m1 owned {sorted(busy_work.owned)}")
        assert zk.exists(barrier) is None, "a round stopped although nothing moved between live members"
        first.append(busy.zk)
        armed.set()
        joiner, joiner_work = member("m0")
        clients.append(joiner)
        joiner.start()
        wait_for(lambda: joiner_work.owned and busy_work.owned and joiner_work.owned | busy_work.owned == RESOURCES,
                 15, lambda: f"m0 owned {sorted(joiner_work.owned)}, m1 {sorted(busy_work.owned)} after the raced "
                 f"read (raced: {raced.is_set()})")
        assert raced.is_set(), "the race was not replayed: the joiner never read G/barrier with a watch"
    finally:
        for client in clients:
            client.stop()
