"""What a group's controller does next: pure decisions on immutable values (no I/O, no clock).

    steps = plan_refresh(RefreshFacts(terminating=False, current=True, grace_over=False, secrets_changed=True))
    # (Step.REAPPLY, Step.OBSERVE, Step.PUBLISH): the controller's I/O steps carry them out in order

The controller (:mod:`rebalanser_operator.controller.core`) runs one step at a time for its group;
every choice it makes is one of these functions, so each is tested without ZooKeeper or an API
server (tests/unit/test_controller_plan.py). Threads other than the controller's see a group only as
a :class:`GroupView`, an immutable copy the controller replaces after each of its steps.
"""

from __future__ import annotations

import enum
from collections.abc import Collection
from dataclasses import dataclass

from rebalanser.config import GroupConfig

from rebalanser_operator.tenancy import Placement, Refusal, SettingError, normalise_connect


class Step(enum.Enum):
    RELEASE = "release"  # the namespace is being deleted: the group goes with it
    END_GRACE = "end-grace"  # a credentials rotation's grace period is over
    REAPPLY = "reapply"  # a referenced Secret changed, the grace ended, a session connected: apply again
    OBSERVE = "observe"  # read the group (repair drift, tune, keep the grace) and compute the status
    PUBLISH = "publish"  # patch what changed in .status


@dataclass(frozen=True)
class RefreshFacts:
    terminating: bool  # the group's namespace is being deleted
    current: bool  # the object still exists with this UID (not deleted or recreated)
    grace_over: bool  # a rotation's grace period has run out
    secrets_changed: bool  # a referenced Secret differs from what the group connects with
    connected_late: bool = False  # the last apply found no session, and the session has connected since


def plan_refresh(facts: RefreshFacts) -> tuple[Step, ...]:
    """The steps of one refresh of the group."""
    if facts.terminating:
        return (Step.RELEASE,)
    steps = [Step.END_GRACE] if facts.grace_over else []
    if facts.current and (facts.secrets_changed or facts.grace_over or facts.connected_late):
        steps.append(Step.REAPPLY)
    return (*steps, Step.OBSERVE, Step.PUBLISH)


class Read(enum.Enum):
    GONE = "gone"  # deleted meanwhile: nothing is read, no connection reopened
    REFUSED = "refused"  # not this object's path: nothing there is read or shown
    UNCONFIGURED = "unconfigured"  # no reconcile yet: nothing to connect to
    READ = "read"  # connect, and read the group once it is claimed


@dataclass(frozen=True)
class GroupView:
    """A group as threads other than its controller may see it (an immutable copy)."""

    namespace: str
    name: str
    uid: str
    connect: str | None = None
    path: str | None = None
    owned: bool = False  # the last reconcile claimed (connect, path) for this object
    synced: bool = False  # the last reconcile went through
    refused: bool = False  # the last outcome is a permanent refusal (PathInUse, a path not allowed...)
    secrets: frozenset[str] = frozenset()  # the Secrets the applied spec names
    workload: tuple[str, str] | None = None  # (kind, name) of spec.workload
    failover: bool = False  # spec.failover: KubeletConfirmed
    needs_credentials: bool = False  # the spec names a credentials Secret
    has_credentials: bool = False  # ... and it was read


def plan_read(view: GroupView, *, current: bool) -> Read:
    """Whether the status refresh reads the group (only a current, reconciled, not refused group)."""
    if not current:
        return Read.GONE
    if not view.owned and view.refused:
        return Read.REFUSED
    if view.connect is None or view.path is None:
        return Read.UNCONFIGURED
    return Read.READ


class Failover(enum.Enum):
    ACT = "act"  # owned and reconciled: end the dead instance's member nodes
    WAIT = "wait"  # not reconciled yet: ask again (bounded)
    NEVER = "never"  # refused (e.g. PathInUse) or not opted in: the pod waits for session expiry


def plan_failover(view: GroupView | None) -> Failover:
    """Whether confirmed-death failover may act for the group now: only for a group this object owns and
    whose current spec it has reconciled (with its credentials), never across a refusal."""
    if view is None:
        return Failover.WAIT
    if view.refused and not view.owned:
        return Failover.NEVER
    if view.path is None or view.connect is None or not view.owned or not view.synced:
        return Failover.WAIT
    if view.needs_credentials and not view.has_credentials:
        return Failover.WAIT
    return Failover.ACT if view.failover else Failover.NEVER


@dataclass(frozen=True)
class Drift:
    drifted: bool  # ZooKeeper differs from the spec
    repair: bool  # ... and a repair is due now


def plan_drift(
    *, exists: bool, resources: Collection[str], config: GroupConfig | None, desired: Collection[str],
    wanted: GroupConfig, now: float, last_repair: float, interval: float,
) -> Drift:
    """Whether the group as read differs from the spec (a missing root, other resources, another
    config) and whether to repair it now (at most once per ``interval``)."""
    drifted = not exists or set(resources) != set(desired) or config != wanted
    return Drift(drifted, drifted and now - last_repair >= interval)


@dataclass(frozen=True)
class PollFacts:
    reconciled: bool  # a spec was applied and its last reconcile went through
    connected: bool | None  # the last read reached ZooKeeper (None: not tried yet)
    rotation: bool  # a Secret changed or a rotation's grace period runs (it ends by time)
    retry: bool  # a drift repair or a failed refresh waits for its retry
    unbalanced: bool  # Degraded comes by time
    workload_unwatched: bool  # the named workload is polled until the watch reports on it
    tuning_settled: bool  # the interval is Quiet or Fixed (nothing decays)


def needs_polling(facts: PollFacts) -> bool:
    """Whether the status can change without a ZooKeeper watch or a message saying so: then the
    controller refreshes every ``period``, else only every ``idle_period``."""
    if not facts.reconciled or facts.connected is not True:
        return True
    return facts.rotation or facts.retry or facts.unbalanced or facts.workload_unwatched \
        or not facts.tuning_settled


def plan_rollout(current: tuple[str, str, bool] | None, seen: tuple[str, str, bool]) -> bool:
    """Whether a workload event changes what the group knows (then it refreshes at once)."""
    return current != seen


@dataclass(frozen=True)
class Admission:
    """The decision on a desired spec before anything is read, sent or written."""

    proceed: bool
    refusal: Refusal | None = None  # refused by the administrator's settings (permanent)
    invalid: str | None = None  # a change the operator does not make (permanent until the spec changes)
    check_move: bool = False  # the connect string changed: look for the group there before going on


def plan_admission(
    *, placed: Placement | Refusal, resources_refusal: Refusal | None, path: str, previous_path: str | None,
    connect: str, previous_connect: str | None,
) -> Admission:
    """The administrator's settings first (ensemble, path root, resources per group), then the
    immutable path, then whether a changed connect string must be checked. (The groups-per-namespace
    limit is counted after this, only for a group that passes.)"""
    if isinstance(placed, Refusal):
        return Admission(False, refusal=placed)
    if resources_refusal is not None:
        return Admission(False, refusal=resources_refusal)
    if previous_path is not None and previous_path != path:
        return Admission(False, invalid=f"spec.zookeeper.path changed from {previous_path} to {path}; "
                                        "the path is immutable")
    return Admission(True, check_move=previous_connect is not None and _spelled(previous_connect) != _spelled(connect))


def _spelled(connect: str) -> str:
    """A connect string as it is compared (:func:`~rebalanser_operator.tenancy.normalise_connect`):
    ``ZK:2181`` and ``zk`` are one ensemble, not a move."""
    try:
        return normalise_connect(connect)
    except SettingError:
        return connect
