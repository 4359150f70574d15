"""``rebalanser status --resource NAME`` / ``--member ID``: who owns what, read from ZooKeeper in full."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient
from rebalanser.cli import owners

from tests.integration.conftest import add_resources
from tests.support.workers import Group

RESOURCES = [f"r{i}" for i in range(30)]


def status(hosts: str, path: str, *args: str) -> tuple[int, Any]:
    out = subprocess.run([sys.executable, "-m", "rebalanser.cli", "status", "--zk", hosts, "--group", path, "--json",
                          *args], capture_output=True, text=True, timeout=60, check=False)
    assert out.stdout, out.stderr[-2000:]
    return out.returncode, json.loads(out.stdout)


def test_owners_maps_each_resource_to_its_member_or_none() -> None:
    assert owners({"a": ["r1", "r2"], "b": ["r3"]}, ["r3", "r1", "r9"]) == {"r3": "b", "r1": "a", "r9": None}


def test_owner_and_member_queries_agree_with_the_workers(
    zk: KazooClient, zk_hosts: str, group_path: str, tmp_path: Path
) -> None:
    add_resources(zk, group_path, RESOURCES)
    group = Group(zk_hosts, group_path, tmp_path)
    try:
        group.spawn("w1")
        group.spawn("w2")
        group.wait_settled(set(RESOURCES), 60)
        worked_by = group.ownership()  # the workers' own evidence (assigned/revoked events)
        code, answer = status(zk_hosts, group_path, *[a for r in RESOURCES for a in ("--resource", r)],
                              "--member", "w1", "--member", "w2")
        assert code == 0, answer
        assert answer["owners"] == worked_by
        for member in ("w1", "w2"):
            assert answer["members"][member] == sorted(r for r, m in worked_by.items() if m == member)
        code, answer = status(zk_hosts, group_path, "--resource", "not-a-resource")
        assert code == 1 and answer["owners"] == {"not-a-resource": None}
    finally:
        group.stop_all()
