"""A rotated Secret is applied as the Secret poll received it: the re-apply never reads it again from
the API server (against a real ZooKeeper; the API server is the recording fake)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from kazoo.client import KazooClient
from rebalanser.paths import GroupPaths
from rebalanser_operator.apply.actions import apply_spec
from rebalanser_operator.apply.secretpoll import poll_once
from rebalanser_operator.identity import DigestCredentials
from rebalanser_operator.runtime import LoopOptions, OperatorContext
from rebalanser_operator.zktls import TlsMaterial

from tests.operator.support import TEST_TENANCY, RecordingKube, settle
from tests.support.zk import admin_client, purge

pytestmark = pytest.mark.zk


@dataclass
class CountingKube(RecordingKube):
    """Counts the reads of a Secret's content (the poll's ``secret_data`` aside)."""

    reads: list[str] = field(default_factory=list)

    def read_credentials(self, namespace: str, secret: str, *, username_key: str = "username",
                         password_key: str = "password") -> DigestCredentials:
        self.reads.append(secret)
        return super().read_credentials(namespace, secret, username_key=username_key, password_key=password_key)

    def read_tls(self, namespace: str, secret: str, *, verify_hostname: bool = False,
                 keys: tuple[str, str, str] = ("ca.crt", "tls.crt", "tls.key")) -> TlsMaterial:
        self.reads.append(secret)
        return super().read_tls(namespace, secret, verify_hostname=verify_hostname, keys=keys)


@pytest.fixture
def kube() -> CountingKube:
    return CountingKube()


@pytest.fixture
def ctx(kube: CountingKube) -> Iterator[OperatorContext]:
    context = OperatorContext(tenancy=TEST_TENANCY, kube=kube, options=LoopOptions(connect_wait=5.0))
    yield context
    context.close()


def test_the_re_apply_uses_the_secret_as_the_poll_received_it(
    ctx: OperatorContext, kube: CountingKube, zk: KazooClient, zk_hosts: str, group_path: str
) -> None:
    kube.secrets["zk-digest"] = DigestCredentials("op", "old-password")
    spec = {"zookeeper": {"connect": zk_hosts, "path": group_path, "credentialsSecret": "zk-digest"},
            "resources": ["a"]}
    rt = ctx.group("shop", "orders", "uid-orders")
    try:
        apply_spec(ctx, rt, spec, generation=1)
        assert set(kube.reads) == {"zk-digest"}, "the first apply reads the Secret (each attempt)"
        kube.reads.clear()

        kube.secrets["zk-digest"] = DigestCredentials("op", "new-password")

        def read_then_change(namespace: str, secret: str) -> dict[str, str] | None:
            """The Secret changes once more just after the poll read it: the re-apply applies what it read."""
            data = kube.secret_data(namespace, secret)
            kube.secrets["zk-digest"] = DigestCredentials("op", "newer-password")
            return data

        assert poll_once(ctx, read_then_change) == 1
        settle(ctx, rt)  # a first re-apply that met its new session connecting: the refresh's retry

        assert kube.reads == [], "the re-apply read the Secret again"
        assert rt.credentials == DigestCredentials("op", "new-password")
        assert rt.previous_credentials == DigestCredentials("op", "old-password") and rt.grace_until is not None
        acls, _ = zk.get_acls(GroupPaths.of(group_path).resources)
        assert len([a for a in acls if a.id.scheme == "digest"]) == 2, acls  # both passwords, for the grace
        assert not rt.secrets_changed and rt.rotation.received == ()

        # The next poll sees the newer password, and that re-apply uses it (still without a read).
        assert poll_once(ctx, kube.secret_data) == 1
        settle(ctx, rt)
        assert kube.reads == [] and rt.credentials == DigestCredentials("op", "newer-password")
    finally:
        with admin_client(zk_hosts, auth_data=[("digest", "op:newer-password"), ("digest", "op:new-password"),
                                               ("digest", "op:old-password")]) as client:
            purge(client, group_path)
