"""The kazoo SetPartitioner adapter speaks the same CLI contract (so comparisons are fair)."""

from __future__ import annotations

from pathlib import Path

from kazoo.client import KazooClient

from tests.support.workers import Group

RESOURCES = {f"r{i:02d}" for i in range(12)}


def test_the_kazoo_baseline_shares_resources_through_the_same_event_contract(
    zk_hosts: str, zk: KazooClient, group_path: str, tmp_path: Path
) -> None:
    for r in RESOURCES:
        zk.create(f"{group_path}/resources/{r}", makepath=True)
    group = Group(zk_hosts, group_path, tmp_path, module="bench.adapters.kazoo_worker", min_interval=0.5)
    try:
        for i in range(3):
            group.spawn(f"k{i}")
        group.wait_settled(RESOURCES, timeout=30)
        assert all(e["token"] == 0 for e in group.events() if e["event"] == "tick")
    finally:
        group.stop_all()
