"""The operator's own ZooKeeper identity (issue 29, items 1, 2, 5 and 6), against real ZooKeeper: what
apply_spec (what the kopf handlers run) does with the attacks of a hostile ZooKeeper client.

Each test has a path root of its own (``/ident-<hex>/{namespace}``): the parents the operator closes
are the test's, never the shared server's ``/rebalanser``. The attacker is an anonymous client (or one
with a digest of its own), as any client that reaches ZooKeeper.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import rebalanser
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import ACL, OPEN_ACL_UNSAFE, Id, Permissions, make_acl, make_digest_acl
from rebalanser.paths import GroupPaths
from rebalanser_operator.apply.actions import InvalidSpec, RetryLater, apply_spec
from rebalanser_operator.apply.reconcile import ADOPT_ANNOTATION, OwnerMarker, migrate_worker_nodes_acl
from rebalanser_operator.identity import DigestCredentials, OperatorIdentity, parent_acl
from rebalanser_operator.runtime import GroupRuntime, LoopOptions, OperatorContext
from rebalanser_operator.tenancy import AllowedEnsembles, PathRoots, Tenancy

from tests.operator.support import RecordingKube, status_loop
from tests.support.zk import admin_client

pytestmark = pytest.mark.zk

OPERATOR = OperatorIdentity.digest("rebalanser-operator", "a-long-random-operator-password-0123456789")
ATTACKER = ("mallory", "mallory-password")
VICTIM = DigestCredentials("orders", "victim-password-0123456789")


def body(name: str = "orders", annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "rebalanser.io/v1alpha1", "kind": "ResourceGroup",
            "metadata": {"name": name, "annotations": annotations or {}}}


@pytest.fixture
def top(zk_hosts: str) -> Iterator[str]:
    """The test's own top node; deleted afterwards by a client holding every identity the test used."""
    node = f"/ident-{uuid.uuid4().hex[:10]}"
    yield node
    with admin_client(zk_hosts, auth_data=[OPERATOR.auth, ("digest", ":".join(ATTACKER)),
                                           ("digest", VICTIM.auth)]) as client:
        client.delete(node, recursive=True)


@pytest.fixture
def op(zk_hosts: str) -> Iterator[KazooClient]:
    """A client authenticated as the operator: ZooKeeper shows a digest's hash only to a client with
    ADMIN on the node (everyone else reads ``user:x``)."""
    with admin_client(zk_hosts, auth_data=[OPERATOR.auth]) as client:
        yield client


@pytest.fixture
def attacker(zk_hosts: str) -> Iterator[KazooClient]:
    with admin_client(zk_hosts, auth_data=[("digest", ":".join(ATTACKER))]) as client:
        yield client


def context(zk_hosts: str, top: str, identity: OperatorIdentity | None = OPERATOR) -> OperatorContext:
    port = zk_hosts.split(",")[0].rsplit(":", 1)[1]
    settings = Tenancy(path_roots=PathRoots.parse([f"{top}/{{namespace}}"]),
                       ensembles=AllowedEnsembles.parse([zk_hosts, f"localhost:{port}"]), cluster_id="cluster-1")
    kube = RecordingKube(secrets={"orders-zk": VICTIM})
    own: dict[str, Any] = {"identity": identity} if identity is not None else {}  # the quick start: as before
    return OperatorContext(kube=kube, options=LoopOptions(connect_wait=5.0), tenancy=settings, **own)


@pytest.fixture
def ctx(zk_hosts: str, top: str) -> Iterator[OperatorContext]:
    context_ = context(zk_hosts, top)
    yield context_
    context_.close()


def spec(connect: str, credentials: bool = True) -> dict[str, Any]:
    zookeeper: dict[str, Any] = {"connect": connect}
    if credentials:
        zookeeper["credentialsSecret"] = "orders-zk"
    return {"zookeeper": zookeeper, "resources": ["r0", "r1", "r2"]}


def events(ctx: OperatorContext) -> set[tuple[str, str]]:
    assert isinstance(ctx.kube, RecordingKube)
    return {(t, r) for t, r, _ in ctx.kube.events}


def refused_with(ctx: OperatorContext, rt: GroupRuntime, raw: dict[str, Any], reason: str,
                 annotations: dict[str, str] | None = None) -> str:
    with pytest.raises((InvalidSpec, RetryLater)):
        apply_spec(ctx, rt, raw, generation=1, body=body(rt.name, annotations))
    assert rt.sync is not None and not rt.sync.ok and rt.sync.reason == reason, rt.sync
    assert ("Warning", reason) in events(ctx), events(ctx)
    assert not rt.owned
    return rt.sync.message


def tree(zk: KazooClient, root: str) -> dict[str, tuple[bytes, list[ACL]]]:
    data, _ = zk.get(root)
    found = {root: (data, sorted(zk.get_acls(root)[0], key=str))}
    for child in zk.get_children(root):
        found.update(tree(zk, f"{root}/{child}"))
    return found


def plant_group(client: KazooClient, root: str, marker: bytes = b"", ephemeral: bool = True) -> None:
    """A hostile client's group layout at ``root`` with its own epoch and claim (and a member)."""
    paths = GroupPaths.of(root)
    client.ensure_path(root)
    client.set(root, marker)
    for container in paths.containers()[1:]:
        client.ensure_path(container)
    client.create(paths.epoch, b"999", acl=[make_digest_acl(*ATTACKER, all=True)])
    client.create(paths.owner("r0"), b"mallory", acl=[make_digest_acl(*ATTACKER, all=True)],
                  ephemeral=ephemeral)
    if ephemeral:
        client.create(f"{paths.clients}/{uuid.uuid4().hex}-mallory-", b"{}", ephemeral=True, sequence=True)


# ------------------------------------------------------------------------ 1: parents and group roots


def test_the_operator_closes_the_parents_and_names_itself_on_every_group_node(
    ctx: OperatorContext, op: KazooClient, zk: KazooClient, zk_hosts: str, top: str, attacker: KazooClient
) -> None:
    """Before: /rebalanser and /rebalanser/<ns> open to anyone (create, set, setACL, delete)."""
    rt = ctx.group("shop", "orders", "uid-orders")
    apply_spec(ctx, rt, spec(zk_hosts), generation=1, body=body())
    assert rt.sync is not None and rt.sync.ok, rt.sync
    for node in (top, f"{top}/shop"):
        assert sorted(op.get_acls(node)[0], key=str) == sorted(parent_acl(OPERATOR), key=str), node
    paths = GroupPaths.of(f"{top}/shop/orders")
    assert [e.id.id for e in zk.get_acls(paths.root)[0] if e.id.scheme == "digest"] == \
        ["rebalanser-operator:x", "orders:x"]  # the hashes are redacted for everyone else
    for node in (paths.root, *paths.containers()[1:], paths.config, paths.resource("r0")):
        acl = op.get_acls(node)[0]
        assert ACL(Permissions.ALL, OPERATOR.id) in acl, (node, acl)
        own = [e for e in acl if e.id.scheme == "digest" and e.id != OPERATOR.id]
        assert [e.perms for e in own] == [Permissions.ALL & ~Permissions.ADMIN], (node, acl)
        assert make_acl("world", "anyone", read=True) in acl
    # Nobody else may create, change or re-ACL anything there.
    with pytest.raises(NoAuthError):
        attacker.create(f"{top}/shop/squat", b"")
    with pytest.raises(NoAuthError):
        attacker.create(f"{top}/newcomer", b"")
    with pytest.raises(NoAuthError):
        attacker.set(f"{top}/shop", OwnerMarker("shop", "x", "forged", "cluster-1").to_json())
    with pytest.raises(NoAuthError):
        attacker.set_acls(f"{top}/shop", [make_digest_acl(*ATTACKER, all=True)])
    with pytest.raises(NoAuthError):
        attacker.set_acls(paths.root, [make_digest_acl(*ATTACKER, all=True)])


def test_tenants_credentials_open_no_session_of_the_operators(
    ctx: OperatorContext, zk_hosts: str, top: str
) -> None:
    """Before: one session per set of credentials (six Secrets, six sessions), ``ZK:2181`` and ``zk``
    two more."""
    assert isinstance(ctx.kube, RecordingKube)
    port = zk_hosts.split(",")[0].rsplit(":", 1)[1]
    spellings = [f"localhost:{port}", f"LocalHost:{port}", zk_hosts, f" {zk_hosts},{zk_hosts}"]
    for i in range(6):
        ctx.kube.secrets[f"zk-{i}"] = DigestCredentials(f"tenant-{i}", f"password-{i}-0123456789")
        rt = ctx.group("shop", f"g{i}", f"uid-{i}")
        raw = {"zookeeper": {"connect": spellings[i % 2], "credentialsSecret": f"zk-{i}"}, "resources": ["r0"]}
        apply_spec(ctx, rt, raw, generation=1, body=body(f"g{i}"))
        assert rt.sync is not None and rt.sync.ok, rt.sync
    assert ctx.pool.connections() == 1
    for spelling in spellings[2:]:
        ctx.pool.acquire(spelling, f"probe-{spelling}")
    assert ctx.pool.connections() == 2  # 127.0.0.1 and localhost: two names, however they are written


def test_an_ephemeral_or_squatted_future_group_root_is_refused_untouched(
    ctx: OperatorContext, zk: KazooClient, zk_hosts: str, top: str, attacker: KazooClient
) -> None:
    """Attack 1. Before: the operator adopted the attacker's root for the victim's group, re-ACLed only
    the root, the containers and G/config; the planted epoch and claim kept the attacker's ACL (the
    victim's workers looped on NoAuth taking an epoch), and the planted member counted as one.
    The squat is planted while the parents were still open (an older operator's, or none yet)."""
    zk.ensure_path(f"{top}/shop")
    root = f"{top}/shop/orders"
    plant_group(attacker, root)
    before = tree(attacker, root)
    rt = ctx.group("shop", "orders", "uid-orders")
    message = refused_with(ctx, rt, spec(zk_hosts), "NotCreatedByOperator")
    assert ADOPT_ANNOTATION in message and root in message, message
    assert tree(attacker, root) == before
    # Explicit adoption of this one is refused (planted nodes the operator cannot re-ACL), changing nothing.
    refused_with(ctx, rt, spec(zk_hosts), "NotCreatedByOperator", {ADOPT_ANNOTATION: "true"})
    assert tree(attacker, root) == before


def test_explicit_adoption_re_acls_the_whole_subtree_or_refuses(
    ctx: OperatorContext, op: KazooClient, zk: KazooClient, zk_hosts: str, top: str, attacker: KazooClient
) -> None:
    """Before: an adopted root kept the planted nodes' ACL (the attacker could still write G/epoch)."""
    zk.ensure_path(f"{top}/shop")
    root = f"{top}/shop/orders"
    plant_group(attacker, root, ephemeral=False)
    paths = GroupPaths.of(root)
    rt = ctx.group("shop", "orders", "uid-orders")
    # G/epoch names only the attacker: the operator cannot re-ACL it, so the adoption is refused whole.
    message = refused_with(ctx, rt, spec(zk_hosts), "NotCreatedByOperator", {ADOPT_ANNOTATION: "true"})
    assert paths.epoch in message, message
    assert zk.get_acls(paths.root)[0] == OPEN_ACL_UNSAFE
    attacker.set_acls(paths.epoch, OPEN_ACL_UNSAFE)
    attacker.set_acls(paths.owner("r0"), OPEN_ACL_UNSAFE)
    # An ephemeral member planted before the adoption is never counted: the adoption waits for it to go.
    member = attacker.create(f"{paths.clients}/{uuid.uuid4().hex}-mallory-", b"{}", ephemeral=True, sequence=True)
    message = refused_with(ctx, rt, spec(zk_hosts), "NotCreatedByOperator", {ADOPT_ANNOTATION: "true"})
    assert "ephemeral" in message and member in message, message
    assert zk.get_acls(paths.root)[0] == OPEN_ACL_UNSAFE
    attacker.delete(member)
    apply_spec(ctx, rt, spec(zk_hosts), generation=2, body=body(annotations={ADOPT_ANNOTATION: "true"}))
    assert rt.sync is not None and rt.sync.ok, rt.sync
    for node in tree(op, root):
        assert ACL(Permissions.ALL, OPERATOR.id) in op.get_acls(node)[0], node
    with pytest.raises(NoAuthError):
        attacker.set(paths.epoch, b"1000")


# ------------------------------------------------------------------------ 2: markers and ACLs on parents


@pytest.mark.parametrize("identity", [OPERATOR, None], ids=["identity", "quickstart"])
def test_a_forged_marker_on_the_namespace_root_refuses_nothing(
    zk: KazooClient, zk_hosts: str, top: str, attacker: KazooClient, identity: OperatorIdentity | None
) -> None:
    """Attack 2. Before: every group of the namespace was refused with PathInUse (new ones at once,
    existing ones at their next reconcile)."""
    ctx = context(zk_hosts, top, identity)
    try:
        first = ctx.group("shop", "first", "uid-first")
        if identity is None:
            apply_spec(ctx, first, spec(zk_hosts), generation=1, body=body("first"))
            attacker.set(f"{top}/shop", OwnerMarker("shop", "anything", "forged", "cluster-1").to_json())
        else:
            zk.ensure_path(f"{top}/shop")  # open, as an older operator left it
            attacker.set(f"{top}/shop", OwnerMarker("shop", "anything", "forged", "cluster-1").to_json())
            apply_spec(ctx, first, spec(zk_hosts), generation=1, body=body("first"))
        second = ctx.group("shop", "second", "uid-second")
        apply_spec(ctx, second, spec(zk_hosts), generation=1, body=body("second"))
        apply_spec(ctx, first, spec(zk_hosts), generation=2, body=body("first"))
        for rt in (first, second):
            assert rt.sync is not None and rt.sync.ok, rt.sync
    finally:
        ctx.close()


def test_a_locked_parent_is_reported_and_cannot_be_locked_again(
    zk: KazooClient, zk_hosts: str, top: str, attacker: KazooClient
) -> None:
    """Attack 2, the setACL. Before: a setACL on the open namespace root locked the operator out
    (NotAuthorized), and nothing said which node or why. Now a namespace root the operator created
    cannot be re-ACLed by anyone else; one an attacker locked while it was open (before the identity)
    is reported: its existing groups keep working, a new one is refused with the node named."""
    old = context(zk_hosts, top, identity=None)
    try:
        first = ctx_apply(old, "first", zk_hosts)
    finally:
        old.close()
    attacker.set_acls(f"{top}/shop", [make_digest_acl(*ATTACKER, all=True), make_acl("world", "anyone", read=True)])
    ctx = context(zk_hosts, top)
    try:
        first = ctx.group("shop", "first", first.uid)
        apply_spec(ctx, first, spec(zk_hosts), generation=2, body=body("first"))
        assert first.sync is not None and first.sync.ok, first.sync
        assert ("Warning", "ParentNotTakenOver") in events(ctx)
        second = ctx.group("shop", "second", "uid-second")
        message = refused_with(ctx, second, spec(zk_hosts), "ParentNotOwned")
        assert f"{top}/shop" in message, message
        # A namespace the operator created itself: nobody else can lock it.
        third = ctx.group("other", "third", "uid-third")
        apply_spec(ctx, third, spec(zk_hosts), generation=1, body=body("third"))
        with pytest.raises(NoAuthError):
            attacker.set_acls(f"{top}/other", [make_digest_acl(*ATTACKER, all=True)])
    finally:
        ctx.close()


def ctx_apply(ctx: OperatorContext, name: str, zk_hosts: str, credentials: bool = True) -> GroupRuntime:
    rt = ctx.group("shop", name, f"uid-{name}")
    apply_spec(ctx, rt, spec(zk_hosts, credentials), generation=1, body=body(name))
    assert rt.sync is not None and rt.sync.ok, rt.sync
    return rt


# ------------------------------------------------------------------------ 5: the smaller ones


@pytest.mark.parametrize("identity", [OPERATOR, None], ids=["identity", "quickstart"])
def test_digests_are_kept_for_the_grace_only_from_a_root_with_the_objects_own_marker(
    zk: KazooClient, zk_hosts: str, top: str, identity: OperatorIdentity | None
) -> None:
    """Before: at a group's first apply, every other digest on an existing root's ACL kept all rights
    for the grace period, whoever had put it there."""
    root = f"{top}/shop/orders"
    zk.ensure_path(f"{top}/shop")
    planted = make_digest_acl(*ATTACKER, all=True)
    zk.create(root, b"", acl=[make_digest_acl(VICTIM.username, VICTIM.password, all=True), planted,
                             *OPEN_ACL_UNSAFE])
    ctx = context(zk_hosts, top, identity)
    try:
        rt = ctx.group("shop", "orders", "uid-orders")
        annotations = {ADOPT_ANNOTATION: "true"} if identity is not None else None
        apply_spec(ctx, rt, spec(zk_hosts), generation=1, body=body(annotations=annotations))
        assert rt.sync is not None and rt.sync.ok, rt.sync
        assert rt.grace_until is None and not rt.previous_acl
        assert planted.id not in {e.id for e in zk.get_acls(root)[0]}
    finally:
        ctx.close()


@pytest.mark.parametrize("identity", [OPERATOR, None], ids=["identity", "quickstart"])
def test_worker_znodes_keep_their_intended_acl_after_a_rotation(
    zk_hosts: str, top: str, identity: OperatorIdentity | None
) -> None:
    """Before: every worker znode became world-readable (member records with pod names, UIDs and
    containers; assignments), and a session record (READ only for the group) got every permission."""
    ctx = context(zk_hosts, top, identity)
    new = DigestCredentials("orders", "the-rotated-password-0123456789")
    worker_acl = [make_digest_acl(VICTIM.username, VICTIM.password, all=True)]
    if identity is not None:
        worker_acl.append(identity.all())
    record_acl = [make_acl("digest", make_digest_acl(VICTIM.username, VICTIM.password).id.id, read=True)]
    try:
        rt = ctx_apply(ctx, "orders", zk_hosts)
        paths = GroupPaths.of(f"{top}/shop/orders")
        auth = [("digest", VICTIM.auth), ("digest", new.auth)] + ([identity.auth] if identity else [])
        with admin_client(zk_hosts, auth_data=auth) as worker:
            member = worker.create(f"{paths.clients}/m-", b'{"pod": "orders-0"}', acl=worker_acl, ephemeral=True,
                                   sequence=True)
            record = worker.create(f"{paths.sessions}/s-", b"session-password", acl=record_acl, ephemeral=True,
                                   sequence=True)
            assert isinstance(ctx.kube, RecordingKube)
            ctx.kube.secrets["orders-zk"] = new
            apply_spec(ctx, rt, spec(zk_hosts), generation=2, body=body())
            assert rt.previous_acl, "the rotation's grace period"
            member_acl = worker.get_acls(member)[0]
            assert all(e.id.scheme == "digest" for e in member_acl), member_acl
            assert {e.perms for e in member_acl if e.id != (identity.id if identity else None)} == {Permissions.ALL}
            record_now = worker.get_acls(record)[0]
            assert {e.perms for e in record_now} == {Permissions.READ}, record_now  # no ADMIN: left as it was
            # And after the grace period: the new password alone, still no world.
            migrate_worker_nodes_acl(worker, paths, [make_digest_acl(new.username, new.password, all=True)],
                                     identity=identity)
            assert [e.id.scheme for e in worker.get_acls(member)[0]] == ["digest"] * len(worker.get_acls(member)[0])
            assert Id("world", "anyone") not in {e.id for e in worker.get_acls(record)[0]}
    finally:
        ctx.close()


# ------------------------------------------------------------------------ 6: the upgrade


def test_the_upgrade_takes_over_what_the_older_operator_created(
    op: KazooClient, zk: KazooClient, zk_hosts: str, top: str, attacker: KazooClient
) -> None:
    """Groups and parents created without an identity (open parents, a group with credentials, one
    without, a worker's member node) keep working when the operator starts with one: it takes over the
    parents and the groups' own nodes; the workers' nodes name the operator too; a squatted root is
    refused and named."""
    old = context(zk_hosts, top, identity=None)
    try:
        secured = ctx_apply(old, "secured", zk_hosts)
        open_ = ctx_apply(old, "open", zk_hosts, credentials=False)
        assert secured.sync is not None and "no ZooKeeper identity of its own" in secured.sync.message
    finally:
        old.close()
    paths = GroupPaths.of(f"{top}/shop/secured")
    with admin_client(zk_hosts, auth_data=[("digest", VICTIM.auth)]) as worker:
        member = worker.create(f"{paths.clients}/m-", b"{}", sequence=True,
                               acl=[make_digest_acl(VICTIM.username, VICTIM.password, all=True)])
        # A member's session record: READ only for the group, which cannot re-ACL it (before: the
        # takeover failed on it with NoAuth, and the group stayed NotAuthorized).
        worker.create(f"{paths.sessions}/s-", b"", sequence=True, makepath=True,
                      acl=[make_acl("digest", make_digest_acl(VICTIM.username, VICTIM.password).id.id, read=True)])
    plant_group(attacker, f"{top}/shop/future", ephemeral=False)
    assert zk.get_acls(f"{top}/shop")[0] == OPEN_ACL_UNSAFE
    ctx = context(zk_hosts, top)
    try:
        for old_rt in (secured, open_):
            rt = ctx.group("shop", old_rt.name, old_rt.uid)
            apply_spec(ctx, rt, spec(zk_hosts, old_rt is secured), generation=2, body=body(old_rt.name))
            assert rt.sync is not None and rt.sync.ok, rt.sync
            assert "identity" not in rt.sync.message, rt.sync
            assert ACL(Permissions.ALL, OPERATOR.id) in op.get_acls(f"{top}/shop/{old_rt.name}")[0]
        for node in (top, f"{top}/shop"):
            assert sorted(op.get_acls(node)[0], key=str) == sorted(parent_acl(OPERATOR), key=str), node
        assert ACL(Permissions.ALL, OPERATOR.id) in op.get_acls(member)[0]
        assert ("Normal", "TakenOver") in events(ctx)
        future = ctx.group("shop", "future", "uid-future")
        refused_with(ctx, future, spec(zk_hosts), "NotCreatedByOperator")
    finally:
        ctx.close()


# ------------------------------------------------------------------------ the workers name the operator


def test_workers_name_the_operator_so_its_one_session_reads_the_group(
    ctx: OperatorContext, zk_hosts: str, top: str
) -> None:
    """With the identity the operator holds no group's credentials: its workers name the operator's
    identity (published in their ConfigMap) in the nodes they create, and the status loop reads the
    members and their assignment with the operator's own session."""
    rt = ctx_apply(ctx, "orders", zk_hosts)
    assert isinstance(ctx.kube, RecordingKube)
    published = ctx.kube.config_maps[("shop", "orders-rebalanser")]
    assert published["REBALANSER_ZK_OPERATOR_ID"] == OPERATOR.acl_id
    options = rebalanser.Options(hosts=zk_hosts, group=f"{top}/shop/orders", member_id="w0",
                                 credentials=(VICTIM.username, VICTIM.password),
                                 operator_id=published["REBALANSER_ZK_OPERATOR_ID"], min_interval=0.0)
    client = rebalanser.Client(options)
    client.start()
    try:
        with status_loop(ctx, rt):
            status = ctx.kube.wait_status(lambda s: s.get("members") == 1 and s.get("assigned") == 3, 30,
                                          "the member and its three resources, read by the operator's session")
        assert ctx.pool.connections() == 1
        assert status["members"] == 1, status
    finally:
        client.stop()
