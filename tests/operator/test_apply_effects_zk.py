"""The apply step returns its effects (Events, the workers' ConfigMap, wake-ups) as values, and the thin
I/O step carries them out: a real ZooKeeper, the recording API server (apply/actions.py, apply_desired
and carry_out)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from rebalanser_operator.apply.actions import InvalidSpec, apply_desired, carry_out, config_map_name
from rebalanser_operator.controller.effects import Emit, PublishConfig, Wake
from rebalanser_operator.controller.messages import DesiredSpec
from rebalanser_operator.runtime import GroupRuntime, LoopOptions, OperatorContext
from rebalanser_operator.zkfence import Fence

from tests.operator.support import TEST_TENANCY, RecordingKube

pytestmark = pytest.mark.zk

BODY = {"apiVersion": "rebalanser.io/v1alpha1", "kind": "ResourceGroup", "metadata": {"name": "orders"}}


@pytest.fixture
def kube() -> RecordingKube:
    return RecordingKube()


@pytest.fixture
def ctx(kube: RecordingKube) -> Iterator[OperatorContext]:
    context = OperatorContext(tenancy=TEST_TENANCY, kube=kube, options=LoopOptions(connect_wait=5.0))
    yield context
    context.close()


def woken(rt: GroupRuntime) -> list[int]:
    """Counts the wake-ups of the group's status loop."""
    count: list[int] = []
    rt.waker.install(lambda: count.append(1))
    return count


def desired(hosts: str, path: str, generation: int, **fields: Any) -> DesiredSpec:
    return DesiredSpec.of({"zookeeper": {"connect": hosts, "path": path}, **fields}, generation=generation, body=BODY)


def test_a_sync_returns_its_event_config_and_wake_up_and_does_none_of_them(
    ctx: OperatorContext, kube: RecordingKube, zk_hosts: str, group_path: str
) -> None:
    rt = ctx.group("shop", "orders", "uid-1")
    wakes = woken(rt)
    controller = ctx.controller_of(rt)
    controller.apply(desired(zk_hosts, group_path, 1, resources=["a"]))  # the session is connected from here on
    kube.events.clear()
    kube.config_maps.clear()
    rt.worker_config = None  # as if never published
    wakes.clear()

    stepped = controller.run(lambda: apply_desired(ctx, rt, desired(zk_hosts, group_path, 2, resources=["a", "b"])))

    assert stepped.error is None and stepped.answer is not None and stepped.answer.created == 1
    assert stepped.effects == (
        Wake(),  # connected: the status loop reads the group
        Emit("Normal", "ResourcesSynced", f"created 1, deleted 0; 2 resources in {group_path}"),
        PublishConfig.of({"REBALANSER_ZK": zk_hosts, "REBALANSER_GROUP": group_path,
                          "REBALANSER_RESOURCE_GROUP": "shop/orders"}),
        Wake(),
    ), stepped.effects
    assert (kube.events, kube.config_maps, wakes) == ([], {}, []), "an effect was carried out inside the step"
    assert rt.sync is not None and rt.sync.ok and rt.generation == 2  # the state is the step's own

    assert carry_out(ctx, rt, stepped) == stepped.answer
    assert [reason for _, reason, _ in kube.events] == ["ResourcesSynced"]
    assert kube.config_maps[("shop", config_map_name("orders"))]["REBALANSER_GROUP"] == group_path
    assert len(wakes) == 2 and rt.worker_config is not None


def test_a_refusal_is_returned_with_its_event_and_raised_after_it(
    ctx: OperatorContext, kube: RecordingKube, zk_hosts: str
) -> None:
    rt = ctx.group("shop", "orders", "uid-1")
    wakes = woken(rt)
    outside = desired(zk_hosts, "/elsewhere/orders", 1, resources=["a"])  # no path root of the tenancy

    stepped = ctx.controller_of(rt).run(lambda: apply_desired(ctx, rt, outside))

    assert isinstance(stepped.error, InvalidSpec) and stepped.answer is None
    assert [type(effect) for effect in stepped.effects] == [Emit, Wake], stepped.effects
    assert isinstance(stepped.effects[0], Emit) and stepped.effects[0].type == "Warning"
    assert (kube.events, wakes) == ([], [])
    with pytest.raises(InvalidSpec):
        carry_out(ctx, rt, stepped)
    assert len(kube.events) == 1 and len(wakes) == 1


def test_a_replica_publishes_the_workers_config_map_under_its_fence_and_again_under_a_new_one(
    ctx: OperatorContext, kube: RecordingKube, zk_hosts: str, group_path: str
) -> None:
    """The config fence (docs/operator-replicas.md): the ConfigMap carries the serving replica's (claim, token),
    and a new owner publishes it again, its content unchanged, so that the earlier owner's stamp is gone."""
    rt = ctx.group("shop", "orders", "uid-1")
    rt.fence = Fence("op-a", 5, claim=1)
    controller = ctx.controller_of(rt)
    key = ("shop", config_map_name("orders"))
    controller.apply(desired(zk_hosts, group_path, 1, resources=["a"]))
    assert kube.config_stamps[key] == (1, 5)
    kube.config_maps.clear()
    controller.apply(desired(zk_hosts, group_path, 2, resources=["a", "b"]))
    assert key not in kube.config_maps, "the same content under the same fence is not published again"
    rt.fence = Fence("op-b", 7, claim=1)  # as at a new owner's gain
    controller.apply(desired(zk_hosts, group_path, 3, resources=["a", "b"]))
    assert kube.config_stamps[key] == (1, 7) and key in kube.config_maps
