"""The operator connects with the keys a credentialsSecretRef names (apply_spec against real ZooKeeper),
and notices a change of exactly those keys."""

from __future__ import annotations

import base64
from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient
from rebalanser.paths import GroupPaths
from rebalanser_operator.apply.actions import RetryLater, apply_spec, delete_znodes, secret_changed
from rebalanser_operator.identity import DigestCredentials
from rebalanser_operator.runtime import LoopOptions, OperatorContext

from tests.operator.support import TEST_TENANCY, RecordingKube

pytestmark = pytest.mark.zk

BODY = {"apiVersion": "rebalanser.io/v1alpha1", "kind": "ResourceGroup", "metadata": {"name": "orders"}}


def encoded(**data: str) -> dict[str, str]:
    return {key.replace("_", "-"): base64.b64encode(value.encode()).decode() for key, value in data.items()}


@pytest.fixture
def kube() -> RecordingKube:
    recording = RecordingKube()
    # a Secret's raw data (RecordingKube reads credentials and TLS material from it by key)
    recording.tls_secrets["zk-login"] = encoded(zk_user="op", zk_pass="pw", username="decoy", password="decoy")
    return recording


@pytest.fixture
def ctx(kube: RecordingKube) -> Iterator[OperatorContext]:
    context = OperatorContext(tenancy=TEST_TENANCY, kube=kube, options=LoopOptions(connect_wait=1.0))
    yield context
    context.close()


def test_the_keys_a_reference_names_are_the_credentials_used(
    ctx: OperatorContext, zk: KazooClient, zk_hosts: str, group_path: str
) -> None:
    spec = {"zookeeper": {"connect": zk_hosts, "path": group_path,
                          "credentialsSecretRef": {"name": "zk-login", "usernameKey": "zk-user",
                                                   "passwordKey": "zk-pass"}},
            "resources": ["a"]}
    rt = ctx.group("shop", "orders", "uid-1")
    apply_spec(ctx, rt, spec, generation=1, body=BODY)
    assert rt.credentials == DigestCredentials("op", "pw")
    acls, _ = zk.get_acls(GroupPaths.of(group_path).resources)
    digests = {acl.id.id.split(":")[0] for acl in acls if acl.id.scheme == "digest"}
    assert digests == {"op"}

    assert not secret_changed(rt, "zk-login", encoded(zk_user="op", zk_pass="pw", username="x", password="y"))
    assert secret_changed(rt, "zk-login", encoded(zk_user="op", zk_pass="new", username="decoy", password="decoy"))
    # The test's own client cannot delete the protected group; the operator deletes what it created.
    assert delete_znodes(ctx, rt, spec, annotations={}).startswith("deleted")
    assert zk.exists(group_path) is None


def test_the_name_alone_reads_the_default_keys(ctx: OperatorContext, kube: RecordingKube, zk_hosts: str,
                                               group_path: str) -> None:
    kube.tls_secrets["zk-login"] = encoded(zk_user="op", zk_pass="pw")
    spec = {"zookeeper": {"connect": zk_hosts, "path": group_path, "credentialsSecret": "zk-login"}}
    rt = ctx.group("shop", "orders", "uid-1")
    with pytest.raises(RetryLater):
        apply_spec(ctx, rt, spec, generation=1, body=BODY)
    assert rt.sync is not None and rt.sync.reason == "CredentialsUnavailable"
    assert "'username' and 'password'" in rt.sync.message
