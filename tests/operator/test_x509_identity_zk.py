"""The operator's x509 identity (issue 29, item 1: "the x509 identity of its TLS client certificate"),
against a real ZooKeeper with a mutual-TLS port and its X509AuthenticationProvider: the operator names
itself ``x509:<subject>`` on the parents and every group node, the server agrees on the spelling, nobody
else (another certificate, a digest client) may create or re-ACL anything there, and a group's worker
(the group's digest, its own certificate) works with what the operator published.

Each test has a path root of its own (``/x509-<hex>/{namespace}``), deleted afterwards.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import rebalanser
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import ACL, Id, Permissions, make_acl, make_digest_acl
from rebalanser.paths import GroupPaths
from rebalanser.tls import TlsOptions
from rebalanser_operator.apply.actions import InvalidSpec, RetryLater, apply_spec
from rebalanser_operator.apply.reconcile import ADOPT_ANNOTATION
from rebalanser_operator.identity import WORLD_READ, OperatorIdentity, parent_acl
from rebalanser_operator.main import x509_identity
from rebalanser_operator.replicas import Replicas, ReplicaSettings
from rebalanser_operator.runtime import GroupRuntime, LoopOptions, OperatorContext
from rebalanser_operator.tenancy import AllowedEnsembles, PathRoots, Tenancy
from rebalanser_operator.zkpool import DigestCredentials

from tests.operator.support import RecordingKube, status_loop
from tests.support.kubectl import wait_until
from tests.support.tls import Pki, server_log
from tests.support.zk import ZkCluster, admin_client, serving_cluster

pytestmark = pytest.mark.zk

#: a subject with a comma and several names: the server's spelling is the one that counts
OPERATOR_SUBJECT = "/C=DE/O=Example, Inc./OU=Platform/CN=rebalanser-operator"
OPERATOR_DN = "CN=rebalanser-operator,OU=Platform,O=Example\\, Inc.,C=DE"
VICTIM = DigestCredentials("orders", "victim-password-0123456789")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki.create(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def mtls(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZkCluster]:
    base = tmp_path_factory.mktemp("zk-x509")
    with serving_cluster(base, tls=pki.server_tls(base / "stores")) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def operator_dir(pki: Pki) -> Path:
    """The operator's identity Secret, mounted: ca.crt, tls.crt, tls.key."""
    return pki.client_dir("rebalanser-operator", subject=OPERATOR_SUBJECT)


@pytest.fixture(scope="module")
def identity(operator_dir: Path) -> OperatorIdentity:
    return x509_identity(str(operator_dir))  # as the operator reads it at start


@pytest.fixture
def top(mtls: ZkCluster, operator_dir: Path) -> Iterator[str]:
    node = f"/x509-{uuid.uuid4().hex[:10]}"
    yield node
    with tls_client(mtls, operator_dir, auth=[("digest", VICTIM.auth)]) as client:
        client.delete(node, recursive=True)


@pytest.fixture
def ctx(mtls: ZkCluster, top: str, pki: Pki, identity: OperatorIdentity) -> Iterator[OperatorContext]:
    settings = Tenancy(path_roots=PathRoots.parse([f"{top}/{{namespace}}"]),
                       ensembles=AllowedEnsembles.parse([mtls.secure_hosts]), cluster_id="cluster-1")
    kube = RecordingKube(secrets={"orders-zk": VICTIM})
    # the tenant's TLS Secret: its workers' certificate, never the operator's session's
    kube.tls_secrets["zk-tls"] = pki.trusted.issue("worker-orders").secret_data(pki.trusted)
    context = OperatorContext(kube=kube, options=LoopOptions(connect_wait=15.0), tenancy=settings,
                              identity=identity)
    yield context
    context.close()


def tls_client(cluster: ZkCluster, directory: Path,
               auth: list[tuple[str, str]] | None = None) -> AbstractContextManager[KazooClient]:
    return admin_client(cluster.secure_hosts, auth_data=auth, **TlsOptions.from_directory(str(directory))
                        .kazoo_arguments())


def spec(connect: str) -> dict[str, Any]:
    return {"zookeeper": {"connect": connect, "credentialsSecret": "orders-zk", "tls": {"secret": "zk-tls"}},
            "resources": ["r0", "r1", "r2"]}


def applied(ctx: OperatorContext, mtls: ZkCluster) -> GroupRuntime:
    rt = ctx.group("shop", "orders", "uid-orders")
    body = {"apiVersion": "rebalanser.io/v1alpha1", "kind": "ResourceGroup", "metadata": {"name": "orders"}}
    apply_spec(ctx, rt, spec(mtls.secure_hosts), generation=1, body=body)
    assert rt.sync is not None and rt.sync.ok, rt.sync
    return rt


def test_the_subject_is_spelled_as_the_server_names_the_operators_session(
    mtls: ZkCluster, operator_dir: Path, identity: OperatorIdentity, top: str
) -> None:
    """A node created with the ``auth`` scheme gets the ids the server gave the session: one, x509 and
    the subject computed from the certificate alone."""
    assert identity.id == Id("x509", OPERATOR_DN)
    with tls_client(mtls, operator_dir) as client:
        client.create(top, b"", acl=[ACL(Permissions.ALL, Id("auth", ""))])
        assert client.get_acls(top)[0] == [ACL(Permissions.ALL, identity.id)]


def test_the_operator_names_its_certificate_on_the_parents_and_every_group_node(
    ctx: OperatorContext, mtls: ZkCluster, pki: Pki, top: str, identity: OperatorIdentity
) -> None:
    rt = applied(ctx, mtls)
    log = server_log(mtls)
    assert f"Authenticated Id '{OPERATOR_DN}' for scheme 'x509'" in log
    assert "CN=worker-orders" not in log, "the operator's session presented the tenant's certificate"
    assert ctx.pool.connections() == 1
    with admin_client(mtls.hosts) as anyone:
        for node in (top, f"{top}/shop"):
            assert sorted(anyone.get_acls(node)[0], key=str) == sorted(parent_acl(identity), key=str), node
        paths = GroupPaths.of(f"{top}/shop/orders")
        for node in (paths.root, *paths.containers()[1:], paths.config, paths.resource("r0")):
            acl = anyone.get_acls(node)[0]
            assert ACL(Permissions.ALL, identity.id) in acl, (node, acl)
            assert [e.perms for e in acl if e.id.scheme == "digest"] == [Permissions.ALL & ~Permissions.ADMIN]
            assert make_acl("world", "anyone", read=True) in acl
    assert isinstance(ctx.kube, RecordingKube)
    published = ctx.kube.config_maps[("shop", "orders-rebalanser")]
    assert published["REBALANSER_ZK_OPERATOR_ID"] == f"x509:{OPERATOR_DN}"
    assert rt.sync is not None and "no ZooKeeper identity" not in rt.sync.message


def test_another_certificate_and_a_digest_client_may_not_create_or_re_acl_there(
    ctx: OperatorContext, mtls: ZkCluster, pki: Pki, top: str
) -> None:
    applied(ctx, mtls)
    root = f"{top}/shop/orders"
    stranger_dir = pki.client_dir("stranger")  # trusted by the server: only its ACL id differs
    with tls_client(mtls, stranger_dir) as stranger, \
            admin_client(mtls.hosts, auth_data=[("digest", "mallory:mallory-password")]) as digest:
        for client in (stranger, digest):
            for node in (f"{top}/squat", f"{top}/shop/squat"):
                with pytest.raises(NoAuthError):
                    client.create(node, b"")
            for node in (top, f"{top}/shop", root):
                with pytest.raises(NoAuthError):
                    client.set_acls(node, [make_digest_acl("mallory", "mallory-password", all=True)])
            with pytest.raises(NoAuthError):
                client.set(f"{top}/shop", b"forged")
    assert "Authenticated Id 'CN=stranger' for scheme 'x509'" in server_log(mtls)


def test_a_worker_with_the_groups_digest_and_its_own_certificate_works(
    ctx: OperatorContext, mtls: ZkCluster, pki: Pki, top: str
) -> None:
    """The worker names the operator's x509 id (from the ConfigMap) on the nodes it creates, so the
    operator's one session reads its members and assignment."""
    rt = applied(ctx, mtls)
    assert isinstance(ctx.kube, RecordingKube)
    published = ctx.kube.config_maps[("shop", "orders-rebalanser")]
    worker_dir = pki.client_dir("worker-w0")
    options = rebalanser.Options(hosts=mtls.secure_hosts, group=f"{top}/shop/orders", member_id="w0",
                                 credentials=(VICTIM.username, VICTIM.password),
                                 tls=TlsOptions.from_directory(str(worker_dir)),
                                 operator_id=published["REBALANSER_ZK_OPERATOR_ID"], min_interval=0.0)
    client = rebalanser.Client(options)
    client.start()
    try:
        with status_loop(ctx, rt):
            status = ctx.kube.wait_status(lambda s: s.get("members") == 1 and s.get("assigned") == 3, 30,
                                          "the member and its three resources, read by the operator's session")
        assert status["members"] == 1, status
        assert ctx.pool.connections() == 1
    finally:
        client.stop()


def test_the_upgrade_and_an_adoption_name_the_certificate(
    mtls: ZkCluster, pki: Pki, top: str, identity: OperatorIdentity, ctx: OperatorContext, operator_dir: Path
) -> None:
    """An operator without an identity made the parents (open) and a group over TLS with the group's
    certificate and credentials; a worker made a member node; someone made a group's layout by hand.
    The operator started with its certificate takes over the parents, the group and the member node
    (a tenant session: the group's certificate and credentials), and adopts the hand-made root only
    when annotated, re-ACLing the whole subtree for ``x509:<subject>``."""
    old = OperatorContext(kube=ctx.kube, options=LoopOptions(connect_wait=15.0), tenancy=ctx.tenancy)
    try:
        secured = applied(old, mtls)
    finally:
        old.close()
    paths = GroupPaths.of(f"{top}/shop/orders")
    worker_dir = pki.client_dir("worker-upgrade")
    with tls_client(mtls, worker_dir, auth=[("digest", VICTIM.auth)]) as worker:
        member = worker.create(f"{paths.clients}/m-", b"{}", sequence=True,
                               acl=[make_digest_acl(VICTIM.username, VICTIM.password, all=True)])
    made = GroupPaths.of(f"{top}/shop/restored")
    with admin_client(mtls.hosts) as anyone:
        for node in made.containers():
            anyone.ensure_path(node)
        anyone.create(made.epoch, b"7")
        assert sorted(anyone.get_acls(f"{top}/shop")[0], key=str) != sorted(parent_acl(identity), key=str)

    rt = ctx.group("shop", "orders", secured.uid)
    apply_spec(ctx, rt, spec(mtls.secure_hosts), generation=2,
               body={"apiVersion": "rebalanser.io/v1alpha1", "kind": "ResourceGroup", "metadata": {"name": "orders"}})
    assert rt.sync is not None and rt.sync.ok, rt.sync
    assert isinstance(ctx.kube, RecordingKube)
    assert ("Normal", "TakenOver") in {(t, r) for t, r, _ in ctx.kube.events}
    with tls_client(mtls, operator_dir) as op:  # the member node is not world-readable
        for node in (top, f"{top}/shop"):
            assert sorted(op.get_acls(node)[0], key=str) == sorted(parent_acl(identity), key=str), node
        for node in (paths.root, paths.config, member):
            assert ACL(Permissions.ALL, identity.id) in op.get_acls(node)[0], node

    restored = ctx.group("shop", "restored", "uid-restored")
    raw = spec(mtls.secure_hosts)

    def body(annotations: dict[str, str]) -> dict[str, Any]:
        return {"apiVersion": "rebalanser.io/v1alpha1", "kind": "ResourceGroup",
                "metadata": {"name": "restored", "annotations": annotations}}

    with pytest.raises((InvalidSpec, RetryLater)):
        apply_spec(ctx, restored, raw, generation=1, body=body({}))
    assert restored.sync is not None and restored.sync.reason == "NotCreatedByOperator", restored.sync
    apply_spec(ctx, restored, raw, generation=2, body=body({ADOPT_ANNOTATION: "true"}))
    assert restored.sync is not None and restored.sync.ok, restored.sync
    with admin_client(mtls.hosts) as anyone:
        for node in (made.root, *made.containers()[1:], made.epoch):
            assert ACL(Permissions.ALL, identity.id) in anyone.get_acls(node)[0], node
        with pytest.raises(NoAuthError):
            anyone.set(made.epoch, b"8")


def test_a_group_on_a_plain_port_is_told_the_operator_connects_with_its_certificate(
    ctx: OperatorContext, mtls: ZkCluster
) -> None:
    """With the x509 identity every session of the operator's is TLS with its certificate: a group that
    names the plain port is unreachable, and its status says why."""
    ctx.tenancy = replace(ctx.tenancy, ensembles=AllowedEnsembles.parse([mtls.hosts, mtls.secure_hosts]))
    ctx.options = LoopOptions(connect_wait=2.0)  # how long a step waits for the session before it ends
    rt = ctx.group("shop", "plain", "uid-plain")
    raw = {"zookeeper": {"connect": mtls.hosts, "credentialsSecret": "orders-zk"}, "resources": ["r0"]}
    body = {"apiVersion": "rebalanser.io/v1alpha1", "kind": "ResourceGroup", "metadata": {"name": "plain"}}
    with pytest.raises(RetryLater):
        apply_spec(ctx, rt, raw, generation=1, body=body)
    assert rt.sync is not None and rt.sync.reason == "ZooKeeperUnreachable", rt.sync
    assert "the operator's own certificate" in rt.sync.message and "TLS port" in rt.sync.message, rt.sync


def test_replicas_with_the_certificate_share_the_groups_in_a_group_only_it_may_touch(
    mtls: ZkCluster, identity: OperatorIdentity, operator_dir: Path, pki: Pki, top: str
) -> None:
    """Issue 32 under the x509 identity: two replicas join the operator group over mutual TLS as the
    operator's certificate, share the groups, and every node of that group (the parents, the containers,
    the members' nodes, their session records) names the certificate alone; a trusted stranger's
    certificate and a digest client may neither write there nor read a session's password."""
    path = f"{top}/operator"
    groups = [("shop", f"g{i}") for i in range(6)]
    replicas = [Replicas(ReplicaSettings(hosts=mtls.secure_hosts, group=path, member_id=member, session_timeout=4.0,
                                         min_interval=0.2, stop_timeout=10.0), identity) for member in ("op-a", "op-b")]
    try:
        for replica in replicas:
            replica.start()

        def shared() -> bool:
            writer = next((r for r in replicas if r.in_office()), None)
            if writer is not None and not writer.owned():
                writer.write_list(groups)
            return all(sum(r.owns(*g) for r in replicas) == 1 for g in groups) and all(r.owned() for r in replicas)

        wait_until(shared, 30, lambda: f"each group owned by one replica: {[sorted(r.owned()) for r in replicas]}")
        paths = GroupPaths.of(path)
        ours = ACL(Permissions.ALL, Id("x509", OPERATOR_DN))
        with tls_client(mtls, operator_dir) as operator, tls_client(mtls, pki.client_dir("stranger")) as stranger, \
                admin_client(mtls.hosts, auth_data=[("digest", "mallory:mallory-password")]) as digest:
            for node in (top, path, paths.resources, paths.owners, paths.clients):
                assert operator.get_acls(node)[0] == [ours, WORLD_READ], node
            members = [paths.client(name) for name in operator.get_children(paths.clients)]
            sessions = [f"{path}/sessions/{name}" for name in operator.get_children(f"{path}/sessions")]
            assert len(members) == 2 and len(sessions) == 2, (members, sessions)
            for node in members:
                assert operator.get_acls(node)[0] == [ours], node
            for node in sessions:
                assert operator.get_acls(node)[0] == [ACL(Permissions.READ, Id("x509", OPERATOR_DN))], node
            for client in (stranger, digest):
                for node in [*members, *sessions]:
                    with pytest.raises(NoAuthError):
                        client.get(node)
                with pytest.raises(NoAuthError):
                    client.create(paths.resource("planted"), b"")
                with pytest.raises(NoAuthError):
                    client.set(members[0], b"forged")
    finally:
        for replica in replicas:
            replica.stop()
