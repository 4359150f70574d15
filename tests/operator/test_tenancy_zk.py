"""A tenant's attacks on other tenants through its ResourceGroups, against real ZooKeeper: what
apply_spec / delete_znodes / the status loop (what the kopf handlers run) do with them.

Each tenant is a namespace of its own (a fresh name per test, so the roots /rebalanser/<ns> are
fresh too); the operator has the default path root and allows only the test's ZooKeeper.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from rebalanser.paths import GroupPaths
from rebalanser_operator.apply.actions import InvalidSpec, RetryLater, apply_spec, delete_znodes
from rebalanser_operator.apply.reconcile import OwnerMarker
from rebalanser_operator.identity import DigestCredentials
from rebalanser_operator.runtime import GroupRuntime, LoopOptions, OperatorContext
from rebalanser_operator.tenancy import AllowedEnsembles, Limits, Tenancy

from tests.operator.support import RecordingKube, conditions, status_loop
from tests.support.listener import Listener

pytestmark = pytest.mark.zk

BODY = {"apiVersion": "rebalanser.io/v1alpha1", "kind": "ResourceGroup", "metadata": {"name": "g"}}
GROUP_FIELDS = ("members", "assignments", "pods", "coordinator", "epoch", "unassigned", "lastRebalance")


@pytest.fixture
def namespaces(zk: KazooClient) -> Iterator[tuple[str, str]]:
    """(victim, attacker) namespaces; their roots are removed afterwards."""
    suffix = uuid.uuid4().hex[:8]
    pair = (f"victim-{suffix}", f"attacker-{suffix}")
    yield pair
    for namespace in pair:
        zk.delete(f"/rebalanser/{namespace}", recursive=True)


def context(zk_hosts: str, **tenancy: Any) -> OperatorContext:
    settings = Tenancy(ensembles=AllowedEnsembles.parse([zk_hosts]), **tenancy)
    return OperatorContext(kube=RecordingKube(), options=LoopOptions(connect_wait=5.0), tenancy=settings)


@pytest.fixture
def ctx(zk_hosts: str) -> Iterator[OperatorContext]:
    context_ = context(zk_hosts, cluster_id="cluster-1")
    yield context_
    context_.close()


def kube_of(ctx: OperatorContext) -> RecordingKube:
    assert isinstance(ctx.kube, RecordingKube)
    return ctx.kube


def spec(connect: str, path: str | None = None, **fields: Any) -> dict[str, Any]:
    zookeeper: dict[str, Any] = {"connect": connect}
    if path is not None:
        zookeeper["path"] = path
    return {"zookeeper": zookeeper, "resources": ["r0", "r1", "r2"], **fields}


def tree(zk: KazooClient, root: str) -> dict[str, tuple[bytes, list[Any]]]:
    """Every znode below ``root`` with its data and ACL (ephemerals included)."""
    data, _ = zk.get(root)
    found = {root: (data, sorted(zk.get_acls(root)[0], key=str))}
    for child in zk.get_children(root):
        found.update(tree(zk, f"{root}/{child}"))
    return found


def victim_group(ctx: OperatorContext, zk: KazooClient, zk_hosts: str, namespace: str) -> GroupRuntime:
    """The victim's group, with a live member holding a claim and an assignment."""
    rt = ctx.group(namespace, "orders", f"uid-{namespace}")
    apply_spec(ctx, rt, spec(zk_hosts), generation=1, body=BODY)
    paths = GroupPaths.of(f"/rebalanser/{namespace}/orders")
    member = f"{uuid.uuid4().hex}-victim-worker-0-"
    zk.create(f"{paths.clients}/{member}", b'{"pod": "victim-pod-0"}', ephemeral=True, sequence=True)
    zk.create(paths.owner("r0"), b"victim", ephemeral=True)
    return rt


def refused(ctx: OperatorContext, rt: GroupRuntime, raw: dict[str, Any], reason: str) -> None:
    """apply_spec refuses ``raw`` with ``reason``: an Error status condition and one Warning Event."""
    with pytest.raises((InvalidSpec, RetryLater)):
        apply_spec(ctx, rt, raw, generation=1, body=BODY)
    assert rt.sync is not None and not rt.sync.ok and rt.sync.permanent, rt.sync
    assert rt.sync.reason == reason, rt.sync
    assert (("Warning", reason) in {(t, r) for t, r, _ in kube_of(ctx).events}), kube_of(ctx).events
    assert not rt.owned


@pytest.mark.parametrize("target", ["/rebalanser", "/rebalanser/{victim}", "/rebalanser/{victim}/orders"])
def test_a_path_above_or_in_another_namespace_is_refused_and_never_touched(
    ctx: OperatorContext, zk: KazooClient, zk_hosts: str, namespaces: tuple[str, str], target: str
) -> None:
    """Before: admitted; the root was taken over (its data replaced by the attacker's marker, its ACL by
    the attacker's) and deleting the ResourceGroup deleted the victim's whole tree."""
    victim, attacker = namespaces
    victim_group(ctx, zk, zk_hosts, victim)
    before = tree(zk, f"/rebalanser/{victim}")
    rt = ctx.group(attacker, "evil", "uid-evil")
    raw = spec(zk_hosts, target.format(victim=victim))
    refused(ctx, rt, raw, "PathNotAllowed")
    outcome = delete_znodes(ctx, rt, raw, annotations={}, body=BODY)
    assert outcome.startswith("nothing to delete"), outcome
    assert tree(zk, f"/rebalanser/{victim}") == before


def test_a_chroot_in_connect_counts(
    ctx: OperatorContext, zk: KazooClient, zk_hosts: str, namespaces: tuple[str, str]
) -> None:
    """Before: ``connect`` with the chroot /rebalanser/<victim> and path /orders named the victim's group."""
    victim, attacker = namespaces
    victim_group(ctx, zk, zk_hosts, victim)
    before = tree(zk, f"/rebalanser/{victim}")
    rt = ctx.group(attacker, "evil", "uid-evil")
    raw = spec(f"{zk_hosts}/rebalanser/{victim}", "/orders")
    refused(ctx, rt, raw, "PathNotAllowed")
    assert delete_znodes(ctx, rt, raw, annotations={}, body=BODY).startswith("nothing to delete")
    assert tree(zk, f"/rebalanser/{victim}") == before
    # The attacker's own root through a chroot is fine.
    mine = ctx.group(attacker, "mine", "uid-mine")
    apply_spec(ctx, mine, spec(f"{zk_hosts}/rebalanser", f"/{attacker}/mine"), generation=1, body=BODY)
    assert sorted(zk.get_children(f"/rebalanser/{attacker}/mine/resources")) == ["r0", "r1", "r2"]


@pytest.mark.parametrize("inside", ["owners", "owners/r0", "clients", "resources/r9"])
def test_a_path_inside_another_group_is_refused_and_shows_nothing_of_it(
    ctx: OperatorContext, zk_hosts: str, zk: KazooClient, namespaces: tuple[str, str], inside: str
) -> None:
    """The same namespace (its root admits the path). Before: the owners container was adopted (the
    victim's claims deleted by the attacker's reconcile or deletion), and the status loop copied
    whatever it read there into the attacker's status."""
    victim, _ = namespaces
    victim_group(ctx, zk, zk_hosts, victim)
    before = tree(zk, f"/rebalanser/{victim}/orders")
    rt = ctx.group(victim, "evil", "uid-evil")
    raw = spec(zk_hosts, f"/rebalanser/{victim}/orders/{inside}")
    refused(ctx, rt, raw, "PathInUse")
    assert delete_znodes(ctx, rt, raw, annotations={}, body=BODY).startswith(("left", "nothing to delete"))
    assert tree(zk, f"/rebalanser/{victim}/orders") == before


def test_the_same_path_in_use_shows_nothing_of_the_other_group(
    ctx: OperatorContext, zk_hosts: str, zk: KazooClient, namespaces: tuple[str, str]
) -> None:
    """Before: a PathInUse group's status carried the other group's members, pods and assignments."""
    victim, _ = namespaces
    victim_group(ctx, zk, zk_hosts, victim)
    attacker_ctx = context(zk_hosts, cluster_id="cluster-1")
    try:
        rt = attacker_ctx.group(victim, "evil", "uid-evil")
        raw = spec(zk_hosts, f"/rebalanser/{victim}/orders")
        with status_loop(attacker_ctx, rt):
            with pytest.raises(RetryLater):
                apply_spec(attacker_ctx, rt, raw, generation=1, body=BODY)
            status = kube_of(attacker_ctx).wait_status(
                lambda s: conditions(s)["ResourcesSynced"]["reason"] == "PathInUse" and s["phase"] == "Error", 30,
                "PathInUse and phase Error in the status")
            rt.wake()  # a later refresh (the loop's own) shows nothing either
            status = kube_of(attacker_ctx).wait_status(
                lambda s: conditions(s)["ZooKeeperConnected"]["status"] == "False", 30, "not connected")
        assert not [key for key in GROUP_FIELDS if key in status], status
        text = repr(status) + repr(kube_of(attacker_ctx).events)
        assert "victim-worker-0" not in text and "victim-pod-0" not in text, text
        refused(attacker_ctx, rt, raw, "PathInUse")
    finally:
        attacker_ctx.close()


def test_another_applications_tree_is_neither_taken_nor_deleted(
    ctx: OperatorContext, zk: KazooClient, zk_hosts: str, namespaces: tuple[str, str]
) -> None:
    """Before: /brokers (Kafka's) was adopted, and deleting the ResourceGroup removed all its znodes.
    Now /brokers is outside every root; and the same tree inside the tenant's own root is not taken."""
    _, attacker = namespaces
    kafka = "/brokers-" + uuid.uuid4().hex[:8]
    inside = f"/rebalanser/{attacker}/brokers"
    try:
        for root in (kafka, inside):
            zk.create(f"{root}/ids/0", b'{"host": "kafka-0"}', makepath=True)
            zk.create(f"{root}/topics/orders", b'{"partitions": 12}', makepath=True)
            zk.create(f"{root}/seqid", b"7")
        before = {root: tree(zk, root) for root in (kafka, inside)}
        rt = ctx.group(attacker, "evil", "uid-evil")
        refused(ctx, rt, spec(zk_hosts, kafka), "PathNotAllowed")
        assert delete_znodes(ctx, rt, spec(zk_hosts, kafka), annotations={}, body=BODY).startswith("nothing")
        other = ctx.group(attacker, "evil2", "uid-evil2")
        refused(ctx, other, spec(zk_hosts, inside), "PathInUse")
        assert delete_znodes(ctx, other, spec(zk_hosts, inside), annotations={}, body=BODY).startswith("left")
        assert {root: tree(zk, root) for root in (kafka, inside)} == before
    finally:
        zk.delete(kafka, recursive=True)


def test_two_clusters_on_one_ensemble_keep_their_groups(
    zk: KazooClient, zk_hosts: str, namespaces: tuple[str, str]
) -> None:
    """The same namespace and name in two clusters. Before: the second cluster's object took the first
    one's group over (the marker had neither UID nor cluster), and its deletion removed it."""
    namespace, _ = namespaces
    east, west = context(zk_hosts, cluster_id="east"), context(zk_hosts, cluster_id="west")
    try:
        victim_group(east, zk, zk_hosts, namespace)
        before = tree(zk, f"/rebalanser/{namespace}/orders")
        rt = west.group(namespace, "orders", "uid-west")
        refused(west, rt, spec(zk_hosts), "PathInUse")
        assert "another cluster" in rt.sync.message if rt.sync else False
        assert delete_znodes(west, rt, spec(zk_hosts), annotations={}, body=BODY).startswith("left")
        assert tree(zk, f"/rebalanser/{namespace}/orders") == before
    finally:
        east.close()
        west.close()


def test_an_ensemble_outside_the_allowed_list_is_never_contacted(
    ctx: OperatorContext, zk_hosts: str, namespaces: tuple[str, str]
) -> None:
    """Before: the operator connected to any host the spec named and sent the namespace's credentials
    Secret there in clear (kazoo's Auth packet)."""
    _, attacker = namespaces
    listener = Listener()
    kube = kube_of(ctx)
    kube.secrets["zk-digest"] = DigestCredentials("tenant", "the-victims-password")
    reads: list[str] = []
    original = kube.read_credentials

    def recording(namespace: str, secret: str) -> DigestCredentials:
        reads.append(secret)
        return original(namespace, secret)

    kube.read_credentials = recording  # type: ignore[method-assign]
    try:
        rt = ctx.group(attacker, "exfiltrate", "uid-x")
        raw = spec(f"127.0.0.1:{listener.port}")
        raw["zookeeper"]["credentialsSecret"] = "zk-digest"
        refused(ctx, rt, raw, "EnsembleNotAllowed")
        assert f"127.0.0.1:{listener.port}" in (rt.sync.message if rt.sync else "")
        assert delete_znodes(ctx, rt, raw, annotations={}, body=BODY).startswith("nothing to delete")
        assert ctx.pool.connections() == 0 and reads == []
        # Anything already under way would have connected by now (kazoo connects at once).
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline and not listener.accepted:
            time.sleep(0.05)
        assert listener.accepted == 0 and b"the-victims-password" not in listener.received
    finally:
        listener.close()


def test_each_groups_session_holds_only_its_own_credentials(
    ctx: OperatorContext, zk: KazooClient, zk_hosts: str, namespaces: tuple[str, str]
) -> None:
    """Before: one session per connect string for every namespace, holding every group's credentials."""
    victim, attacker = namespaces
    kube = kube_of(ctx)
    kube.secrets["victim-digest"] = DigestCredentials("victim", "victim-pw")
    kube.secrets["attacker-digest"] = DigestCredentials("attacker", "attacker-pw")
    groups = []
    for namespace, secret in ((victim, "victim-digest"), (attacker, "attacker-digest")):
        raw = spec(zk_hosts)
        raw["zookeeper"]["credentialsSecret"] = secret
        rt = ctx.group(namespace, "orders", f"uid-{namespace}")
        apply_spec(ctx, rt, raw, generation=1, body=BODY)
        groups.append((rt, raw))
    try:
        victim_client, attacker_client = (ctx.client(rt) for rt, _ in groups)
        assert victim_client is not attacker_client
        assert {auth for _, auth in victim_client.auth_data} == {"victim:victim-pw"}
        assert {auth for _, auth in attacker_client.auth_data} == {"attacker:attacker-pw"}
        # ZooKeeper's own view: the attacker's session cannot write the victim's group.
        with pytest.raises(NoAuthError):
            attacker_client.create(f"/rebalanser/{victim}/orders/resources/intruder")
    finally:
        for rt, raw in groups:
            delete_znodes(ctx, rt, raw, annotations={}, body=BODY)


def test_limits_are_enforced_with_a_clear_status(
    zk: KazooClient, zk_hosts: str, namespaces: tuple[str, str]
) -> None:
    namespace, _ = namespaces
    limited = context(zk_hosts, limits=Limits(groups_per_namespace=1, resources_per_group=3))
    try:
        first = limited.group(namespace, "first", "uid-1")
        apply_spec(limited, first, spec(zk_hosts), generation=1, body=BODY)
        second = limited.group(namespace, "second", "uid-2")
        refused(limited, second, spec(zk_hosts), "LimitExceeded")
        assert zk.exists(f"/rebalanser/{namespace}/second") is None
        big = limited.group(namespace, "first", "uid-1")
        refused(limited, big, spec(zk_hosts, resources=["a", "b", "c", "d"]), "LimitExceeded")
        assert sorted(zk.get_children(f"/rebalanser/{namespace}/first/resources")) == ["r0", "r1", "r2"]
        limited.forget(namespace, "first")  # deleted: the namespace has room again
        apply_spec(limited, second, spec(zk_hosts), generation=1, body=BODY)
        assert second.owned and second.sync is not None and second.sync.ok
    finally:
        limited.close()


def test_deletion_removes_only_the_groups_own_layout(
    ctx: OperatorContext, zk: KazooClient, zk_hosts: str, namespaces: tuple[str, str]
) -> None:
    """Before: the group root was deleted recursively with whatever had been put below it."""
    namespace, _ = namespaces
    rt = ctx.group(namespace, "orders", "uid-orders")
    apply_spec(ctx, rt, spec(zk_hosts), generation=1, body=BODY)
    zk.create(f"/rebalanser/{namespace}/orders/not-ours/data", b"keep", makepath=True)
    outcome = delete_znodes(ctx, rt, spec(zk_hosts), annotations={}, body=BODY)
    assert "left 1 unknown" in outcome, outcome
    assert zk.get_children(f"/rebalanser/{namespace}/orders") == ["not-ours"]
    assert zk.get(f"/rebalanser/{namespace}/orders/not-ours/data")[0] == b"keep"
    assert "ZnodesLeft" in kube_of(ctx).reasons()
    marker = OwnerMarker.parse(zk.get(f"/rebalanser/{namespace}/orders")[0])
    assert marker == OwnerMarker(namespace, "orders", "", "cluster-1")  # released
