"""apply_spec / delete_znodes (what the kopf handlers call) against real ZooKeeper."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from rebalanser.paths import GroupPaths
from rebalanser_operator.apply.actions import (
    DELETE_GIVE_UP_SECONDS,
    KEEP_ZNODES,
    MEMBERS_LEAVE_WAIT_SECONDS,
    SKIP_CLEANUP,
    InvalidSpec,
    RetryLater,
    apply_spec,
    delete_znodes,
)
from rebalanser_operator.apply.reconcile import OwnerMarker
from rebalanser_operator.identity import DigestCredentials
from rebalanser_operator.runtime import GroupRuntime, LoopOptions, OperatorContext

from tests.operator.support import TEST_TENANCY, RecordingKube
from tests.support.workers import Group, wait_for
from tests.support.zk import free_port

pytestmark = pytest.mark.zk

BODY = {"apiVersion": "rebalanser.io/v1alpha1", "kind": "ResourceGroup", "metadata": {"name": "orders"}}


@pytest.fixture
def kube() -> RecordingKube:
    return RecordingKube()


@pytest.fixture
def ctx(kube: RecordingKube) -> Iterator[OperatorContext]:
    context = OperatorContext(tenancy=TEST_TENANCY, kube=kube, options=LoopOptions(connect_wait=1.0))
    yield context
    context.close()


def raw(hosts: str, path: str, **fields: Any) -> dict[str, Any]:
    return {"zookeeper": {"connect": hosts, "path": path}, **fields}


def runtime(ctx: OperatorContext) -> GroupRuntime:
    return ctx.group("shop", "orders", "uid-1")


def test_apply_spec_syncs_and_records_the_outcome(
    ctx: OperatorContext, kube: RecordingKube, zk: KazooClient, zk_hosts: str, group_path: str
) -> None:
    rt = runtime(ctx)
    result = apply_spec(ctx, rt, raw(zk_hosts, group_path, resources=["a", "b"]), generation=3, body=BODY)
    assert result.created == 2 and rt.sync is not None and rt.sync.ok
    assert rt.generation == 3 and rt.path == group_path and rt.desired == {"a", "b"}
    assert sorted(zk.get_children(GroupPaths.of(group_path).resources)) == ["a", "b"]
    assert kube.reasons() == ["ResourcesSynced"]
    apply_spec(ctx, rt, raw(zk_hosts, group_path, resources=["a", "b"]), generation=4, body=BODY)
    assert kube.reasons() == ["ResourcesSynced"], "a no-op reconcile must not post events"


def test_apply_spec_publishes_what_workers_need_once_per_change(
    ctx: OperatorContext, kube: RecordingKube, zk_hosts: str, group_path: str
) -> None:
    rt = runtime(ctx)
    apply_spec(ctx, rt, raw(zk_hosts, group_path, resources=["a"]), generation=1, body=BODY)
    assert kube.config_maps == {("shop", "orders-rebalanser"): {
        "REBALANSER_ZK": zk_hosts, "REBALANSER_GROUP": group_path, "REBALANSER_RESOURCE_GROUP": "shop/orders"}}
    kube.config_maps.clear()
    apply_spec(ctx, rt, raw(zk_hosts, group_path, resources=["a", "b"]), generation=2, body=BODY)
    assert kube.config_maps == {}, "unchanged worker config must not be re-published"


def test_unreachable_zookeeper_is_a_retry_with_backoff_and_one_event(
    ctx: OperatorContext, kube: RecordingKube, group_path: str
) -> None:
    rt = runtime(ctx)
    dead = f"127.0.0.1:{free_port()}"
    delays = []
    for attempt in range(3):
        started = time.monotonic()
        with pytest.raises(RetryLater) as caught:
            apply_spec(ctx, rt, raw(dead, group_path), generation=1, body=BODY, retry=attempt)
        assert time.monotonic() - started < 3.0
        delays.append(caught.value.delay)
    assert delays == [1.0, 2.0, 4.0]
    assert rt.sync is not None and rt.sync.reason == "ZooKeeperUnreachable"
    assert kube.reasons() == ["ZooKeeperUnreachable"]


def test_invalid_spec_is_permanent(ctx: OperatorContext, zk_hosts: str, group_path: str) -> None:
    rt = runtime(ctx)
    with pytest.raises(InvalidSpec, match="minIntervalSeconds"):
        apply_spec(ctx, rt, raw(zk_hosts, group_path, rebalance={"minIntervalSeconds": 9, "maxIntervalSeconds": 1}),
                   generation=2)
    assert rt.spec_error is not None and rt.generation == 2


def test_changed_path_is_refused(ctx: OperatorContext, zk_hosts: str, group_path: str) -> None:
    rt = runtime(ctx)
    with pytest.raises(InvalidSpec, match="immutable"):
        apply_spec(ctx, rt, raw(zk_hosts, group_path), generation=2, recorded_path="/somewhere/else")


def test_missing_credentials_secret_is_retried(ctx: OperatorContext, zk_hosts: str, group_path: str) -> None:
    rt = runtime(ctx)
    spec = raw(zk_hosts, group_path)
    spec["zookeeper"]["credentialsSecret"] = "zk-digest"
    with pytest.raises(RetryLater):
        apply_spec(ctx, rt, spec, generation=1, body=BODY)
    assert rt.sync is not None and rt.sync.reason == "CredentialsUnavailable"


def test_credentials_from_the_secret_protect_the_group(
    ctx: OperatorContext, kube: RecordingKube, zk: KazooClient, zk_hosts: str, group_path: str
) -> None:
    kube.secrets["zk-digest"] = DigestCredentials("op", "pw")
    spec = raw(zk_hosts, group_path, resources=["a"])
    spec["zookeeper"]["credentialsSecret"] = "zk-digest"
    rt = runtime(ctx)
    apply_spec(ctx, rt, spec, generation=1)
    acls, _ = zk.get_acls(GroupPaths.of(group_path).resources)
    assert {acl.id.scheme for acl in acls} == {"digest", "world"}
    # The test's own client cannot delete the protected group; the operator deletes what it created.
    assert delete_znodes(ctx, rt, spec, annotations={}).startswith("deleted")
    assert zk.exists(group_path) is None


def test_path_owned_by_another_resource_group(
    ctx: OperatorContext, zk: KazooClient, zk_hosts: str, group_path: str
) -> None:
    zk.create(group_path, OwnerMarker("other", "group").to_json(), makepath=True)
    rt = runtime(ctx)
    with pytest.raises(RetryLater):
        apply_spec(ctx, rt, raw(zk_hosts, group_path), generation=1)
    assert rt.sync is not None and rt.sync.permanent and rt.sync.reason == "PathInUse"
    # Deleting this ResourceGroup must not delete the other one's group.
    delete_znodes(ctx, rt, raw(zk_hosts, group_path), annotations={})
    assert zk.exists(group_path) is not None


def test_delete_removes_the_group(
    ctx: OperatorContext, kube: RecordingKube, zk: KazooClient, zk_hosts: str, group_path: str
) -> None:
    rt = runtime(ctx)
    apply_spec(ctx, rt, raw(zk_hosts, group_path, resources=["a"]), generation=1, body=BODY)
    outcome = delete_znodes(ctx, rt, raw(zk_hosts, group_path), annotations={})
    assert outcome.startswith("deleted") and zk.exists(group_path) is None
    assert "ZnodesDeleted" in kube.reasons()


@pytest.mark.parametrize("annotation", [KEEP_ZNODES, SKIP_CLEANUP])
def test_annotations_keep_the_znodes(
    ctx: OperatorContext, zk: KazooClient, zk_hosts: str, group_path: str, annotation: str
) -> None:
    rt = runtime(ctx)
    apply_spec(ctx, rt, raw(zk_hosts, group_path, resources=["a"]), generation=1)
    delete_znodes(ctx, rt, raw(zk_hosts, group_path), annotations={annotation: "true"})
    assert zk.get_children(GroupPaths.of(group_path).resources) == ["a"]


def test_deletion_with_zookeeper_gone_retries_then_gives_up(
    ctx: OperatorContext, kube: RecordingKube, group_path: str
) -> None:
    rt = runtime(ctx)
    dead = raw(f"127.0.0.1:{free_port()}", group_path)
    with pytest.raises(RetryLater):
        delete_znodes(ctx, rt, dead, annotations={}, body=BODY, retry=0)
    outcome = delete_znodes(ctx, rt, dead, annotations={}, body=BODY, retry=7, elapsed=DELETE_GIVE_UP_SECONDS)
    assert outcome.startswith("gave up")
    assert kube.reasons() == ["ZooKeeperCleanupFailed", "ZooKeeperCleanupAbandoned"]


def test_deleting_a_never_valid_spec_is_a_no_op(ctx: OperatorContext) -> None:
    assert "nothing" in delete_znodes(ctx, runtime(ctx), {"zookeeper": {}}, annotations={})


def test_deletion_waits_for_live_members_then_removes_everything(
    ctx: OperatorContext, kube: RecordingKube, zk: KazooClient, zk_hosts: str, group_path: str, tmp_path: Path
) -> None:
    """Workers deleted together with their ResourceGroup (a namespace deletion) leave first; deleting
    the group under a live worker would make it re-create its containers after the finalizer is gone."""
    rt = runtime(ctx)
    spec = raw(zk_hosts, group_path, resources=["a", "b"])
    apply_spec(ctx, rt, spec, generation=1, body=BODY)
    group = Group(zk_hosts, group_path, tmp_path)
    worker = group.spawn("w1")
    try:
        wait_for(lambda: worker.owned() == {"a", "b"}, 60, lambda: f"w1 owns {worker.owned()}")
        with pytest.raises(RetryLater, match="1 members still in"):
            delete_znodes(ctx, rt, spec, annotations={}, body=BODY, retry=0, elapsed=0.0)
        assert zk.exists(group_path) is not None and "WaitingForMembers" in kube.reasons()
        assert worker.terminate() == 0
        outcome = delete_znodes(ctx, rt, spec, annotations={}, body=BODY, retry=1, elapsed=3.0)
        assert outcome.startswith("deleted") and zk.exists(group_path) is None
    finally:
        group.stop_all()


def test_deletion_stops_waiting_for_members_after_the_bound(
    ctx: OperatorContext, zk: KazooClient, zk_hosts: str, group_path: str, tmp_path: Path
) -> None:
    rt = runtime(ctx)
    spec = raw(zk_hosts, group_path, resources=["a"])
    apply_spec(ctx, rt, spec, generation=1, body=BODY)
    group = Group(zk_hosts, group_path, tmp_path)
    worker = group.spawn("w1")
    try:
        wait_for(lambda: worker.owned() == {"a"}, 60, lambda: f"w1 owns {worker.owned()}")
        try:  # past the bound it deletes under the live worker (which may re-create its containers)
            outcome = delete_znodes(ctx, rt, spec, annotations={}, body=BODY, elapsed=MEMBERS_LEAVE_WAIT_SECONDS)
            assert outcome.startswith("deleted")
        except RetryLater as exc:
            assert "members still in" not in str(exc)
    finally:
        group.stop_all()


def test_deletion_uses_the_credentials_read_before_the_secret_went_away(
    ctx: OperatorContext, kube: RecordingKube, zk: KazooClient, zk_hosts: str, group_path: str
) -> None:
    kube.secrets["zk-digest"] = DigestCredentials("op", "pw")
    spec = raw(zk_hosts, group_path, resources=["a"])
    spec["zookeeper"]["credentialsSecret"] = "zk-digest"
    rt = runtime(ctx)
    apply_spec(ctx, rt, spec, generation=1)
    del kube.secrets["zk-digest"]  # deleted with its namespace before the ResourceGroup
    outcome = delete_znodes(ctx, rt, spec, annotations={}, body=BODY)
    assert outcome.startswith("deleted") and zk.exists(group_path) is None


def test_a_connect_string_without_the_group_is_refused_not_moved_to(
    ctx: OperatorContext, zk: KazooClient, zk_hosts: str, group_path: str
) -> None:
    rt = runtime(ctx)
    apply_spec(ctx, rt, raw(zk_hosts, group_path, resources=["a"]), generation=1, body=BODY)
    elsewhere = f"{zk_hosts}/another-ensemble"  # a chroot: the same server, but not where the group lives
    zk.ensure_path("/another-ensemble")
    try:
        with pytest.raises(InvalidSpec, match="does not move a group between ensembles"):
            apply_spec(ctx, rt, raw(elsewhere, group_path, resources=["a", "b"]), generation=2, body=BODY)
        assert rt.connect == zk_hosts and rt.desired == {"a"}, "the group stays where it is"
        assert zk.exists(f"/another-ensemble{group_path}") is None, "nothing was created at the new one"
        # After an operator restart the connect string comes from the status it published.
        fresh = ctx.group("shop", "orders", "uid-2")
        with pytest.raises(InvalidSpec, match="changed from"):
            apply_spec(ctx, fresh, raw(elsewhere, group_path), generation=2, body=BODY, recorded_connect=zk_hosts)
    finally:
        zk.delete("/another-ensemble", recursive=True)


def test_another_connect_string_to_the_same_ensemble_is_accepted(
    ctx: OperatorContext, zk: KazooClient, zk_hosts: str, group_path: str
) -> None:
    rt = runtime(ctx)
    apply_spec(ctx, rt, raw(zk_hosts, group_path, resources=["a"]), generation=1, body=BODY)
    same = ",".join(reversed([*zk_hosts.split(","), zk_hosts.split(",")[0].replace("127.0.0.1", "localhost")]))
    result = apply_spec(ctx, rt, raw(same, group_path, resources=["a", "b"]), generation=2, body=BODY)
    assert result.created == 1 and rt.connect == same
