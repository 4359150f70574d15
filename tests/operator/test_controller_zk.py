"""The group's controller is the only writer of its znodes and status: writes from several sources
(a kopf handler, the status loop) take turns, on real ZooKeeper."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest
from kazoo.client import KazooClient
from rebalanser.paths import GroupPaths
from rebalanser_operator.apply.actions import apply_spec, delete_znodes
from rebalanser_operator.identity import DigestCredentials
from rebalanser_operator.runtime import GroupRuntime, LoopOptions, OperatorContext
from rebalanser_operator.statusloop import StatusLoop

from tests.operator.support import TEST_TENANCY, RecordingKube, secret_seen, status_loop

pytestmark = pytest.mark.zk

BODY = {"apiVersion": "rebalanser.io/v1alpha1", "kind": "ResourceGroup", "metadata": {"name": "orders"}}
WAIT = 30.0
#: How long the test gives a second writer to (wrongly) write while the first one is held: an apply
#: takes a few milliseconds, so one that is not held back shows within this bound.
OVERLAP_BOUND = 3.0


@dataclass
class HeldKube(RecordingKube):
    """Holds the status loop inside its status patch until released."""

    hold: threading.Event = field(default_factory=threading.Event)
    entered: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)

    def patch_status(self, namespace: str, name: str, patch: Mapping[str, Any]) -> bool:
        if self.hold.is_set():
            self.entered.set()
            assert self.release.wait(WAIT), "never released"
        return super().patch_status(namespace, name, patch)


@pytest.fixture
def kube() -> HeldKube:
    return HeldKube()


@pytest.fixture
def ctx(kube: HeldKube) -> Iterator[OperatorContext]:
    context = OperatorContext(tenancy=TEST_TENANCY, kube=kube, options=LoopOptions(connect_wait=5.0))
    yield context
    context.close()


def spec(hosts: str, path: str, resources: list[str]) -> dict[str, Any]:
    return {"zookeeper": {"connect": hosts, "path": path}, "resources": resources}


def test_a_spec_applied_during_a_status_refresh_is_written_after_it(
    ctx: OperatorContext, kube: HeldKube, zk: KazooClient, zk_hosts: str, group_path: str
) -> None:
    """Before: the handler's apply wrote G/resources while the status loop's refresh of the same group
    was under way (two writers of one group at once, kept apart only by a lock around some writes)."""
    rt = ctx.group("shop", "orders", "uid-1")
    apply_spec(ctx, rt, spec(zk_hosts, group_path, ["a"]), generation=1, body=BODY)
    loop = StatusLoop(ctx, rt, initial_status={})
    kube.hold.set()
    refresher = threading.Thread(target=loop.refresh, daemon=True)
    refresher.start()
    assert kube.entered.wait(WAIT), "the refresh never reached its status patch"

    changed = threading.Event()
    resources = GroupPaths.of(group_path).resources
    zk.get_children(resources, watch=lambda _: changed.set())
    applier = threading.Thread(
        target=apply_spec, args=(ctx, rt, spec(zk_hosts, group_path, ["a", "b"])),
        kwargs={"generation": 2, "body": BODY}, daemon=True)
    applier.start()
    overlapped = changed.wait(OVERLAP_BOUND)
    kube.release.set()
    refresher.join(WAIT)
    applier.join(WAIT)
    assert not overlapped, "the spec was written while the status refresh of the group was under way"
    assert not applier.is_alive() and not refresher.is_alive()
    assert sorted(zk.get_children(resources)) == ["a", "b"], "the spec was not applied after the refresh"


def test_the_group_state_is_written_only_by_its_controllers_steps(
    ctx: OperatorContext, kube: HeldKube, zk: KazooClient, zk_hosts: str, group_path: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Handlers (here: the test thread), the status loop, the Secret poll and the workload watch all
    change the group; every write of its GroupRuntime happens inside one of its controller's steps."""
    fields = len(dataclasses.fields(GroupRuntime))
    off_strand: list[tuple[str, str]] = []
    original = GroupRuntime.__setattr__

    def recording(self: GroupRuntime, name: str, value: Any) -> None:
        if len(self.__dict__) >= fields and not ctx.controller_of(self).on_strand():
            off_strand.append((name, threading.current_thread().name))
        original(self, name, value)

    monkeypatch.setattr(GroupRuntime, "__setattr__", recording)
    kube.secrets["zk-digest"] = DigestCredentials("orders", "first")
    rt = ctx.group("shop", "orders", "uid-1")
    first = {**spec(zk_hosts, group_path, ["a"]), "workload": {"kind": "Deployment", "name": "workers"}}
    first["zookeeper"]["credentialsSecret"] = "zk-digest"
    apply_spec(ctx, rt, first, generation=1, body=BODY)
    with status_loop(ctx, rt):
        kube.wait_status(lambda s: s["resources"] == 1, WAIT, "the first status")
        ctx.workload_seen("shop", "Deployment", "workers", True)
        kube.secrets["zk-digest"] = DigestCredentials("orders", "second")
        assert secret_seen(ctx, "shop", "zk-digest", kube.secret_data("shop", "zk-digest")) == 1
        second = {**first, "resources": ["a", "b"]}
        apply_spec(ctx, rt, second, generation=2, body=BODY)
        kube.wait_status(lambda s: s["resources"] == 2, WAIT, "the second spec's status")
        assert ctx.controller_of(rt).run(lambda: rt.credentials) == DigestCredentials("orders", "second")
    assert not off_strand, f"GroupRuntime written outside its controller's steps: {off_strand}"
    # The test's own client cannot delete the protected group; the operator deletes it with the rotated
    # credentials, as a kubectl delete after the rotation would.
    monkeypatch.undo()
    assert delete_znodes(ctx, rt, second, annotations={}).startswith("deleted")
    assert zk.exists(group_path) is None
