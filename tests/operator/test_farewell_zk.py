"""On shutdown in its own terminating namespace, the operator releases that namespace's ResourceGroups."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from rebalanser_operator.apply.actions import apply_spec
from rebalanser_operator.apply.farewell import release_terminating_namespace
from rebalanser_operator.runtime import LoopOptions, OperatorContext
from rebalanser_operator.spec.models import FINALIZER
from rebalanser_operator.statusloop import StatusLoop

from tests.operator.support import TEST_TENANCY, RecordingKube
from tests.support.workers import Group, wait_for

pytestmark = pytest.mark.zk


@pytest.fixture
def kube() -> RecordingKube:
    return RecordingKube()


@pytest.fixture
def ctx(kube: RecordingKube) -> Iterator[OperatorContext]:
    context = OperatorContext(tenancy=TEST_TENANCY, kube=kube, options=LoopOptions(connect_wait=1.0))
    yield context
    context.close()


def body(hosts: str, path: str, name: str = "orders") -> dict[str, Any]:
    return {
        "apiVersion": "rebalanser.io/v1alpha1", "kind": "ResourceGroup",
        "metadata": {"name": name, "namespace": "shop", "uid": f"uid-{name}", "finalizers": [FINALIZER]},
        "spec": {"zookeeper": {"connect": hosts, "path": path}, "resources": ["a", "b"]},
    }


def test_nothing_happens_unless_the_namespace_is_terminating(
    ctx: OperatorContext, kube: RecordingKube, zk: KazooClient, zk_hosts: str, group_path: str
) -> None:
    rg = body(zk_hosts, group_path)
    kube.groups["shop"] = [rg]
    apply_spec(ctx, ctx.group("shop", "orders", "uid-orders"), rg["spec"], generation=1)
    assert release_terminating_namespace(ctx, "shop", FINALIZER, deadline=time.monotonic() + 30) == {}
    assert zk.exists(group_path) is not None and kube.groups["shop"][0]["metadata"]["finalizers"] == [FINALIZER]


def test_terminating_namespace_groups_are_deleted_after_their_members_leave(
    ctx: OperatorContext, kube: RecordingKube, zk: KazooClient, zk_hosts: str, group_path: str, tmp_path: Path
) -> None:
    rg = body(zk_hosts, group_path)
    kube.groups["shop"] = [rg]
    kube.terminating.add("shop")
    apply_spec(ctx, ctx.group("shop", "orders", "uid-orders"), rg["spec"], generation=1)
    group = Group(zk_hosts, group_path, tmp_path)
    worker = group.spawn("w1")
    try:
        wait_for(lambda: worker.owned() == {"a", "b"}, 60, lambda: f"w1 owns {worker.owned()}")
        # The worker's pod gets its SIGTERM about when the operator's does.
        threading.Timer(1.5, group.stop_all).start()
        outcomes = release_terminating_namespace(ctx, "shop", FINALIZER, deadline=time.monotonic() + 40)
        assert outcomes["orders"].startswith("deleted") and "finalizer removed" in outcomes["orders"], outcomes
        assert zk.exists(group_path) is None
        assert kube.groups["shop"][0]["metadata"]["finalizers"] == []
        assert not worker.alive, "the group was deleted under a live member"
    finally:
        group.stop_all()


def test_without_time_to_wait_the_group_is_deleted_under_its_members(
    ctx: OperatorContext, kube: RecordingKube, zk: KazooClient, zk_hosts: str, group_path: str, tmp_path: Path
) -> None:
    rg = body(zk_hosts, group_path)
    kube.groups["shop"] = [rg]
    kube.terminating.add("shop")
    apply_spec(ctx, ctx.group("shop", "orders", "uid-orders"), rg["spec"], generation=1)
    group = Group(zk_hosts, group_path, tmp_path)
    worker = group.spawn("w1")
    try:
        wait_for(lambda: worker.owned() == {"a", "b"}, 60, lambda: f"w1 owns {worker.owned()}")
        outcomes = release_terminating_namespace(ctx, "shop", FINALIZER, deadline=time.monotonic() + 5)
        assert "finalizer removed" in outcomes["orders"] or "not released" in outcomes["orders"], outcomes
    finally:
        group.stop_all()


def test_the_status_loop_releases_its_group_when_the_namespace_terminates(
    ctx: OperatorContext, kube: RecordingKube, zk: KazooClient, zk_hosts: str, group_path: str
) -> None:
    """kopf stops serving a terminating namespace; the group's own daemon notices and releases it."""
    rg = body(zk_hosts, group_path)
    kube.groups["shop"] = [rg]
    rt = ctx.group("shop", "orders", "uid-orders")
    apply_spec(ctx, rt, rg["spec"], generation=1)
    loop = StatusLoop(ctx, rt, initial_status={})
    loop.refresh()
    assert zk.exists(group_path) is not None and not loop.gone
    kube.terminating.add("shop")
    ctx._namespaces.clear()  # the next refresh looks again (it does every period)
    loop.refresh()
    assert loop.gone and zk.exists(group_path) is None
    assert kube.groups["shop"][0]["metadata"]["finalizers"] == []


def test_a_group_served_again_in_a_terminating_namespace_is_not_applied_again(
    kube: RecordingKube, zk: KazooClient, zk_hosts: str, group_path: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A served group (replicas, or a release's claim) whose namespace is being deleted: its status loop
    releases it (znodes deleted, finalizer removed) before the namespace's deletion reaches the object,
    and its daemon serves it again a moment later. That serving must not apply the spec: the znodes would
    be created again, with no finalizer left to delete them (seen on the real cluster)."""
    import asyncio

    from rebalanser_operator.replicas import Replicas
    from rebalanser_operator.replicaserve import serve_while_owned

    ctx = OperatorContext(tenancy=TEST_TENANCY, kube=kube, options=LoopOptions(connect_wait=1.0, period=0.5))
    rg = body(zk_hosts, group_path)
    kube.groups["shop"] = [rg]
    caplog.set_level("INFO", logger="rebalanser_operator.replicaserve")

    def held_back() -> bool:
        return any("the spec is not applied" in r.getMessage() for r in caplog.records)

    async def scenario() -> None:
        done = threading.Event()
        serving = asyncio.create_task(serve_while_owned(
            ctx, Replicas(None), body=rg, ref=rg, namespace="shop", name="orders", uid="uid-orders",
            stopped=done.is_set))
        try:
            await _until(lambda: zk.exists(group_path) is not None, 20, "the group applied at the gain")
            kube.terminating.add("shop")
            ctx._namespaces.clear()
            await _until(lambda: zk.exists(group_path) is None and not rg["metadata"]["finalizers"], 20,
                         "the group released by its status loop")
            await _until(lambda: held_back() or zk.exists(group_path) is not None, 20,
                         "the daemon serving the group again")
            assert zk.exists(group_path) is None, "serving the group again created its znodes again"
        finally:
            done.set()
            await asyncio.wait_for(serving, 20)

    try:
        asyncio.run(scenario())
    finally:
        ctx.close()


async def _until(predicate: Any, timeout: float, what: str) -> None:
    import asyncio

    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout:g} s waiting for {what}"
        await asyncio.sleep(0.05)
