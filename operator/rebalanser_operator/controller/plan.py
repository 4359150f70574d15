"""What a group's controller does next: pure decisions on immutable values (no I/O, no clock).

    steps = plan_refresh(RefreshFacts(terminating=False, current=True, grace_over=False, secrets_changed=True))
    # (Step.REAPPLY, Step.OBSERVE, Step.PUBLISH): the controller's I/O steps carry them out in order

The controller (:mod:`rebalanser_operator.controller.core`) runs one step at a time for its group;
every choice it makes is one of these functions, so each is tested without ZooKeeper or an API
server (tests/unit/test_controller_plan.py). Threads other than the controller's see a group only as
a :class:`GroupView`, an immutable copy the controller replaces after each of its steps.

Two more kinds of decision live here. What an apply records of its outcome: (the group's
:class:`~rebalanser_operator.controller.state.Outcome`, what happened) -> (the next Outcome, the
effects to carry out: :mod:`~rebalanser_operator.controller.effects`), e.g. :func:`plan_temporary`
(tests/unit/test_apply_record.py); nothing here posts, publishes or wakes. And which ZooKeeper session
a step uses: :func:`plan_session` (what the group needs, what it holds, what the pool holds) -> reuse
it, join another group's, open a new one, or refused; the I/O
(:meth:`~rebalanser_operator.controller.context.Context.session`, the pool's
:meth:`~rebalanser_operator.zkpool.ZooKeeperPool.enter`) carries out exactly what it says, so a session
is never a side effect of looking a client up (tests/unit/test_session_plan.py).
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace

from rebalanser.config import GroupConfig

from rebalanser_operator.controller.effects import Emit, PublishConfig, StepEffect, Wake
from rebalanser_operator.controller.messages import SyncResult
from rebalanser_operator.controller.state import Outcome
from rebalanser_operator.status.view import SyncState
from rebalanser_operator.tenancy import Placement, Refusal, SettingError, normalise_connect
from rebalanser_operator.zkpool import Key


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


# ----------------------------------------------------------------- what an apply records of its outcome

Planned = tuple[Outcome, tuple[StepEffect, ...]]

#: Appended to a Synced group's status message when the operator runs without its own identity.
NO_IDENTITY_NOTE = ("; the operator has no ZooKeeper identity of its own: the parents of the groups are open "
                    "to any client (docs/operator.md, Security model)")


def plan_temporary(outcome: Outcome, reason: str, message: str) -> Planned:
    """A temporary failure (retried): the sync is not ok, a Warning Event when the reason is new."""
    changed = outcome.sync is None or outcome.sync.reason != reason
    event = (Emit("Warning", reason, message),) if changed else ()
    return replace(outcome, sync=SyncState(False, reason, message)), (*event, Wake())


def plan_refusal(outcome: Outcome, refusal: Refusal) -> Planned:
    """A refused group: an Error status with the refusal's reason, a Warning Event when it is new; the
    group is not this object's to read or act on."""
    changed = outcome.sync is None or (outcome.sync.reason, outcome.sync.message) != (refusal.reason, refusal.message)
    event = (Emit("Warning", refusal.reason, refusal.message),) if changed else ()
    return (replace(outcome, owned=False, spec_error=None, in_place=False,
                    sync=SyncState(False, refusal.reason, refusal.message, permanent=True)), (*event, Wake()))


def plan_invalid(outcome: Outcome, generation: int | None, message: str) -> Planned:
    """A spec that can never be reconciled as written."""
    return replace(outcome, generation=generation, spec_error=message), (Wake(),)


def plan_notices(outcome: Outcome, notices: tuple[str, ...]) -> Planned:
    """The spec's older forms: in the SpecCurrent condition, a Warning Event each time the set changes."""
    event = (Emit("Warning", "DeprecatedFields", "; ".join(notices)),) if notices and notices != outcome.notices else ()
    return replace(outcome, notices=notices), event


def plan_synced(outcome: Outcome, result: SyncResult, path: str, *, identity: bool,
                config: Mapping[str, str], published: Mapping[str, str] | None) -> Planned:
    """A sync that went through: the Synced status, an Event when resources were created or deleted, the
    workers' ConfigMap when it differs from the one last published."""
    note = "" if identity else NO_IDENTITY_NOTE
    synced = replace(outcome, in_place=True,
                     sync=SyncState(True, "Synced", f"{result.resources} resources in {path}{note}"))
    effects: list[StepEffect] = []
    if result.created or result.deleted:
        effects.append(Emit("Normal", "ResourcesSynced", f"created {result.created}, deleted {result.deleted}; "
                                                         f"{result.resources} resources in {path}"))
    if published != config:
        effects.append(PublishConfig.of(config))
    return synced, (*effects, Wake())


# ------------------------------------------------------------------------ which session a step uses

@dataclass(frozen=True)
class SessionFacts:
    """What a step knows of the sessions when it plans one (no I/O)."""

    key: Key  # the session the group needs: its ensemble, TLS material, credentials or the operator's identity
    held: Key | None  # the session the group holds now (None: none)
    open: bool  # a session with ``key`` is open
    shared: bool  # ... and another user holds it (another group, a check)
    namespace_sessions: int = 0  # sessions the namespace's other groups hold
    limit: int = 0  # Limits.sessions_per_namespace (0: no limit)


@dataclass(frozen=True)
class Reuse:
    """The session the group holds is the one it needs."""

    key: Key


@dataclass(frozen=True)
class Join:
    """Another group's open session is the one it needs (``leave``: the one it held, if another)."""

    key: Key
    leave: Key | None = None


@dataclass(frozen=True)
class Open:
    """A new session (``leave``: the one it held, left for it, e.g. after a rotation)."""

    key: Key
    leave: Key | None = None


SessionEffect = Reuse | Join | Open


def plan_session(facts: SessionFacts) -> SessionEffect | None:
    """The session to use; None when it would be a new one past the namespace's limit (refused, retried
    when one closes). Reusing or joining an open session is never refused."""
    if facts.held == facts.key and facts.open:
        return Reuse(facts.key)
    leave = facts.held if facts.held is not None and facts.held != facts.key else None
    if facts.open:
        return Join(facts.key, leave)
    if facts.limit and facts.namespace_sessions >= facts.limit:
        return None
    return Open(facts.key, leave)


def credentials_only(effect: SessionEffect) -> bool:
    """Whether ``effect`` moves the group to a session that differs from the one it held only in its
    credentials (a digest rotation without the operator's identity): the same ensemble and TLS material,
    so it connects as the one before did, and a moment's wait for it is no failure of the group."""
    if isinstance(effect, Reuse) or effect.leave is None:
        return False
    new, old = effect.key, effect.leave
    return (new[0], new[1], new[3]) == (old[0], old[1], old[3])
