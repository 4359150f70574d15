"""The fence of an operator replica's ZooKeeper writes (rebalanser_operator.zkfence) against a real server:
two owners of one group in turn, as a replica frozen while it served a group and thawed after the next
owner gained it would be."""

from __future__ import annotations

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from rebalanser.paths import GroupPaths
from rebalanser.wire import decode_config
from rebalanser_operator.apply.reconcile import OwnerMarker, delete_group, group_acl, reconcile_group
from rebalanser_operator.spec.models import ResourceGroupSpec
from rebalanser_operator.zkfence import Fence, FenceLost, fenced_client, stored_claim, stored_fence

pytestmark = pytest.mark.zk

OWNER = OwnerMarker("shop", "orders", "uid-1")


def apply(zk: KazooClient, path: str, resources: list[str], interval: float = 1.0) -> None:
    s = ResourceGroupSpec.parse({"zookeeper": {"connect": "unused:2181"}, "resources": resources,
                                 "rebalance": {"minIntervalSeconds": interval}})
    reconcile_group(zk, path, desired=s.desired_resources(), config=s.group_config(interval), acl=group_acl(None),
                    owner=OWNER)


def snapshot(zk: KazooClient, path: str) -> tuple[list[str], bytes, bytes]:
    paths = GroupPaths.of(path)
    return sorted(zk.get_children(paths.resources)), zk.get(paths.config)[0], zk.get(path)[0]


def test_an_earlier_owner_writes_nothing_once_a_later_one_took_the_fence(zk: KazooClient, group_path: str) -> None:
    old = fenced_client(zk, Fence("op-a", 5), group_path)
    apply(old, group_path, ["a", "b"])  # creates the group: no root yet, so no fence to check
    apply(old, group_path, ["a", "b", "c"])  # the root exists: this write takes the fence
    assert stored_fence(zk.get(group_path)[0]) == ("op-a", 5)
    new = fenced_client(zk, Fence("op-b", 7), group_path)
    apply(new, group_path, ["a", "b", "c", "d"], interval=2.0)
    assert stored_fence(zk.get(group_path)[0]) == ("op-b", 7)
    before = snapshot(zk, group_path)
    paths = GroupPaths.of(group_path)
    attempts = {
        "an apply": lambda: apply(old, group_path, ["a"], interval=9.0),
        "a create": lambda: old.create(paths.resource("planted"), b""),
        "a set": lambda: old.set(paths.config, b"{}"),
        "a delete": lambda: old.delete(paths.resource("d")),
        "a transaction": lambda: _transaction(old, paths),
        "an ACL change": lambda: old.set_acls(paths.resource("d"), group_acl(None)),
    }
    for what, attempt in attempts.items():
        with pytest.raises(FenceLost):
            attempt()
        assert snapshot(zk, group_path) == before, f"{what} of the earlier owner changed the group"
    assert decode_config(zk.get(paths.config)[0]).interval == 2.0
    with pytest.raises(FenceLost):  # nor can it take the fence back: its token is smaller
        fenced_client(zk, Fence("op-a", 5), group_path).create(paths.resource("planted"), b"")
    assert stored_fence(zk.get(group_path)[0]) == ("op-b", 7)
    apply(new, group_path, ["a"], interval=3.0)  # the owner's writes pass
    assert snapshot(zk, group_path)[0] == ["a"]


def _transaction(zk: KazooClient, paths: GroupPaths) -> None:
    transaction = zk.transaction()
    transaction.delete(paths.resource("a"))
    transaction.create(paths.resource("planted"), b"")
    transaction.commit()


def test_a_fenced_write_fails_as_the_plain_one_would(zk: KazooClient, group_path: str) -> None:
    """The check added to every write changes nothing of its own outcome."""
    owner = fenced_client(zk, Fence("op-a", 3), group_path)
    apply(owner, group_path, ["a"])
    paths = GroupPaths.of(group_path)
    assert owner.create(paths.resource("b"), b"") == paths.resource("b")
    with pytest.raises(NodeExistsError):
        owner.create(paths.resource("b"), b"")
    with pytest.raises(NoNodeError):
        owner.delete(paths.resource("missing"))
    with pytest.raises(BadVersionError):
        owner.set(paths.config, b"{}", version=99)
    stat = owner.set(paths.resource("b"), b"x")
    assert stat.version == 1 and zk.get(paths.resource("b"))[0] == b"x"
    results = _commit(owner, paths)
    assert results == [True, paths.resource("c")], results  # the check's own result is not the caller's
    assert stored_fence(zk.get(group_path)[0]) == ("op-a", 3)
    owner.set(group_path, OWNER.to_json())  # the owner's own write of its root (the marker alone)
    assert stored_fence(zk.get(group_path)[0]) == ("op-a", 3), "the root's write dropped the fence"
    owner.create(paths.resource("d"), b"")  # still passes: the version it checks moved with its write


def _commit(zk: KazooClient, paths: GroupPaths) -> list[object]:
    transaction = zk.transaction()
    transaction.delete(paths.resource("b"))
    transaction.create(paths.resource("c"), b"")
    return list(transaction.commit())


def test_the_owner_marker_keeps_the_fence_and_the_owner_deletes_its_group(zk: KazooClient, group_path: str) -> None:
    owner = fenced_client(zk, Fence("op-a", 4), group_path)
    apply(owner, group_path, ["a"])
    apply(owner, group_path, ["a", "b"])
    data = zk.get(group_path)[0]
    assert OwnerMarker.parse(data) == OWNER and stored_fence(data) == ("op-a", 4)
    stale = fenced_client(zk, Fence("op-z", 2), group_path)
    with pytest.raises(FenceLost):
        delete_group(stale, group_path, OWNER)
    assert zk.exists(group_path) is not None
    delete_group(owner, group_path, OWNER)
    assert zk.exists(group_path) is None


def test_a_root_of_another_object_is_never_given_the_fence(zk: KazooClient, group_path: str) -> None:
    apply(zk, group_path, ["a"])  # OWNER's group
    other = OwnerMarker("shop", "orders", "uid-2")  # the same name, another object
    stranger = fenced_client(zk, Fence("op-a", 9, ours=other.marks), group_path)
    stranger.create(GroupPaths.of(group_path).resource("b"), b"")  # unfenced: the apply refuses such a root
    assert stored_fence(zk.get(group_path)[0]) is None
    assert OwnerMarker.parse(zk.get(group_path)[0]) == OWNER
    mine = fenced_client(zk, Fence("op-a", 9, ours=OWNER.marks), group_path)
    mine.create(GroupPaths.of(group_path).resource("c"), b"")
    assert stored_fence(zk.get(group_path)[0]) == ("op-a", 9)


def test_a_later_release_claim_takes_the_fence_whatever_its_token(zk: KazooClient, group_path: str) -> None:
    """Two releases number their tokens each in its own operator group: the one that claimed the group later
    (a larger claim) takes the fence from the earlier one's larger token, and the earlier one, its own replicas
    included, writes nothing after that; under one claim the token still decides."""
    first = fenced_client(zk, Fence("a-0", 18, claim=1), group_path)
    apply(first, group_path, ["a"])
    apply(first, group_path, ["a", "b"])  # takes the fence: release A's claim 1, token 18
    assert stored_fence(zk.get(group_path)[0]) == ("a-0", 18) and stored_claim(zk.get(group_path)[0]) == 1
    with pytest.raises(FenceLost):  # a replica of the same release with a smaller token is an earlier owner
        apply(fenced_client(zk, Fence("a-1", 17, claim=1), group_path), group_path, ["x"])
    second = fenced_client(zk, Fence("b-0", 3, claim=2), group_path)
    apply(second, group_path, ["a", "b", "c"])  # release B took the group over: claim 2, its own token 3
    assert stored_fence(zk.get(group_path)[0]) == ("b-0", 3) and stored_claim(zk.get(group_path)[0]) == 2
    before = snapshot(zk, group_path)
    for stale in (first, fenced_client(zk, Fence("a-2", 40, claim=1), group_path)):
        with pytest.raises(FenceLost):
            apply(stale, group_path, ["a"], interval=9.0)
        assert snapshot(zk, group_path) == before, "a replica of the earlier release changed the group"
    apply(second, group_path, ["a"])
    assert snapshot(zk, group_path)[0] == ["a"]
