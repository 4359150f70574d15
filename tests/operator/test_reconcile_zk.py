"""reconcile.py against a real ZooKeeper server."""

from __future__ import annotations

import time

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from rebalanser.paths import GroupPaths
from rebalanser.wire import decode_config
from rebalanser_operator.apply.reconcile import (
    GroupOwnedElsewhereError,
    OwnerMarker,
    SyncResult,
    _Create,
    delete_group,
    group_acl,
    reacl_group,
    reconcile_group,
    run_batches,
)
from rebalanser_operator.identity import DigestCredentials
from rebalanser_operator.spec.models import ResourceGroupSpec

from tests.support.zk import admin_client

pytestmark = pytest.mark.zk

OWNER = OwnerMarker("shop", "orders", "uid-1")


def spec(**fields: object) -> ResourceGroupSpec:
    return ResourceGroupSpec.parse({"zookeeper": {"connect": "unused:2181"}, **fields})


def apply(
    zk: KazooClient, path: str, s: ResourceGroupSpec, owner: OwnerMarker = OWNER,
    credentials: DigestCredentials | None = None,
) -> SyncResult:
    return reconcile_group(
        zk, path, desired=s.desired_resources(), config=s.group_config(s.rebalance.min_interval_seconds),
        acl=group_acl(credentials), owner=owner,
    )


def test_creates_resources_and_writes_config(zk: KazooClient, group_path: str) -> None:
    s = spec(resources=["x"], resourceSets=[{"prefix": "orders-", "count": 3}], algorithm="GlobalBarrier")
    result = apply(zk, group_path, s)
    paths = GroupPaths.of(group_path)
    assert sorted(zk.get_children(paths.resources)) == ["orders-0", "orders-1", "orders-2", "x"]
    assert (result.created, result.deleted, result.resources, result.config_written) == (4, 0, 4, True)
    config = decode_config(zk.get(paths.config)[0])
    assert config.algorithm.value == "GlobalBarrier" and config.interval == 2.0
    for container in paths.containers():
        assert zk.exists(container) is not None


def test_ten_thousand_resources_reconcile_in_seconds(zk: KazooClient, group_path: str) -> None:
    s = spec(resourceSets=[{"prefix": "orders-", "count": 10_000}])
    started = time.monotonic()
    result = apply(zk, group_path, s)
    elapsed = time.monotonic() - started
    print(f"\n10,000 resources: created in {elapsed:.3f}s")
    assert result.created == 10_000
    assert len(zk.get_children(GroupPaths.of(group_path).resources)) == 10_000
    assert elapsed < 5.0
    started = time.monotonic()
    again = apply(zk, group_path, s)
    print(f"10,000 resources: no-op reconcile in {time.monotonic() - started:.3f}s")
    assert (again.created, again.deleted) == (0, 0)
    started = time.monotonic()
    removed = apply(zk, group_path, spec(resourceSets=[{"prefix": "orders-", "count": 5_000}]))
    print(f"10,000 -> 5,000 resources: {time.monotonic() - started:.3f}s")
    assert removed.deleted == 5_000
    started = time.monotonic()
    deleted = delete_group(zk, group_path, OWNER).deleted
    print(f"group of 5,000 resources deleted in {time.monotonic() - started:.3f}s")
    assert deleted >= 5_000 and zk.exists(group_path) is None


def test_reconcile_is_idempotent(zk: KazooClient, group_path: str) -> None:
    s = spec(resources=["a", "b"])
    apply(zk, group_path, s)
    paths = GroupPaths.of(group_path)
    before = {name: zk.exists(paths.resource(name)).czxid for name in ("a", "b")}
    config_version = zk.exists(paths.config).version
    result = apply(zk, group_path, s)
    assert (result.created, result.deleted, result.config_written) == (0, 0, False)
    assert {name: zk.exists(paths.resource(name)).czxid for name in ("a", "b")} == before
    assert zk.exists(paths.config).version == config_version


def test_removes_only_resources_that_left_the_spec(zk: KazooClient, group_path: str) -> None:
    apply(zk, group_path, spec(resources=["a", "b", "c"]))
    paths = GroupPaths.of(group_path)
    kept = zk.exists(paths.resource("b")).czxid
    zk.create(paths.resource("added-by-hand"))
    result = apply(zk, group_path, spec(resources=["b", "d"]))
    assert sorted(zk.get_children(paths.resources)) == ["b", "d"]
    assert (result.created, result.deleted) == (1, 3)
    assert zk.exists(paths.resource("b")).czxid == kept


def test_config_follows_spec_changes(zk: KazooClient, group_path: str) -> None:
    apply(zk, group_path, spec())
    changed = spec(rebalance={"minIntervalSeconds": 5, "maxIntervalSeconds": 50, "departureGraceSeconds": 3})
    assert apply(zk, group_path, changed).config_written
    config = decode_config(zk.get(GroupPaths.of(group_path).config)[0])
    assert (config.min_interval_seconds, config.max_interval_seconds, config.departure_grace_seconds) == (5, 50, 3)


def test_a_failed_batch_is_redone_op_by_op(zk: KazooClient, group_path: str) -> None:
    zk.ensure_path(f"{group_path}/batch")
    zk.create(f"{group_path}/batch/n3")  # makes the multi fail as a whole
    ops = [_Create(f"{group_path}/batch/n{i}", group_acl(None)) for i in range(6)]
    assert run_batches(zk, ops, batch_size=4) == 5
    assert sorted(zk.get_children(f"{group_path}/batch")) == [f"n{i}" for i in range(6)]


def test_delete_group_removes_every_znode_including_live_ephemerals(
    zk: KazooClient, zk_hosts: str, group_path: str
) -> None:
    apply(zk, group_path, spec(resourceSets=[{"prefix": "r", "count": 100}]))
    paths = GroupPaths.of(group_path)
    worker = KazooClient(hosts=zk_hosts)
    worker.start()
    try:
        worker.create(f"{paths.clients}/member-", ephemeral=True, sequence=True)
        worker.ensure_path(f"{paths.assignment}/m1/part-0")
        worker.create(paths.owner("r1"), ephemeral=True)
        deleted = delete_group(zk, group_path, OWNER).deleted
        assert zk.exists(group_path) is None
        assert deleted >= 100 + 6
        assert zk.exists(group_path.rsplit("/", 1)[0]) is not None  # shared parents stay
    finally:
        worker.stop()
        worker.close()
    assert delete_group(zk, group_path, OWNER).deleted == 0  # idempotent


def test_two_resource_groups_cannot_share_a_path(zk: KazooClient, group_path: str) -> None:
    apply(zk, group_path, spec(resources=["a"]))
    with pytest.raises(GroupOwnedElsewhereError, match="a ResourceGroup of another namespace;"):
        apply(zk, group_path, spec(resources=["b"]), owner=OwnerMarker("other", "group", "uid-2"))
    with pytest.raises(GroupOwnedElsewhereError, match="by ResourceGroup shop/orders;"):
        apply(zk, group_path, spec(resources=["b"]), owner=OwnerMarker("shop", "payments", "uid-3"))
    assert zk.get_children(GroupPaths.of(group_path).resources) == ["a"]
    # An object of the same name recreated (new uid) does not take the group of the one before ...
    with pytest.raises(GroupOwnedElsewhereError, match="earlier ResourceGroup shop/orders"):
        apply(zk, group_path, spec(resources=["a", "b"]), owner=OwnerMarker("shop", "orders", "uid-9"))
    assert OwnerMarker.parse(zk.get(group_path)[0]) == OWNER
    # ... unless that one released it (deleted with its znodes kept).
    zk.set(group_path, OWNER.released().to_json())
    apply(zk, group_path, spec(resources=["a", "b"]), owner=OwnerMarker("shop", "orders", "uid-9"))
    assert OwnerMarker.parse(zk.get(group_path)[0]) == OwnerMarker("shop", "orders", "uid-9")


def test_a_group_created_by_workers_is_adopted(zk: KazooClient, group_path: str) -> None:
    paths = GroupPaths.of(group_path)
    zk.ensure_path(paths.resources)
    zk.create(paths.resource("old"))
    apply(zk, group_path, spec(resources=["new"]))
    assert zk.get_children(paths.resources) == ["new"]


def test_digest_acl_lets_only_credential_holders_write(zk: KazooClient, zk_hosts: str, group_path: str) -> None:
    credentials = DigestCredentials("operator", "s3cret")
    admin = KazooClient(hosts=zk_hosts, auth_data=[("digest", credentials.auth)])
    admin.start()
    try:
        apply(admin, group_path, spec(resources=["a"]), credentials=credentials)
        paths = GroupPaths.of(group_path)
        # Anyone may read ...
        assert zk.get_children(paths.resources) == ["a"]
        assert decode_config(zk.get(paths.config)[0]).interval == 2.0
        # ... but without the credentials nothing can be written.
        with pytest.raises(NoAuthError):
            zk.create(paths.resource("intruder"))
        with pytest.raises(NoAuthError):
            zk.delete(paths.resource("a"))
        with pytest.raises(NoAuthError):
            zk.set(paths.config, b"{}")
        with pytest.raises(NoAuthError):
            zk.create(f"{paths.clients}/member-", ephemeral=True, sequence=True)
        # A holder of the credentials (a worker configured with them) can.
        admin.create(f"{paths.clients}/member-", ephemeral=True, sequence=True)
        assert len(admin.get_children(paths.clients)) == 1
        # Credentials removed from the spec: the operator opens the group up again.
        apply(admin, group_path, spec(resources=["a", "b"]), credentials=None)
        zk.create(paths.resource("now-allowed"))
        delete_group(admin, group_path, OWNER)
    finally:
        admin.stop()
        admin.close()


@pytest.mark.parametrize("data", [b"[" * 100_000 + b"]" * 100_000, b'{"resourceGroup": {"namespace": 1e999}}',
                                  b"\xff\xfe", b"another application's data"],
                         ids=["deep", "1e999", "not-utf8", "foreign"])
def test_foreign_data_in_the_group_root_is_refused_and_left_untouched(
    zk: KazooClient, group_path: str, data: bytes
) -> None:
    """Before: the foreign data was replaced by this object's marker (and its ACL by the group's)."""
    zk.create(group_path, data, makepath=True)
    acl_before = zk.get_acls(group_path)[0]
    with pytest.raises(GroupOwnedElsewhereError, match="not a ResourceGroup's owner marker"):
        apply(zk, group_path, spec(resources=["a"]), credentials=DigestCredentials("tenant", "pw"))
    assert zk.get(group_path)[0] == data
    assert zk.get_acls(group_path)[0] == acl_before
    assert zk.get_children(group_path) == []
    with pytest.raises(GroupOwnedElsewhereError):
        delete_group(zk, group_path, OWNER)
    assert zk.get(group_path)[0] == data


def another_applications_tree(zk: KazooClient, root: str) -> dict[str, bytes]:
    """A Kafka-like tree without data in its root: what an attacker names as a group path."""
    nodes = {f"{root}/ids": b"", f"{root}/ids/0": b'{"host": "kafka-0"}', f"{root}/topics": b"",
             f"{root}/topics/orders": b'{"partitions": 12}', f"{root}/seqid": b"7"}
    zk.ensure_path(root)
    for node, data in nodes.items():
        zk.create(node, data)
    return {root: b"", **nodes}


def tree(zk: KazooClient, root: str) -> dict[str, bytes]:
    found = {root: zk.get(root)[0]}
    for child in zk.get_children(root):
        found.update(tree(zk, f"{root}/{child}"))
    return found


def test_another_applications_tree_is_neither_adopted_nor_deleted(zk: KazooClient, group_path: str) -> None:
    """Before: its root was taken over (marker written, ACL replaced) and deletion removed all of it."""
    brokers = f"{group_path}/brokers"
    before = another_applications_tree(zk, brokers)
    with pytest.raises(GroupOwnedElsewhereError, match="children that are not a group's"):
        apply(zk, brokers, spec(resources=["a"]))
    with pytest.raises(GroupOwnedElsewhereError, match="no owner marker"):
        delete_group(zk, brokers, OWNER)
    assert tree(zk, brokers) == before


def test_a_group_inside_another_groups_znodes_is_refused(zk: KazooClient, group_path: str) -> None:
    """Before: a path inside another group (its owners container, or below it) was taken like any other."""
    victim = f"{group_path}/victim"
    apply(zk, victim, spec(resources=["r0", "r1"]))
    attacker = OwnerMarker("shop", "attacker", "uid-a")
    for inside in (f"{victim}/owners", f"{victim}/owners/r0", f"{victim}/resources/new"):
        with pytest.raises(GroupOwnedElsewhereError):
            reconcile_group(zk, inside, desired={"x"}, config=spec().group_config(2.0), acl=group_acl(None),
                            owner=attacker, confine=group_path)
    assert zk.get_children(f"{victim}/owners") == []
    assert sorted(zk.get_children(f"{victim}/resources")) == ["r0", "r1"]
    assert OwnerMarker.parse(zk.get(victim)[0]) == OWNER
    # A sibling in the same root is fine.
    reconcile_group(zk, f"{group_path}/sibling", desired={"x"}, config=spec().group_config(2.0),
                    acl=group_acl(None), owner=attacker, confine=group_path)


def test_two_clusters_on_one_ensemble_never_share_a_group(zk: KazooClient, group_path: str) -> None:
    """Before: the marker had no cluster id and the uid was ignored: the second cluster's object of the
    same namespace and name took the first one's group over, and its deletion removed it."""
    east = OwnerMarker("shop", "orders", "uid-east", "cluster-east")
    west = OwnerMarker("shop", "orders", "uid-west", "cluster-west")
    apply(zk, group_path, spec(resources=["a"]), owner=east)
    with pytest.raises(GroupOwnedElsewhereError, match="another cluster"):
        apply(zk, group_path, spec(resources=["b"]), owner=west)
    with pytest.raises(GroupOwnedElsewhereError, match="another cluster"):
        delete_group(zk, group_path, west)
    assert zk.get_children(f"{group_path}/resources") == ["a"]
    # A release is per cluster too.
    zk.set(group_path, east.released().to_json())
    with pytest.raises(GroupOwnedElsewhereError):
        apply(zk, group_path, spec(resources=["b"]), owner=west)


def test_a_marker_from_before_cluster_ids_is_kept_by_its_own_object(zk: KazooClient, group_path: str) -> None:
    legacy = b'{"resourceGroup": {"name": "orders", "namespace": "shop", "uid": "uid-1"}}'
    zk.create(group_path, legacy, makepath=True)
    ours = OwnerMarker("shop", "orders", "uid-1", "cluster-1")
    apply(zk, group_path, spec(resources=["a"]), owner=ours)
    assert OwnerMarker.parse(zk.get(group_path)[0]) == ours
    zk.set(group_path, legacy)
    with pytest.raises(GroupOwnedElsewhereError):
        apply(zk, group_path, spec(resources=["a"]), owner=OwnerMarker("shop", "orders", "uid-2", "cluster-1"))


def test_deletion_removes_only_the_groups_layout(zk: KazooClient, group_path: str) -> None:
    """Before: the subtree was deleted recursively, whatever it held."""
    apply(zk, group_path, spec(resources=["a", "b"]))
    zk.create(f"{group_path}/someone-elses/data", b"keep me", makepath=True)
    deletion = delete_group(zk, group_path, OWNER)
    assert deletion.left == ("someone-elses",)
    assert zk.get_children(group_path) == ["someone-elses"]
    assert zk.get(f"{group_path}/someone-elses/data")[0] == b"keep me"
    assert OwnerMarker.parse(zk.get(group_path)[0]) == OWNER.released()


class CountingClient:
    """A KazooClient stand-in that counts the calls that reach the server (a ``multi`` counts once)."""

    CALLS = ("create", "get", "exists", "get_children", "get_acls", "set", "set_acls", "ensure_path", "delete",
             "transaction", "create_async", "get_async", "exists_async", "get_children_async")

    def __init__(self, zk: KazooClient) -> None:
        self.zk = zk
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> object:
        attr = getattr(self.zk, name)
        if name in self.CALLS:
            def counted(*args: object, **kwargs: object) -> object:
                self.calls.append(name)
                return attr(*args, **kwargs)
            return counted
        return attr


def test_a_new_group_costs_one_transaction(zk: KazooClient, group_path: str) -> None:
    """With a thousand ResourceGroups applied at once, the first sync is bounded by round trips: a new
    group is one ``multi`` (root with its owner, containers, config, resources) whatever its size."""
    zk.ensure_path(group_path.rsplit("/", 1)[0])
    counting = CountingClient(zk)
    s = spec(resourceSets=[{"prefix": "orders-", "count": 20}])
    result = apply(counting, group_path, s)  # type: ignore[arg-type]
    assert counting.calls == ["transaction"], counting.calls
    assert (result.created, result.deleted, result.config_written) == (20, 0, True)
    paths = GroupPaths.of(group_path)
    assert len(zk.get_children(paths.resources)) == 20
    assert OwnerMarker.parse(zk.get(group_path)[0]) == OWNER
    assert decode_config(zk.get(paths.config)[0]).interval == 2.0
    for container in paths.containers():
        assert zk.exists(container) is not None
    again = CountingClient(zk)
    assert (apply(again, group_path, s).created, len(again.calls) > 1) == (0, True)  # type: ignore[arg-type]


def test_a_new_group_under_a_missing_parent_with_credentials(zk: KazooClient, group_path: str) -> None:
    parent = f"{group_path}-parent"
    path = f"{parent}/deep/orders"
    credentials = DigestCredentials("operator", "s3cret")
    zk.add_auth("digest", credentials.auth)
    try:
        result = apply(zk, path, spec(resources=["a", "b"]), credentials=credentials)
        paths = GroupPaths.of(path)
        assert result.created == 2 and sorted(zk.get_children(paths.resources)) == ["a", "b"]
        for node in (*paths.containers(), paths.config, paths.resource("a")):
            assert set(zk.get_acls(node)[0]) == set(group_acl(credentials)), node
        assert zk.get_acls(parent)[0] != group_acl(credentials)  # shared parents stay open
    finally:
        delete_group(zk, path, OWNER)
        zk.delete(parent, recursive=True)


def test_a_re_key_re_acls_the_root_containers_and_config_of_its_own_group_only(
    zk_hosts: str, group_path: str
) -> None:
    """reacl_group (a rotation's re-key): the group's ACL on the root, its containers and G/config; a root
    gone or carrying another marker (even a released one of this object) is left as it is (False)."""
    old, new = DigestCredentials("op", "old"), DigestCredentials("op", "new")
    with admin_client(zk_hosts, auth_data=[("digest", old.auth), ("digest", new.auth)]) as zk:
        apply(zk, group_path, spec(resources=["a"]), credentials=old)
        paths = GroupPaths.of(group_path)
        acl = group_acl(new)
        assert reacl_group(zk, paths, acl, OWNER)
        for node in (paths.root, *paths.containers()[1:], paths.config):
            assert set(zk.get_acls(node)[0]) == set(acl), node
        assert reacl_group(zk, paths, acl, OWNER), "the same ACL again: nothing to write, still True"

        for marker in (OwnerMarker("shop", "other", "uid-2"), OWNER.released()):
            zk.set(paths.root, marker.to_json())
            assert not reacl_group(zk, paths, group_acl(old), OWNER), marker
            assert set(zk.get_acls(paths.root)[0]) == set(acl) and set(zk.get_acls(paths.config)[0]) == set(acl)
        zk.set(paths.root, OWNER.to_json())
        zk.delete(paths.config)
        assert not reacl_group(zk, paths, group_acl(old), OWNER), "a node of the layout gone: applied whole"
        assert set(zk.get_acls(paths.root)[0]) == set(acl)
        zk.delete(group_path, recursive=True)
        assert not reacl_group(zk, paths, group_acl(old), OWNER)
