"""One frozen GroupState per ResourceGroup, replaced once per controller step, at its end (controller/
state.py, controller/core.py): an apply, a Secret the poll saw, a rotation's re-apply and a status
refresh each write several parts of the state, and the state is replaced once; a step that changes
nothing replaces nothing; inside a step the other threads' state is still the one before it (a real
ZooKeeper; the API server is the recording fake)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from rebalanser_operator.apply.actions import apply_desired
from rebalanser_operator.apply.secretpoll import poll_once
from rebalanser_operator.controller.messages import DesiredSpec, RolloutSeen
from rebalanser_operator.controller.state import GroupState
from rebalanser_operator.identity import DigestCredentials
from rebalanser_operator.runtime import GroupRuntime, LoopOptions, OperatorContext

from tests.operator.support import TEST_TENANCY, RecordingKube, status_loop
from tests.support.workers import wait_for
from tests.support.zk import admin_client, purge

pytestmark = pytest.mark.zk

BODY = {"apiVersion": "rebalanser.io/v1alpha1", "kind": "ResourceGroup", "metadata": {"name": "orders"}}


@pytest.fixture
def kube() -> RecordingKube:
    return RecordingKube()


@pytest.fixture
def ctx(kube: RecordingKube) -> Iterator[OperatorContext]:
    context = OperatorContext(tenancy=TEST_TENANCY, kube=kube,
                              options=LoopOptions(connect_wait=10.0, coalesce=0.05, min_patch_interval=0.05))
    yield context
    context.close()


def replaced_by(ctx: OperatorContext, rt: GroupRuntime, step: Callable[[], Any]) -> tuple[int, GroupState]:
    """How often ``step``, run as one of the group's steps, replaced the group's state, and the state
    other threads saw while it ran (at its end, before the controller took it over)."""
    before = rt.replacements
    seen: list[GroupState] = []

    def observed() -> None:
        try:
            step()
        finally:
            seen.append(rt.state)

    ctx.controller_of(rt).run(observed)
    return rt.replacements - before, seen[0]


def test_each_step_replaces_the_state_once_at_its_end(
    ctx: OperatorContext, kube: RecordingKube, zk_hosts: str, group_path: str
) -> None:
    kube.secrets["zk-digest"] = DigestCredentials("op", "old-password")
    raw = {"zookeeper": {"connect": zk_hosts, "path": group_path, "credentialsSecret": "zk-digest"},
           "resources": ["a", "b"]}
    rt = ctx.group("shop", "orders", "uid-orders")
    try:
        # The first apply writes the spec, the outcome (several times), the credentials, the tuning, the
        # Event reference and the published worker config: one replacement.
        ctx.controller_of(rt).apply(DesiredSpec.of(raw, generation=1, body=BODY))  # the session connects
        start = rt.state
        count, during = replaced_by(ctx, rt, lambda: ctx.group_steps().apply(
            rt, DesiredSpec.of({**raw, "resources": ["a", "b", "c"]}, generation=2, body=BODY)))
        assert count == 1 and during is start, "the state was replaced inside the step"
        assert rt.state is not start and rt.state.outcome.generation == 2 and rt.desired == {"a", "b", "c"}
        assert rt.state.worker_config is not None and rt.state.body is not None and rt.state.tuning is not None

        assert replaced_by(ctx, rt, lambda: None)[0] == 0, "a step that changed nothing replaced the state"
        assert replaced_by(ctx, rt, lambda: apply_desired(ctx, rt, DesiredSpec.of(
            {**raw, "resources": ["a", "b", "c"]}, generation=2, body=BODY)))[0] == 0, "the same spec again"

        # A Secret the poll saw and the rotation's re-apply, in one step (the Secret kept, the credentials,
        # the grace, the ACL, the rotation's end: many writes, one replacement).
        kube.secrets["zk-digest"] = DigestCredentials("op", "new-password")
        # The session holding both passwords is open already (another user's), so that the re-apply, a step
        # that never waits for a session, goes through in one step.
        both = (DigestCredentials("op", "new-password"), DigestCredentials("op", "old-password"))
        assert ctx.pool.wait_connected(ctx.pool.acquire(zk_hosts, "shop/warm", credentials=both), 10)
        before, start = rt.replacements, rt.state
        assert poll_once(ctx, kube.secret_data) == 1 and rt.replacements == before + 1
        assert start.rotation.credentials == DigestCredentials("op", "old-password")
        assert rt.state.rotation.credentials == DigestCredentials("op", "new-password")
        assert rt.state.rotation.previous is not None and not rt.secrets_changed

        # The workload watch's news (its own step) and a status refresh (tuning, the grace's ACL, the
        # status patch): at most one replacement each.
        before = rt.replacements
        ctx.controller_of(rt).rollout_seen(RolloutSeen("Deployment", "workers", True)).result(10)
        assert rt.replacements == before + 1 and rt.state.rollout == ("Deployment", "workers", True)
        with status_loop(ctx, rt) as loop:
            wait_for(lambda: loop.patches > 0, 10, "no status was published")
            count, _ = replaced_by(ctx, rt, lambda: ctx.controller_of(rt).refresh_step(loop))
            assert count <= 1
    finally:
        with admin_client(zk_hosts, auth_data=[("digest", "op:new-password"), ("digest", "op:old-password")]) as zk:
            purge(zk, group_path)
