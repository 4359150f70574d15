"""Claims deleted by someone other than their own session (an administrator, the operator's failover,
a group deletion in progress): the owner notices, stops before its next unit of work, and its
release never deletes the claim of the resource's next owner.

Evidence: the workers' JSON event streams (ticks carry the token they were done under) and the claim
znodes as the test's own session reads them (the member id in their data, their ephemeral owner)."""

from __future__ import annotations

import json
from pathlib import Path

from kazoo.client import KazooClient
from rebalanser.paths import GroupPaths

from tests.integration.conftest import add_resources
from tests.support.invariants import overlaps, token_regressions
from tests.support.workers import Group, wait_for

RESOURCES = {"r0", "r1"}


def claim_holder(zk: KazooClient, paths: GroupPaths, resource: str) -> str | None:
    """The member id written into the ephemeral claim on ``resource`` (None: no claim)."""
    try:
        data, stat = zk.get(paths.owner(resource))
    except Exception:
        return None
    if not stat.ephemeralOwner:
        return None
    return str(json.loads(data)["member"])


def test_an_owner_whose_claims_are_deleted_stops_and_never_deletes_the_next_owners_claim(
    zk_hosts: str, zk: KazooClient, group_path: str, tmp_path: Path, algorithm: str
) -> None:
    """An administrator deletes b's claims, then d joins and one resource moves to d. b must stop at
    once (no overlap with d) and its release must leave d's claim alone (d keeps working under it)."""
    group = Group(zk_hosts, group_path, tmp_path, algorithm=algorithm)
    paths = GroupPaths.of(group_path)
    try:
        add_resources(zk, group_path, sorted(RESOURCES))
        b = group.spawn("b", "--simulate-stop-delay", "1.0")
        group.wait_settled(RESOURCES, timeout=30)
        assert all(claim_holder(zk, paths, r) == "b" for r in RESOURCES)
        for resource in sorted(RESOURCES):
            zk.delete(paths.owner(resource))
        d = group.spawn("d")
        group.wait_settled(RESOURCES, timeout=30)
        moved = d.owned()
        assert len(moved) == 1, group.describe(RESOURCES)
        # b leaves: whatever release it still had to do is done once it has exited.
        assert b.terminate() == 0
        group.wait_settled(RESOURCES, timeout=30)
        wait_for(lambda: all(claim_holder(zk, paths, r) == "d" for r in RESOURCES), 15,
                 lambda: f"claims: { {r: claim_holder(zk, paths, r) for r in sorted(RESOURCES)} } "
                         f"(d works on {sorted(d.owned())})")
        events = group.events()
        assert overlaps(events) == []
        assert token_regressions(events) == []
    finally:
        group.stop_all()
