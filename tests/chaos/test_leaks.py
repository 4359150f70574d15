"""The leak check against a real ZooKeeper server: fakes and tampered claims are flagged, and left out
only when the harness says it planted them itself."""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from tests.chaos.checks import zk_leaks
from tests.chaos.fleet import Fleet, Settings
from tests.support.zk import ZkCluster, admin_client

GUID = "ab" * 16


@pytest.fixture
def admin(chaos_single: ZkCluster) -> Iterator[KazooClient]:
    with admin_client(chaos_single.hosts) as client:
        yield client


@pytest.fixture
def member(chaos_single: ZkCluster) -> Iterator[KazooClient]:
    with admin_client(chaos_single.hosts) as client:
        yield client


@pytest.fixture
def group(admin: KazooClient, member: KazooClient) -> Iterator[str]:
    """A group with one live member ``m`` that claims its one resource ``r``."""
    root = f"/leak-test/{uuid.uuid4().hex}"
    admin.create(f"{root}/resources/r", makepath=True)
    member.create(f"{root}/clients/{GUID}-m-0000000003", b"", ephemeral=True, makepath=True)
    member.create(f"{root}/owners/r", json.dumps({"member": "m"}).encode(), ephemeral=True, makepath=True)
    yield root
    admin.delete(root, recursive=True)


def test_a_clean_group_has_no_leak(group: str, admin: KazooClient) -> None:
    assert zk_leaks(admin, group, {"m"}, {"r"}) == []


def test_a_persistent_member_is_flagged_unless_planted(group: str, admin: KazooClient) -> None:
    fake = f"{group}/clients/{'0' * 32}-fake-0000000000"
    admin.create(fake)
    assert any("members in ZooKeeper" in p for p in zk_leaks(admin, group, {"m"}, {"r"}))
    assert zk_leaks(admin, group, {"m"}, {"r"}, planted={fake}) == []


def test_a_persistent_claim_is_flagged(group: str, admin: KazooClient) -> None:
    admin.create(f"{group}/resources/s")
    admin.create(f"{group}/owners/s", json.dumps({"member": "m"}).encode())
    problems = zk_leaks(admin, group, {"m"}, {"r", "s"}, planted={f"{group}/owners/s"})
    assert any("claim s held by session 0x0" in p for p in problems), "a fake claim is never exempt"


def test_a_claim_naming_someone_else_is_flagged_unless_its_data_was_tampered(group: str, admin: KazooClient) -> None:
    path = f"{group}/owners/r"
    admin.set(path, json.dumps({"member": "other"}).encode())
    assert any("names 'other'" in p for p in zk_leaks(admin, group, {"m"}, {"r"}))
    czxid = admin.exists(path).czxid
    assert zk_leaks(admin, group, {"m"}, {"r"}, renamed={path: czxid}) == []
    assert zk_leaks(admin, group, {"m"}, {"r"}, renamed={path: czxid + 1}) != [], "only that incarnation"


def test_the_checker_reads_again_through_a_fresh_session_when_its_own_is_gone(
    chaos_single: ZkCluster, tmp_path: Path
) -> None:
    """The harness's own session expired during a leader kill, and the leak check reported its failure
    to read as a leak. The checker is not the system under test: it reads again, with a new session."""
    fleet = Fleet(chaos_single, Settings(workers=1, resources=1), tmp_path, random.Random(0))
    try:
        fleet.zk.stop()  # its session is gone, and this client will not make another
        assert fleet.leak_problems(timeout=1) == []
        assert fleet.zk.connected, "the checker goes on with a fresh session"
    finally:
        fleet.close()
