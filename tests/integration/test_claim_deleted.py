"""Claims deleted by someone other than their own session (an administrator, the operator's failover,
a group deletion in progress): the owner notices, stops before its next unit of work, and its
release never deletes the claim of the resource's next owner.

Evidence: the workers' JSON event streams (ticks carry the token they were done under) and the claim
znodes as the test's own session reads them (the member id in their data, their ephemeral owner)."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from kazoo.client import KazooClient
from rebalanser.client import Client
from rebalanser.handler import Handler
from rebalanser.options import Options
from rebalanser.paths import GroupPaths

from tests.integration.conftest import add_resources
from tests.support.invariants import first_full_coverage, overlaps, token_regressions
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


class Calls(Handler):
    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, int] | list[str]]] = []

    def on_assigned(self, resources: Mapping[str, int]) -> None:
        self.calls.append(("assigned", dict(resources)))

    def on_revoked(self, resources: Sequence[str]) -> None:
        self.calls.append(("revoked", list(resources)))


def test_a_deleted_claim_is_stopped_at_once_and_claimed_again_with_a_new_token(
    zk_hosts: str, zk: KazooClient, group_path: str
) -> None:
    """Still assigned the resource, the member stops it (owns() False first), then claims it anew:
    a new claim, so a larger token."""
    add_resources(zk, group_path, ["a"])
    calls = Calls()
    client = Client(Options(zk_hosts, group_path, member_id="m", create_group=True,
                            session_timeout=2, min_interval=0.1), calls)
    client.start()
    try:
        wait_for(lambda: client.owns("a"), 10, "never owned a")
        before = client.token("a")
        assert before is not None
        zk.delete(GroupPaths.of(group_path).owner("a"))
        wait_for(lambda: len(calls.calls) == 3, 10, lambda: f"callbacks: {calls.calls}")
        assert calls.calls[1] == ("revoked", ["a"])
        kind, tokens = calls.calls[2]
        assert kind == "assigned" and isinstance(tokens, dict) and tokens["a"] > before, calls.calls
        assert client.owns("a") and claim_holder(zk, GroupPaths.of(group_path), "a") == "m"
    finally:
        client.stop()


def set_and_await_work(group: Group, zk: KazooClient, claim: str, data: bytes) -> None:
    """Sets the claim's data, then waits (bounded) until its resource is worked on after that."""
    resource = claim.rsplit("/", 1)[-1]
    instant = time.monotonic_ns()
    stat = zk.set(claim, data)
    wait_for(lambda: first_full_coverage(group.events(), {resource}, instant) is not None, 15,
             lambda: f"{resource} not worked on since its claim's data was set to {data[:20]!r} "
                     f"(claim of session {stat.ephemeralOwner:#x}, token {stat.czxid}): "
                     f"{group.describe(RESOURCES)}")


def test_a_claim_whose_data_someone_changes_is_still_worked_on(
    zk_hosts: str, zk: KazooClient, group_path: str, tmp_path: Path, algorithm: str
) -> None:
    """An administrator sets a claim's data (garbage, then the original back): the claim node is still
    there, still b's, with the same token. Its watch fires, b reads it and works on. (Before the fix the
    report was taken as a deletion that no later read could undo: b kept the claim, nobody else could
    take it, and the resource was never worked on again.)"""
    group = Group(zk_hosts, group_path, tmp_path, algorithm=algorithm)
    paths = GroupPaths.of(group_path)
    try:
        add_resources(zk, group_path, sorted(RESOURCES))
        group.spawn("b")
        group.wait_settled(RESOURCES, timeout=30)
        original, _ = zk.get(paths.owner("r0"))
        for data in (b"tampered", original):
            set_and_await_work(group, zk, paths.owner("r0"), data)
        events = group.events()
        assert overlaps(events) == []
        assert token_regressions(events) == []
    finally:
        group.stop_all()
