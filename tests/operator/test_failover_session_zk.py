"""Confirmed-death failover closes the dead member's session (issue 28 item 2): it never deletes a claim by
path, so a claim taken by a live member after the dead session ended survives the operator's run."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kazoo.client import KazooClient
from rebalanser.instance import new_instance
from rebalanser.paths import GroupPaths
from rebalanser_operator.failover.podwatch import Failover
from rebalanser_operator.runtime import OperatorContext

from tests.operator.test_failover_fence_zk import (
    claims,
    ctx,  # noqa: F401  (a fixture)
    dead_member,
    on_operator_client,
    pod_body,
    reconcile,
)
from tests.support.zk import admin_client

pytestmark = pytest.mark.zk


def test_a_claim_taken_after_the_dead_session_ended_survives_the_failover(
    ctx: OperatorContext, zk: KazooClient, zk_hosts: str, group_path: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 28 item 2: the dead session ends (here: is closed) after the operator has read the member node
    and its claims and before it acts; a waiting member claims the resource at once. The operator's run
    then goes on: the waiting member's claim must survive (every claim has version 0, so a delete "at the
    version read" cannot tell the two claims apart)."""
    groups = reconcile(ctx, zk_hosts, group_path)
    nonce = new_instance()
    paths = GroupPaths.of(group_path)
    with admin_client(zk_hosts) as dead, admin_client(zk_hosts) as waiting:
        dead_member(dead, group_path, nonce, ["r0"])
        taken: list[tuple[int, int]] = []

        def the_session_ends_and_r0_is_taken(_: str) -> None:
            if taken:
                return
            dead.stop()  # its claim goes with it, as at an expiry
            waiting.create(paths.owner("r0"), b"", ephemeral=True)
            taken.append(claims(zk, group_path)["r0"])

        on_operator_client(monkeypatch, (dead, waiting, zk), ("transaction",), the_session_ends_and_r0_is_taken)
        asyncio.run(Failover(ctx).handle_pod(pod_body(nonce), groups))
        monkeypatch.undo()
        assert taken, "the operator's run never reached the point where it acts"
        now: Any = claims(zk, group_path).get("r0")
        assert now == taken[0], f"the waiting member's claim on r0 was deleted by the failover: {taken[0]} -> {now}"
