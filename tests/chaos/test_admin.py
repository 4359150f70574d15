"""The administrator's actions of the chaos harness, against a real ZooKeeper server: a subtree goes
in one transaction (live sessions' ephemeral nodes with it), and re-creation fills in what is missing."""

from __future__ import annotations

import queue
import uuid
from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient

from tests.chaos.admin import Admin
from tests.support.zk import ZkCluster, admin_client


@pytest.fixture
def admin(chaos_single: ZkCluster) -> Iterator[Admin]:
    with admin_client(chaos_single.hosts) as client:
        yield Admin(client, request_timeout=5, patience=10)


@pytest.fixture
def member(chaos_single: ZkCluster) -> Iterator[KazooClient]:
    with admin_client(chaos_single.hosts) as client:
        yield client


def test_a_subtree_with_live_ephemeral_nodes_is_deleted_in_one_transaction(admin: Admin, member: KazooClient) -> None:
    root = f"/admin-test/{uuid.uuid4().hex}"
    member.create(f"{root}/clients/m1", b"", ephemeral=True, makepath=True)
    member.create(f"{root}/owners/r1", b"", ephemeral=True, makepath=True)
    member.create(f"{root}/resources/r1", b"", makepath=True)
    seen: queue.Queue[bool] = queue.Queue()
    member.get_children(f"{root}/owners", watch=lambda event: seen.put(member.exists(f"{root}/clients/m1") is None))
    assert admin.delete_tree(root) == 7
    assert admin.exists(root) is None and admin.subtree(root) == []
    assert admin.delete_tree(root) == 0
    # The watch's callback runs on kazoo's callback thread, after the event: await its answer.
    try:
        gone = seen.get(timeout=10)
    except queue.Empty:
        pytest.fail("the claim's watch did not fire within 10 s of the subtree's deletion")
    assert gone, "when the claim's watch fired, the member node was already gone (one transaction)"
    assert seen.empty(), "the one-shot watch fired once"


def test_ensure_creates_only_what_is_missing(admin: Admin) -> None:
    root = f"/admin-test/{uuid.uuid4().hex}"
    admin.create(f"{root}/resources", makepath=True)
    present = admin.ensure([(root, b""), (f"{root}/resources", b""), (f"{root}/resources/a", b"x"),
                            (f"{root}/config", b"{}")])
    assert present == [root, f"{root}/resources"]
    assert admin.get(f"{root}/resources/a") is not None and admin.children(f"{root}/resources") == ["a"]
    admin.delete_tree(root)


def test_versioned_writes_leave_a_node_someone_else_rewrote(admin: Admin) -> None:
    path = f"/admin-test/{uuid.uuid4().hex}"
    stat = admin.write(path, b"one")
    assert admin.write(path, b"two").version == stat.version + 1
    assert admin.set(path, b"three", version=stat.version) is None, "a stale version is refused"
    assert admin.delete(path, version=stat.version) is False and admin.exists(path) is not None
    assert admin.delete(path) is True and admin.get(path) is None
