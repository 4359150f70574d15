"""Global Barrier waits for real stops; departure grace hands resources back to a returning member."""

from __future__ import annotations

from pathlib import Path

from kazoo.client import KazooClient

from tests.integration.conftest import add_resources
from tests.support.invariants import overlaps
from tests.support.workers import Group, wait_for

RESOURCES = {f"r{i:02d}" for i in range(9)}


def test_global_barrier_starts_nothing_before_every_member_has_stopped(
    zk_hosts: str, zk: KazooClient, group_path: str, tmp_path: Path
) -> None:
    group = Group(zk_hosts, group_path, tmp_path, algorithm="global-barrier")
    try:
        add_resources(zk, group_path, sorted(RESOURCES))
        group.spawn("w0")
        group.spawn("w1")
        group.spawn("slow", "--simulate-stop-delay", "1.5")
        group.wait_settled(RESOURCES, timeout=30)
        # Stale markers from an old generation must not count as "stopped".
        for member in zk.get_children(f"{group_path}/clients"):
            zk.create(f"{group_path}/stopped/g000000000000/{member}", makepath=True)
        mark = len(group.events())
        add_resources(zk, group_path, ["r99"])
        group.wait_settled(RESOURCES | {"r99"}, timeout=20)
        after = group.events()[mark:]
        slow_stop = next(e["ts"] for e in after if e["event"] == "revoked" and e["id"] == "slow")
        starts = [e["ts"] for e in after if e["event"] == "assigned"]
        assert starts and min(starts) > slow_stop, "a member started before the slow member had stopped"
        assert overlaps(group.events()) == []
    finally:
        group.stop_all()


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
