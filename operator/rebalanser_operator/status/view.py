"""ResourceGroup status as a pure function of what the operator knows about a group.

    status = compute_status(observation, previous_conditions=[...], now=datetime.now(UTC))

Conditions follow the Kubernetes conventions (metav1.Condition): CamelCase reasons, one entry per
type, ``lastTransitionTime`` changes only when ``status`` changes, ``observedGeneration`` on each.

Phases:

* ``Error``       the spec cannot be reconciled (invalid beyond the schema, or the path is owned by
                  another ResourceGroup); nothing is retried until the spec changes.
* ``Pending``     not reconciled yet, ZooKeeper never reached, or no member has joined.
* ``Rebalancing`` members exist but the assignment does not (yet) cover every resource evenly.
* ``Stable``      every resource is assigned to a live member, counts differ by at most one, the
                  resources match the spec and ZooKeeper is connected (``Ready=True``).
* ``Degraded``    it was working but is not now: ZooKeeper connection lost, a sync failure, data the
                  operator cannot parse, or an assignment still unbalanced after ``degraded_after``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from rebalanser.status import GroupStatus
from rebalanser.wire import RebalanceRecord

from rebalanser_operator.spec.models import Condition, ConditionType, LastRebalance, Phase, ResourceGroupStatus

#: Default cap on resource names listed in ``status.assignments`` (and separately ``unassigned``).
ASSIGNMENT_BUDGET = 2000


@dataclass(frozen=True)
class SyncState:
    """Outcome of the last attempt to make ZooKeeper match the spec."""

    ok: bool
    reason: str
    message: str
    permanent: bool = False  # an error that retrying cannot fix (until the spec changes)


@dataclass(frozen=True)
class FailoverFacts:
    """What KubeletConfirmed failover needs, as the operator sees it: a pod watch (the chart's
    ``failover.enabled``), and members whose nodes record their pod UID and container instance."""

    watching_pods: bool
    unconfirmable: tuple[str, ...] = ()  # live members whose node lacks the pod UID or the instance


#: What FailoverReady tells the owner to do, per reason.
PODS_NOT_WATCHED = (
    "spec.failover is KubeletConfirmed, but this operator does not watch pods (it was installed without the "
    "chart's failover.enabled): a crashed member's resources move only when its ZooKeeper session expires. "
    "Install the chart with --set failover.enabled=true, or set spec.failover: SessionExpiry"
)
MEMBERS_UNCONFIRMABLE = (
    "{count} of {members} members record no pod UID or container instance ({names}): their crashes fall back to "
    "session expiry. Start the workers with --termination-log=/dev/termination-log and POD_NAMESPACE, POD_NAME, "
    "POD_UID from the downward API (examples/workers.yaml)"
)


def failover_condition(facts: FailoverFacts, members: int) -> tuple[str, str, str]:
    """(status, reason, message) of FailoverReady."""
    if not facts.watching_pods:
        return "False", "PodsNotWatched", PODS_NOT_WATCHED
    if facts.unconfirmable:
        names = ", ".join(facts.unconfirmable[:10]) + (", ..." if len(facts.unconfirmable) > 10 else "")
        return "False", "MembersUnconfirmable", MEMBERS_UNCONFIRMABLE.format(
            count=len(facts.unconfirmable), members=members, names=names)
    return "True", "Confirming", (
        f"pods are watched and all {members} members record their pod and container instance: a container the "
        "kubelet reports terminated frees its resources at once")


@dataclass(frozen=True)
class Observation:
    """Everything the status is computed from (no clocks, no I/O)."""

    path: str | None = None
    generation: int | None = None  # metadata.generation of the spec last reconciled
    spec_error: str | None = None
    zk_connected: bool = False
    zk_reason: str = "Connecting"
    zk_message: str = ""
    ever_connected: bool = False
    sync: SyncState | None = None
    desired: int | None = None
    group: GroupStatus | None = None
    effective_interval: float | None = None
    unbalanced_for: float = 0.0
    degraded_after: float = 60.0
    assignment_budget: int = ASSIGNMENT_BUDGET
    pods: Mapping[str, str] | None = None  # member id -> pod name, as the member nodes record it
    connect: str | None = None  # the connect string of the last successful reconcile
    notices: tuple[str, ...] | None = None  # the adopted spec's older forms (None: no spec adopted)
    failover: FailoverFacts | None = None  # only with spec.failover KubeletConfirmed


@dataclass(frozen=True)
class _Cond:
    type: ConditionType
    status: str
    reason: str
    message: str


@dataclass(frozen=True)
class Balance:
    balanced: bool
    reason: str
    message: str
    extra: dict[str, int] = field(default_factory=dict)


def balance_of(group: GroupStatus) -> Balance:
    """Whether every resource is assigned exactly once to a live member, counts within one."""
    total = len(group.resources)
    if not group.members:
        return Balance(False, "NoMembers", f"no member has joined; {total} resources wait")
    live = set(group.resources)
    counts = [len(rs) for rs in group.assignments.values()]
    listed = sum(counts)
    assigned = group.assigned
    stale = sum(1 for rs in group.assignments.values() for r in rs if r not in live)
    if listed - stale > len(assigned):
        return Balance(False, "Overlapping", f"{listed - stale - len(assigned)} resources are assigned twice")
    unassigned = total - len(assigned)
    if unassigned:
        return Balance(False, "Unassigned", f"{unassigned} of {total} resources are unassigned")
    if stale:
        return Balance(False, "AssignmentStale", f"{stale} assigned resources no longer exist")
    per_member = [len(group.assignments.get(member, [])) for member in group.members]
    low, high = (min(per_member), max(per_member)) if per_member else (0, 0)
    if high - low > 1:
        return Balance(False, "Imbalanced", f"members own between {low} and {high} resources")
    members = len(group.members)
    return Balance(True, "Balanced", f"{total} resources over {members} members ({low}-{high} each)")


def cap_assignments(assignments: Mapping[str, Sequence[str]], budget: int) -> tuple[dict[str, list[str]], bool]:
    """Every member appears; each list keeps at most an equal share of ``budget`` names."""
    if not assignments:
        return {}, False
    share = max(1, budget // len(assignments))
    capped = {member: sorted(resources)[:share] for member, resources in assignments.items()}
    truncated = any(len(resources) > share for resources in assignments.values())
    return capped, truncated


def normalise_last_rebalance(record: RebalanceRecord | None) -> LastRebalance | None:
    """The status view of the coordinator's ``G/state`` record (decoded, within bounds, by ``rebalanser.wire``)."""
    if record is None:
        return None
    return LastRebalance.model_validate({
        "startedAt": date_time(record.started_at), "completedAt": date_time(record.completed_at),
        "durationMs": None if record.duration_ms is None else float(record.duration_ms),
        "moved": record.moved, "generation": record.generation,
    })


def date_time(text: str | None) -> str | None:
    """``text`` when it is an RFC 3339 date-time (the schema's ``format: date-time``), else None: a
    coordinator's odd timestamp must not get the whole status patch refused."""
    if text is None or len(text) < 20 or text[10] not in "Tt":
        return None
    try:
        datetime.fromisoformat(text.replace("z", "Z"))
    except ValueError:
        return None
    return text


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _phase_and_conditions(obs: Observation) -> tuple[Phase, list[_Cond]]:
    group = obs.group if obs.group is not None and obs.group.exists else None
    # ZooKeeperConnected
    if obs.zk_connected:
        zk = _Cond(ConditionType.ZOOKEEPER_CONNECTED, "True", "Connected", obs.zk_message or "connected")
    else:
        zk = _Cond(ConditionType.ZOOKEEPER_CONNECTED, "False", obs.zk_reason, obs.zk_message or "not connected")
    # ResourcesSynced
    if obs.spec_error is not None:
        synced = _Cond(ConditionType.RESOURCES_SYNCED, "False", "InvalidSpec", obs.spec_error)
    elif obs.sync is None:
        synced = _Cond(ConditionType.RESOURCES_SYNCED, "Unknown", "Reconciling", "not reconciled yet")
    elif not obs.sync.ok:
        synced = _Cond(ConditionType.RESOURCES_SYNCED, "False", obs.sync.reason, obs.sync.message)
    elif group is not None and obs.desired is not None and len(group.resources) != obs.desired:
        synced = _Cond(
            ConditionType.RESOURCES_SYNCED, "False", "Drifted",
            f"ZooKeeper has {len(group.resources)} resources, the spec names {obs.desired}",
        )
    else:
        synced = _Cond(ConditionType.RESOURCES_SYNCED, "True", obs.sync.reason, obs.sync.message)
    # Balanced
    if group is None:
        balance = Balance(False, "GroupMissing", "the group does not exist in ZooKeeper yet")
    else:
        balance = balance_of(group)
    balanced = _Cond(ConditionType.BALANCED, "True" if balance.balanced else "False", balance.reason, balance.message)

    phase = _phase(obs, group, zk, synced, balance)
    if phase is Phase.STABLE:
        ready = _Cond(ConditionType.READY, "True", "Stable", balance.message)
    else:
        cause = next((c for c in (synced, zk, balanced) if c.status != "True"), balanced)
        if obs.group is not None and obs.group.rejected and phase is Phase.DEGRADED and cause is balanced:
            cause = _Cond(ConditionType.READY, "False", "CorruptData", "; ".join(obs.group.rejected)[:1000])
        ready = _Cond(ConditionType.READY, "False", cause.reason, cause.message)
    return phase, [ready, zk, synced, balanced, *_advisories(obs, group)]


def _advisories(obs: Observation, group: GroupStatus | None) -> list[_Cond]:
    """Conditions that never change the phase: they say what the owner should change."""
    out = []
    if obs.notices is not None:
        if obs.notices:
            out.append(_Cond(ConditionType.SPEC_CURRENT, "False", "DeprecatedFields", "; ".join(obs.notices)))
        else:
            out.append(_Cond(ConditionType.SPEC_CURRENT, "True", "Current", "the spec uses only current field forms"))
    if obs.failover is not None:
        members = len(group.members) if group is not None else 0
        out.append(_Cond(ConditionType.FAILOVER_READY, *failover_condition(obs.failover, members)))
    return out


def _phase(obs: Observation, group: GroupStatus | None, zk: _Cond, synced: _Cond, balance: Balance) -> Phase:
    if obs.spec_error is not None or (obs.sync is not None and obs.sync.permanent):
        return Phase.ERROR
    if zk.status != "True":
        return Phase.DEGRADED if obs.ever_connected and obs.sync is not None else Phase.PENDING
    if obs.sync is None:
        return Phase.PENDING
    if synced.status != "True" and not (synced.reason == "Drifted" and obs.sync.ok):
        return Phase.DEGRADED
    if group is None or not group.members:
        return Phase.PENDING
    if obs.group is not None and obs.group.rejected:
        return Phase.DEGRADED
    if balance.balanced and synced.status == "True":
        return Phase.STABLE
    return Phase.DEGRADED if obs.unbalanced_for > obs.degraded_after else Phase.REBALANCING


def conditions_with_transitions(
    new: Sequence[_Cond], previous: Sequence[Mapping[str, Any]], *, generation: int | None, now: datetime
) -> list[Condition]:
    before = {str(c.get("type")): c for c in previous if isinstance(c, Mapping)}
    stamp = rfc3339(now)
    out = []
    for cond in new:
        old = before.get(cond.type.value)
        unchanged = old is not None and old.get("status") == cond.status and old.get("lastTransitionTime")
        out.append(
            Condition.model_validate(
                {
                    "type": cond.type.value,
                    "status": cond.status,
                    "reason": cond.reason,
                    "message": cond.message[:32768],
                    "lastTransitionTime": str(old["lastTransitionTime"]) if old and unchanged else stamp,
                    "observedGeneration": generation or 0,
                }
            )
        )
    return out


def compute_status(
    obs: Observation, *, previous_conditions: Sequence[Mapping[str, Any]] = (), now: datetime
) -> ResourceGroupStatus:
    """The full status object for ``obs`` (a pure function)."""
    phase, conds = _phase_and_conditions(obs)
    conditions = conditions_with_transitions(conds, previous_conditions, generation=obs.generation, now=now)
    values: dict[str, Any] = {
        "observedGeneration": obs.generation,
        "phase": phase,
        "message": conds[0].message,
        "zookeeperPath": obs.path,
        "zookeeperConnect": obs.connect,
        "effectiveIntervalSeconds": obs.effective_interval,
        "conditions": conditions,
    }
    group = obs.group
    if group is not None and group.exists:
        assignments, truncated = cap_assignments(group.assignments, obs.assignment_budget)
        unassigned = group.unassigned
        values.update(
            {
                "coordinator": group.coordinator,
                "epoch": group.epoch,
                "generation": group.generation,
                "members": len(group.members),
                "resources": len(group.resources),
                "assigned": len(group.assigned),
                "assignments": assignments,
                "assignmentsTruncated": truncated,
                "unassigned": unassigned[: obs.assignment_budget],
                "unassignedTruncated": len(unassigned) > obs.assignment_budget,
                "lastRebalance": normalise_last_rebalance(group.last_rebalance),
            }
        )
        if obs.pods:
            live = set(group.members)
            values["pods"] = dict(sorted((m, p) for m, p in obs.pods.items() if m in live)[: obs.assignment_budget])
    return ResourceGroupStatus.model_validate(values)


def status_dict(status: ResourceGroupStatus) -> dict[str, Any]:
    """The JSON form sent to the API server (absent fields omitted)."""
    return status.model_dump(by_alias=True, exclude_none=True, mode="json")


def merge_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The RFC 7386 merge patch turning ``old`` into ``new`` (empty when they are equal)."""
    patch: dict[str, Any] = {}
    for key in old:
        if key not in new:
            patch[key] = None
    for key, value in new.items():
        before = old.get(key)
        if isinstance(value, Mapping) and isinstance(before, Mapping):
            nested = merge_patch(before, value)
            if nested:
                patch[key] = nested
        elif before != value or key not in old:
            patch[key] = value
    return patch
