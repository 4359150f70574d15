"""The "outside deleter" fault class: someone other than a claim's own session deletes it while its
member lives.

Three deleters (``outside-deleter@admin`` / ``@failover`` / ``@reconnect``; without a variant, one is drawn):

- ``admin``: an administrator deletes one to three claims under ``G/owners`` held by live members
  (unversioned, as ``zkCli.sh delete`` does); then, half of the time, a member restarts gracefully, so
  that the plan moves resources while the owners of the deleted claims may still believe they hold them.
- ``failover``: the operator's confirmed-death failover (``end_member`` from
  ``rebalanser_operator.failover.endmember``, called directly) ends the member node of a live member with its
  claims, as it would for a pod whose container it wrongly believes dead (a lagging follower, a late
  request of a dead incarnation, a foreign ResourceGroup: findings C, D, E of issue 19).
- ``reconnect``: a member's connection is reset and its link held silent for 0.1-0.6 T (its session lives),
  and one or two of its claims are deleted while it is away (issue 28's first window). Half the time, and
  always for a member with a slow or hanging stop callback, one of its resources is deleted first, so
  that its loop may be busy in that stop callback when it reconnects; the resource comes back after.

The step's checks are the campaign's own (no overlap, token order, recovery within the bound, no
leaked node). Until an owner notices that its claim is gone (finding G), this class produces overlaps.
"""

from __future__ import annotations

import random
import time

from kazoo.exceptions import NoNodeError
from rebalanser.paths import GroupPaths, MemberNode

from tests.chaos.fleet import Fleet
from tests.chaos.step import FaultRecord, StepResult

VARIANTS = ("admin", "failover", "reconnect")


def _live_claims(fleet: Fleet) -> list[str]:
    paths = GroupPaths.of(fleet.group)
    try:
        return sorted(fleet.zk.get_children(paths.owners))
    except NoNodeError:
        return []


def _member_node(fleet: Fleet, member_id: str) -> str | None:
    paths = GroupPaths.of(fleet.group)
    for name in fleet.zk.get_children(paths.clients):
        parsed = MemberNode.parse(name)
        if parsed is not None and parsed.member_id == member_id:
            return str(name)
    return None


def admin_deletes(fleet: Fleet, rng: random.Random, result: StepResult) -> list[FaultRecord]:
    paths = GroupPaths.of(fleet.group)
    claims = _live_claims(fleet)
    if not claims:
        result.notes.append("no claim to delete")
        return []
    records = []
    for resource in rng.sample(claims, min(len(claims), rng.randint(1, 3))):
        start = time.monotonic_ns()
        try:
            fleet.zk.delete(paths.owner(resource))
        except NoNodeError:
            continue
        records.append(FaultRecord("outside-deleter", resource, start, time.monotonic_ns(),
                                   "an administrator deleted the claim"))
    if records and rng.random() < 0.5 and len(fleet.running()) > 1:
        worker = rng.choice(fleet.running())
        start = time.monotonic_ns()
        code = worker.terminate(timeout=fleet.settings.bound + 10)
        if code is None:
            result.violations.append(("shutdown", f"{worker.member_id} did not exit after SIGTERM"))
        fleet.spawn(worker.member_id, worker.behaviour)
        records.append(FaultRecord("outside-deleter", worker.member_id, start, time.monotonic_ns(),
                                   f"then a graceful restart moves resources (exit {code})"))
    return records


def failover_ends(fleet: Fleet, rng: random.Random, result: StepResult) -> list[FaultRecord]:
    from rebalanser_operator.failover.choice import EndedInstance
    from rebalanser_operator.failover.endmember import MemberChanged, end_member

    candidates = [w for w in fleet.running() if fleet.owned_by(w)] or fleet.running()
    if not candidates:
        result.notes.append("no live member to end")
        return []
    worker = rng.choice(candidates)
    name = _member_node(fleet, worker.member_id)
    if name is None:
        result.notes.append(f"{worker.member_id} has no member node now")
        return []
    start = time.monotonic_ns()
    try:
        ended = end_member(fleet.zk, GroupPaths.of(fleet.group), name, EndedInstance("worker", "outside-deleter"))
        detail = f"the failover ended live {name}: its session {ended.outcome.value}"
    except MemberChanged:
        detail = f"the failover found {name} gone"
    return [FaultRecord("outside-deleter", worker.member_id, start, time.monotonic_ns(), detail)]


def reconnect_deletes(fleet: Fleet, rng: random.Random, result: StepResult) -> list[FaultRecord]:
    paths = GroupPaths.of(fleet.group)
    owning = [w for w in fleet.running() if len(fleet.owned_by(w)) >= 2] or [
        w for w in fleet.running() if fleet.owned_by(w)]
    if not owning:
        result.notes.append("no member owns a resource")
        return []
    worker = rng.choice(owning)
    owned = sorted(fleet.owned_by(worker))
    records = []
    busy = ""
    if len(owned) > 1 and (worker.behaviour in ("slow", "hang") or rng.random() < 0.5):
        busy = rng.choice(owned)
        owned.remove(busy)
        start = time.monotonic_ns()
        fleet.delete_resource(busy)  # its stop callback (slow or hanging for such a worker) begins
        records.append(FaultRecord("outside-deleter", busy, start, time.monotonic_ns(),
                                   f"a resource of {worker.member_id} ({worker.behaviour} stop) deleted first"))
        time.sleep(rng.uniform(0.05, 0.4))  # where in its stop callback the cut falls: drawn
    session = worker.proxy.session
    hold = rng.uniform(0.1, 0.6) * fleet.settings.session_timeout
    start = time.monotonic_ns()
    worker.proxy.blackhole()
    worker.proxy.cut()
    lost = []
    for resource in rng.sample(owned, min(len(owned), rng.randint(1, 2))):
        try:
            stat = fleet.zk.exists(paths.owner(resource))
            if stat is not None and session is not None and int(stat.ephemeralOwner) == session[0]:
                fleet.zk.delete(paths.owner(resource))
                lost.append(resource)
        except NoNodeError:
            continue
    time.sleep(max(0.0, hold - (time.monotonic_ns() - start) / 1e9))
    worker.proxy.restore()
    records.append(FaultRecord("outside-deleter", worker.member_id, start, time.monotonic_ns(),
                               f"away {hold:.2f} s; its claims on {lost} deleted meanwhile"))
    if busy:
        start = time.monotonic_ns()
        fleet.add_resource(busy)
        records.append(FaultRecord("outside-deleter", busy, start, time.monotonic_ns(), "re-created"))
    return records


def outside_deleter(fleet: Fleet, rng: random.Random, result: StepResult, variant: str) -> list[FaultRecord]:
    variant = variant or rng.choice(VARIANTS)
    if variant not in VARIANTS:
        raise ValueError(f"unknown outside-deleter variant {variant!r}: one of {VARIANTS}")
    if variant == "admin":
        return admin_deletes(fleet, rng, result)
    return failover_ends(fleet, rng, result) if variant == "failover" else reconnect_deletes(fleet, rng, result)
