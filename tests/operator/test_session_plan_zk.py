"""A group's step uses the ZooKeeper session its plan names (controller/plan.py, plan_session): a first apply opens
one, another group with the same credentials joins it, a re-apply reuses it, a rotation opens the new one
and leaves the old, which closes with its last user (a real ZooKeeper; the API server is the recording
fake; the context records each planned session it carries out)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient
from rebalanser_operator.apply.actions import apply_spec
from rebalanser_operator.controller.messages import SecretSeen
from rebalanser_operator.controller.plan import Join, Open, Reuse, SessionEffect
from rebalanser_operator.identity import DigestCredentials
from rebalanser_operator.runtime import GroupRuntime, LoopOptions, OperatorContext

from tests.operator.support import STEP_WAIT, TEST_TENANCY, RecordingKube, settle
from tests.support.zk import admin_client, purge

pytestmark = pytest.mark.zk


class RecordingContext(OperatorContext):
    """The operator's context, recording the sessions its groups' steps carry out (and for whom)."""

    def __init__(self, kube: RecordingKube) -> None:
        super().__init__(tenancy=TEST_TENANCY, kube=kube, options=LoopOptions(connect_wait=10.0))
        self.planned: list[tuple[str, SessionEffect]] = []

    def session(self, rt: GroupRuntime, effect: SessionEffect) -> KazooClient:
        self.planned.append((rt.name, effect))
        return super().session(rt, effect)


@pytest.fixture
def kube() -> RecordingKube:
    return RecordingKube()


@pytest.fixture
def ctx(kube: RecordingKube) -> Iterator[RecordingContext]:
    context = RecordingContext(kube)
    yield context
    context.close()


def test_each_session_a_step_uses_is_planned(
    ctx: RecordingContext, kube: RecordingKube, zk_hosts: str, group_path: str
) -> None:
    kube.secrets["zk-digest"] = DigestCredentials("op", "old-password")
    spec = {"zookeeper": {"connect": zk_hosts, "path": group_path, "credentialsSecret": "zk-digest"},
            "resources": ["a"]}
    orders = ctx.group("shop", "orders", "uid-orders")
    invoices = ctx.group("shop", "invoices", "uid-invoices")
    try:
        apply_spec(ctx, orders, spec, generation=1)
        old = ctx.pool.holding(orders.user)
        assert old is not None and [effect for _, effect in ctx.planned] in ([Open(old)], [Open(old), Reuse(old)])
        first = ctx.client(orders)
        apply_spec(ctx, invoices, {**spec, "zookeeper": {**spec["zookeeper"], "path": f"{group_path}-2"}},
                   generation=1)
        assert ("invoices", Join(old)) in ctx.planned and ctx.pool.connections() == 1
        ctx.planned.clear()
        apply_spec(ctx, orders, {**spec, "resources": ["a", "b"]}, generation=2)
        assert ctx.planned == [("orders", Reuse(old))]

        # A rotation of orders' Secret: its step's re-apply opens the session holding both passwords and
        # leaves the old one, which invoices still holds (the same Secret, not handed to it yet).
        kube.secrets["zk-digest"] = DigestCredentials("op", "new-password")
        seen = SecretSeen.of("zk-digest", kube.secret_data("shop", "zk-digest"))
        ctx.planned.clear()
        assert ctx.controller_of(orders).secret_seen(seen).result(STEP_WAIT)
        settle(ctx, orders)  # the refresh's retry, if the new session was still connecting
        both = ctx.pool.holding(orders.user)
        assert both is not None and both != old and ctx.planned[0] == ("orders", Open(both, leave=old))
        assert {effect for _, effect in ctx.planned[1:]} <= {Reuse(both)}, ctx.planned
        assert first.connected and ctx.pool.holders(old) == {invoices.user}

        # invoices follows: it joins orders' session, and the old one closes with its last user.
        ctx.planned.clear()
        assert ctx.controller_of(invoices).secret_seen(seen).result(STEP_WAIT)
        settle(ctx, invoices)
        assert ctx.planned[0] == ("invoices", Join(both, leave=old)), ctx.planned
        assert not first.connected and ctx.pool.holders(old) == set() and ctx.pool.connections() == 1
    finally:
        with admin_client(zk_hosts, auth_data=[("digest", "op:new-password"), ("digest", "op:old-password")]) as zk:
            purge(zk, group_path)
            purge(zk, f"{group_path}-2")
