"""The operator's side of TLS against a real ZooKeeper with a mutual-TLS port (the Kubernetes side is
the recording stand-in; tests/e2e/test_operator_tls_e2e.py has the real API server): a group reconciled
over TLS, what the workers' ConfigMap says (references only), bad material reported, and rotation of
the TLS and the credentials Secret without a restart."""

from __future__ import annotations

import base64
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from kazoo.exceptions import NoAuthError
from kazoo.security import make_digest_acl
from rebalanser.paths import GroupPaths
from rebalanser_operator.apply.actions import RetryLater, apply_spec, end_grace, hold_grace
from rebalanser_operator.identity import DigestCredentials
from rebalanser_operator.kube import tls_from
from rebalanser_operator.runtime import GroupRuntime, LoopOptions, OperatorContext

from tests.operator.support import TEST_TENANCY, RecordingKube, conditions, resync, secret_seen, settle, status_loop
from tests.support.tls import Pki, bundle, server_log
from tests.support.zk import ZkCluster, admin_client, purge, serving_cluster

pytestmark = pytest.mark.zk

BODY = {"apiVersion": "rebalanser.io/v1alpha1", "kind": "ResourceGroup", "metadata": {"name": "orders"}}


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki.create(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def mtls(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZkCluster]:
    base = tmp_path_factory.mktemp("zk-mtls")
    with serving_cluster(base, tls=pki.server_tls(base / "stores")) as cluster:
        yield cluster


@pytest.fixture
def kube() -> RecordingKube:
    return RecordingKube()


@pytest.fixture
def ctx(kube: RecordingKube) -> Iterator[OperatorContext]:
    context = OperatorContext(tenancy=TEST_TENANCY, kube=kube, options=LoopOptions(connect_wait=15.0))
    yield context
    context.close()


@pytest.fixture
def path(mtls: ZkCluster, group_path: str) -> Iterator[str]:
    yield group_path
    with admin_client(mtls.hosts) as zk:
        purge(zk, group_path)


def spec(hosts: str, path: str, secret: str = "zk-tls", **fields: Any) -> dict[str, Any]:
    return {"zookeeper": {"connect": hosts, "path": path, "tls": {"secret": secret}}, **fields}


def runtime(ctx: OperatorContext) -> GroupRuntime:
    return ctx.group("shop", "orders", "uid-1")


def resources(cluster: ZkCluster, path: str) -> list[str]:
    with admin_client(cluster.hosts) as zk:
        return sorted(zk.get_children(GroupPaths.of(path).resources))


def test_a_group_is_reconciled_over_mutual_tls_and_workers_get_references_only(
    pki: Pki, mtls: ZkCluster, kube: RecordingKube, ctx: OperatorContext, path: str
) -> None:
    kube.tls_secrets["zk-tls"] = pki.trusted.issue("operator-1").secret_data(pki.trusted)
    rt = runtime(ctx)
    result = apply_spec(ctx, rt, spec(mtls.secure_hosts, path, resources=["a", "b"]), generation=1, body=BODY)
    assert result.created == 2 and rt.sync is not None and rt.sync.ok
    assert resources(mtls, path) == ["a", "b"]
    assert "Authenticated Id 'CN=operator-1' for scheme 'x509'" in server_log(mtls)
    published = kube.config_maps[("shop", "orders-rebalanser")]
    assert published["REBALANSER_ZK_TLS_SECRET"] == "zk-tls"
    assert published["REBALANSER_ZK_TLS_DIR"] == "/etc/rebalanser/zookeeper-tls"
    assert not any("BEGIN" in value for value in published.values()), "key material in the ConfigMap"


def test_missing_or_untrusted_tls_material_is_reported_and_retried(
    pki: Pki, mtls: ZkCluster, kube: RecordingKube, ctx: OperatorContext, path: str
) -> None:
    rt = runtime(ctx)
    with pytest.raises(RetryLater):
        apply_spec(ctx, rt, spec(mtls.secure_hosts, path), generation=1, body=BODY)
    assert rt.sync is not None and rt.sync.reason == "TlsSecretUnavailable"
    kube.tls_secrets["zk-tls"] = pki.other.issue("stranger").secret_data(pki.trusted)
    ctx.options = LoopOptions(connect_wait=5.0)
    with pytest.raises(RetryLater, match="over TLS"):
        apply_spec(ctx, rt, spec(mtls.secure_hosts, path), generation=1, body=BODY)
    assert rt.sync is not None and rt.sync.reason == "ZooKeeperUnreachable"
    # The Secret is fixed: its change alone (no spec change) gets the group synced.
    kube.tls_secrets["zk-tls"] = pki.trusted.issue("operator-fixed").secret_data(pki.trusted)
    assert secret_seen(ctx, "shop", "zk-tls", kube.tls_secrets["zk-tls"]) == 1  # its step re-applies it
    settle(ctx, rt)  # its new session was connecting: the refresh applies it again once connected
    assert rt.sync is not None and rt.sync.ok and not rt.secrets_changed
    assert secret_seen(ctx, "shop", "zk-tls", kube.tls_secrets["zk-tls"]) == 0, "unchanged material marked"


def test_a_rotated_tls_secret_moves_the_group_to_a_new_connection(
    pki: Pki, kube: RecordingKube, ctx: OperatorContext, tmp_path: Path, group_path: str
) -> None:
    """The server trusts both CAs; the Secret moves from a certificate of the first to one of the second,
    then the first is revoked from the server's trust store and the server restarted: the operator's next
    ZooKeeper operation goes through, with the new certificate (the server logs its subject)."""
    tls = pki.server_tls(tmp_path / "stores", pki.trusted, pki.other)
    with serving_cluster(tmp_path / "zk", tls=tls) as cluster:
        kube.tls_secrets["zk-tls"] = pki.trusted.issue("operator-old").secret_data(pki.trusted)
        rt = runtime(ctx)
        raw = spec(cluster.secure_hosts, group_path, resources=["a"])
        apply_spec(ctx, rt, raw, generation=1, body=BODY)
        old_client = ctx.pool.acquire(cluster.secure_hosts, rt.user, tls=rt.tls)

        kube.tls_secrets["zk-tls"] = pki.other.issue("operator-new").secret_data(pki.trusted)
        assert secret_seen(ctx, "shop", "zk-tls", kube.tls_secrets["zk-tls"]) == 1
        settle(ctx, rt)
        assert rt.sync is not None and rt.sync.ok
        new_client = ctx.pool.acquire(cluster.secure_hosts, rt.user, tls=rt.tls)
        assert new_client is not old_client and not old_client.connected, "the old connection was not replaced"
        assert ctx.pool.connections() == 1
        assert "Authenticated Id 'CN=operator-new'" in server_log(cluster)

        bundle(tls.trust_store, pki.other)  # the old CA is no longer trusted
        server = cluster.servers[0]
        server.stop()
        server.start()
        cluster.wait_serving()
        result = apply_spec(ctx, rt, {**raw, "resources": ["a", "b"]}, generation=2, body=BODY)
        assert result.created == 1 and resources(cluster, group_path) == ["a", "b"]


def test_rotated_digest_credentials_become_the_groups_acl_without_a_spec_change(
    kube: RecordingKube, ctx: OperatorContext, zk_hosts: str, group_path: str
) -> None:
    kube.secrets["zk-digest"] = DigestCredentials("op", "old-password")
    rt = runtime(ctx)
    raw = {"zookeeper": {"connect": zk_hosts, "path": group_path, "credentialsSecret": "zk-digest"},
           "resources": ["a"]}
    apply_spec(ctx, rt, raw, generation=1, body=BODY)
    paths = GroupPaths.of(group_path)

    def may_write(password: str) -> bool:
        """Whether a session with these credentials may create under the group's resources."""
        with admin_client(zk_hosts, auth_data=[("digest", f"op:{password}")]) as client:
            try:
                client.create(f"{paths.resources}/probe")
            except NoAuthError:
                return False
            client.delete(f"{paths.resources}/probe")
            return True

    assert may_write("old-password") and not may_write("new-password")
    # What workers holding the old password created: persistent nodes with their own ACL.
    worker_nodes = [paths.epoch, paths.state, paths.member_assignment("m-1"), paths.assignment_part("m-1", "p0")]
    with admin_client(zk_hosts, auth_data=[("digest", "op:old-password")],
                      default_acl=[make_digest_acl("op", "old-password", all=True)]) as worker:
        for node in worker_nodes:
            worker.create(node, b"{}", makepath=True)

    def may_set(password: str) -> bool:
        """Whether a worker restarted with these credentials may update every one of those nodes."""
        with admin_client(zk_hosts, auth_data=[("digest", f"op:{password}")]) as client:
            try:
                for node in worker_nodes:
                    client.set(node, b"{}")
            except NoAuthError:
                return False
            return True

    assert may_set("old-password") and not may_set("new-password")
    kube.secrets["zk-digest"] = DigestCredentials("op", "new-password")
    secret_data = {"username": base64.b64encode(b"op").decode(), "password": base64.b64encode(b"new-password").decode()}
    assert secret_seen(ctx, "shop", "zk-digest", secret_data) == 1
    settle(ctx, rt)
    assert rt.credentials == DigestCredentials("op", "new-password")
    # The grace period: both passwords may write, so workers move over one by one without a restart.
    assert may_write("new-password"), "the new credentials may not write the group"
    assert may_write("old-password"), "the old credentials lost their access before the grace period ended"
    assert may_set("new-password"), "workers holding the new credentials could not write their nodes"
    assert may_set("old-password"), "workers still holding the old credentials could not write their nodes"
    assert rt.grace_until is not None and end_grace(rt, rt.grace_until)
    resync(ctx, rt)  # what the status loop does once the grace period is over
    assert may_write("new-password") and may_set("new-password")
    assert not may_write("old-password"), "the old credentials still may write the group"
    assert not may_set("old-password"), "the old credentials still may write the workers' nodes"
    with admin_client(zk_hosts, auth_data=[("digest", "op:new-password")]) as client:
        purge(client, group_path)


def test_an_operator_restarted_inside_the_grace_period_keeps_the_previous_password_then_sweeps(
    kube: RecordingKube, zk_hosts: str, group_path: str
) -> None:
    """The grace period lives in the group root's ACL, not only in the operator's memory: an operator
    started during it (holding only the new password) keeps both passwords for a full grace period."""
    kube.secrets["zk-digest"] = DigestCredentials("op", "old-password")
    raw = {"zookeeper": {"connect": zk_hosts, "path": group_path, "credentialsSecret": "zk-digest"},
           "resources": ["a"]}
    paths = GroupPaths.of(group_path)
    first = OperatorContext(tenancy=TEST_TENANCY, kube=kube, options=LoopOptions(connect_wait=15.0))
    try:
        apply_spec(first, runtime(first), raw, generation=1, body=BODY)
        kube.secrets["zk-digest"] = DigestCredentials("op", "new-password")
        resync(first, runtime(first))  # the rotation begins ...
    finally:
        first.close()  # ... and the operator goes away inside the grace period
    # A worker that had not noticed the new password created a node naming only the old one.
    lagging = paths.member_assignment("lagging")
    with admin_client(zk_hosts, auth_data=[("digest", "op:old-password")],
                      default_acl=[make_digest_acl("op", "old-password", all=True)]) as worker:
        worker.create(lagging, b"{}")

    def may_create(password: str) -> bool:
        with admin_client(zk_hosts, auth_data=[("digest", f"op:{password}")]) as client:
            try:
                client.create(f"{paths.clients}/probe-{password}", ephemeral=True)
            except NoAuthError:
                return False
            return True

    second = OperatorContext(tenancy=TEST_TENANCY, kube=kube, options=LoopOptions(connect_wait=15.0))
    try:
        rt = runtime(second)
        apply_spec(second, rt, raw, generation=1, body=BODY)
        assert rt.previous_acl == [make_digest_acl("op", "old-password", all=True)], rt.previous_acl
        assert may_create("old-password"), "a restarted operator cut the grace period short"
        assert hold_grace(second, second.pool.acquire(zk_hosts, rt.user), rt) == 0  # the lagging node refuses it
        assert rt.grace_until is not None and end_grace(rt, rt.grace_until)
        resync(second, rt)
        assert rt.sync is not None and rt.sync.ok, "one node the operator cannot re-ACL failed the sweep"
        assert may_create("new-password")
        assert not may_create("old-password"), "the old password may still write after the sweep"
    finally:
        second.close()
    with admin_client(zk_hosts, auth_data=[("digest", "op:new-password"), ("digest", "op:old-password")]) as client:
        purge(client, group_path)


# ------------------------------------------------------------------ TLS material in bounded space (issue 29)

ROTATIONS = 100
CA_PADDING = 700_000  # the CA bundle size that filled the chart's 16 MiB /tmp in 24 rotations


def stored(tmp: Path) -> tuple[int, int]:
    """(contents, bytes) the operator's TLS store holds under ``tmp``."""
    stores = list(tmp.glob("rebalanser-zk-tls-*"))
    contents = [d for store in stores for d in store.iterdir() if d.is_dir()]
    return len(contents), sum(f.stat().st_size for store in stores for f in store.rglob("*") if f.is_file())


def padded_ca(data: dict[str, str], rotation: int) -> dict[str, str]:
    """The Secret with its CA bundle made ``CA_PADDING`` bytes larger (text before the certificate, which
    TLS libraries skip) and different in each rotation."""
    ca = base64.b64decode(data["ca.crt"])
    padding = (f"# rotation {rotation}\n" + "#" * 99 + "\n") * (CA_PADDING // 100)
    return {**data, "ca.crt": base64.b64encode(padding.encode() + ca).decode()}


def test_a_hundred_rotations_leave_only_the_live_content_in_the_store(
    pki: Pki, mtls: ZkCluster, kube: RecordingKube, path: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))  # where the operator's store lives
    tenancy = replace(TEST_TENANCY, limits=replace(TEST_TENANCY.limits, secret_key_bytes=1 << 20))
    ctx = OperatorContext(tenancy=tenancy, kube=kube, options=LoopOptions(connect_wait=15.0))
    issued = pki.trusted.issue("operator-rotating").secret_data(pki.trusted)
    try:
        rt = runtime(ctx)
        for rotation in range(ROTATIONS):
            kube.tls_secrets["zk-tls"] = padded_ca(issued, rotation)
            apply_spec(ctx, rt, spec(mtls.secure_hosts, path, resources=["a"]), generation=1, body=BODY)
            assert rt.sync is not None and rt.sync.ok, rt.sync
        contents, size = stored(tmp)
        live = sum(len(base64.b64decode(value)) for value in kube.tls_secrets["zk-tls"].values())
        print(f"\nTLS store after {ROTATIONS} rotations of a {live} byte content: {contents} content(s), {size} bytes")
        assert contents == 1 and size == live, (
            f"after {ROTATIONS} rotations the store holds {contents} contents, {size} bytes (the live one: {live})")
    finally:
        ctx.close()
    assert stored(tmp) == (0, 0), "the operator's store outlived it"


def test_a_secret_key_above_the_limit_is_refused_with_a_reason_and_nothing_is_written(
    pki: Pki, mtls: ZkCluster, kube: RecordingKube, ctx: OperatorContext, path: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    kube.tls_secrets["zk-tls"] = padded_ca(pki.trusted.issue("operator-big").secret_data(pki.trusted), 0)
    rt = runtime(ctx)
    with pytest.raises(RetryLater, match=r"key ca\.crt of Secret shop/zk-tls holds \d+ bytes"):
        apply_spec(ctx, rt, spec(mtls.secure_hosts, path), generation=1, body=BODY)
    assert rt.sync is not None and rt.sync.reason == "SecretKeyTooLarge"
    assert ("Warning", "SecretKeyTooLarge") in {(t, r) for t, r, _ in kube.events}
    assert stored(tmp) == (0, 0), "the refused material was written"
    with status_loop(ctx, rt):
        kube.wait_status(lambda s: conditions(s)["ResourcesSynced"]["reason"] == "SecretKeyTooLarge", 20,
                         "the refusal in the ResourcesSynced condition")


def test_groups_whose_ca_verifies_nothing_do_not_delay_another_tenant(
    pki: Pki, mtls: ZkCluster, kube: RecordingKube, ctx: OperatorContext, path: str
) -> None:
    """64 groups whose TLS Secret's CA verifies nothing (each handshake fails), applied all at once; the
    quiet tenant's reconcile meanwhile is as quick as without them."""
    kube.tls_secrets["zk-tls"] = pki.trusted.issue("operator-quiet").secret_data(pki.trusted)
    kube.tls_secrets["stranger"] = pki.other.issue("stranger").secret_data(pki.other)
    quiet_rt = runtime(ctx)

    def reconcile(generation: int) -> float:
        started = time.monotonic()
        apply_spec(ctx, quiet_rt, spec(mtls.secure_hosts, path, resources=[f"r{i}" for i in range(generation)]),
                   generation=generation, body=BODY)
        return time.monotonic() - started

    def noisy(index: int) -> str:
        rt = ctx.group("noisy", f"g{index}", f"uid-n{index}")
        try:
            apply_spec(ctx, rt, spec(mtls.secure_hosts, f"{path}-n{index}", secret="stranger"), generation=1, body=BODY)
        except RetryLater:
            return rt.sync.reason if rt.sync is not None else "?"
        return "Synced"

    ctx.options = LoopOptions(connect_wait=5.0)
    reconcile(1)
    quiet = [reconcile(g) for g in range(2, 5)]
    callers = ThreadPoolExecutor(max_workers=64)
    try:
        futures = [callers.submit(noisy, i) for i in range(64)]
        deadline = time.monotonic() + 20
        while len(ctx.pool.users(mtls.secure_hosts, tls_from(kube.tls_secrets["stranger"], "x"))) <= 32:
            assert time.monotonic() < deadline, "the noisy groups did not start connecting"
            time.sleep(0.02)
        loaded = [reconcile(g) for g in range(5, 8)]
        outcomes = [f.result(timeout=60) for f in futures]
    finally:
        callers.shutdown(wait=True)
    print(f"\nquiet reconcile over TLS: max {max(quiet):.4f}s; "
          f"with 64 untrusted-CA groups applied: max {max(loaded):.4f}s")
    assert max(loaded) < 1.5, f"the quiet tenant's reconcile took {max(loaded):.2f}s (quiet: {max(quiet):.3f}s)"
    assert set(outcomes) == {"ZooKeeperUnreachable"}, outcomes[:3]
