"""``rebalanser status --resource NAME`` / ``--member ID`` / ``--pod NAME``: who owns what, read from ZooKeeper
in full, past a truncated ResourceGroup status."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from rebalanser.cli import owners, pod_members
from rebalanser_operator.status.groupread import read_with_watches
from rebalanser_operator.status.view import Observation, compute_status, status_dict

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


def test_a_pod_names_the_members_recording_it_else_a_member_with_its_name() -> None:
    pods = {"m1": "pod-a", "m2": "pod-b"}
    assert pod_members(pods, ["m1", "m2", "pod-c"], "pod-a") == ["m1"]
    assert pod_members(pods, ["m1", "m2", "pod-c"], "pod-c") == ["pod-c"]
    assert pod_members(pods, ["m1", "m2", "pod-c"], "pod-z") == []


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


MANY = [f"item-{i:05d}" for i in range(2500)]  # more names than a ResourceGroup status lists


def status_from_env(hosts: str, path: str, *args: str) -> tuple[int, Any]:
    """The CLI as a pod runs it: connection from ``REBALANSER_ZK``/``REBALANSER_GROUP`` (the ConfigMap)."""
    env = {**os.environ, "REBALANSER_ZK": hosts, "REBALANSER_GROUP": path}
    out = subprocess.run([sys.executable, "-m", "rebalanser.cli", "status", "--json", *args],
                         capture_output=True, text=True, timeout=60, check=False, env=env)
    assert out.stdout, out.stderr[-2000:]
    return out.returncode, json.loads(out.stdout)


def test_who_owns_what_past_a_truncated_resource_group_status(
    zk: KazooClient, zk_hosts: str, group_path: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for reply in [zk.create_async(f"{group_path}/resources/{name}", makepath=True) for name in MANY[:1]]:
        reply.get()
    for reply in [zk.create_async(f"{group_path}/resources/{name}") for name in MANY[1:]]:
        reply.get()
    group = Group(zk_hosts, group_path, tmp_path)
    try:
        for n, member in enumerate(("w1", "w2", "w3")):
            monkeypatch.setenv("POD_NAME", f"shop-worker-{n}")  # the downward API, as a pod's worker has it
            group.spawn(member)
        group.wait_settled(set(MANY), 25)
        worked_by = group.ownership()  # the workers' own evidence (assigned/revoked events)
        # The operator's status of this group, computed by its own read and view: truncated.
        snapshot = read_with_watches(zk, group_path, lambda _event: None)
        view = status_dict(compute_status(
            Observation(path=group_path, zk_connected=True, ever_connected=True, group=snapshot.group,
                        pods=snapshot.pods),
            now=datetime.now(UTC)))
        assert view["assignmentsTruncated"] is True
        listed = {r for owned in view["assignments"].values() for r in owned}
        hidden = sorted(set(MANY) - listed)
        assert hidden, "the status lists every resource: nothing to look past"
        resource = hidden[-1]
        code, answer = status_from_env(zk_hosts, group_path, "--resource", resource)
        assert code == 0 and answer["owners"] == {resource: worked_by[resource]}, answer
        code, answer = status_from_env(zk_hosts, group_path, "--pod", "shop-worker-1", "--pod", "w3")
        assert code == 0, answer
        pod = answer["pods"]["shop-worker-1"]
        assert pod["members"] == ["w2"]
        assert pod["resources"] == sorted(r for r, m in worked_by.items() if m == "w2")
        assert len(pod["resources"]) > len(view["assignments"]["w2"])
        assert answer["pods"]["w3"]["members"] == ["w3"]  # a member id names its own pod too
        code, answer = status_from_env(zk_hosts, group_path, "--pod", "shop-worker-9")
        assert code == 1 and answer["pods"] == {"shop-worker-9": {"members": [], "resources": []}}
    finally:
        group.stop_all()
