"""Status and conditions as a pure function of a group snapshot and the operator's knowledge."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from rebalanser.errors import CorruptDataError
from rebalanser.status import GroupStatus
from rebalanser.wire import decode_rebalance
from rebalanser_operator.spec.models import Phase
from rebalanser_operator.status.view import (
    FailoverFacts,
    Observation,
    SyncState,
    cap_assignments,
    compute_status,
    merge_patch,
    normalise_last_rebalance,
    status_dict,
)

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
SYNCED = SyncState(True, "Synced", "3 resources")


def group(members: dict[str, list[str]], resources: list[str], **extra: Any) -> GroupStatus:
    return GroupStatus(
        path="/g", exists=True, members=list(members), coordinator=next(iter(members), None), epoch=3,
        resources=resources, assignments=members, generation=7, **extra,
    )


def obs(**changes: Any) -> Observation:
    base: dict[str, Any] = {
        "path": "/g", "generation": 2, "zk_connected": True, "ever_connected": True, "sync": SYNCED,
        "desired": 3, "effective_interval": 2.0,
        "group": group({"a": ["r0", "r1"], "b": ["r2"]}, ["r0", "r1", "r2"]),
    }
    base.update(changes)
    return Observation(**base)


def conditions(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status["conditions"]}


def test_balanced_group_is_stable_and_ready() -> None:
    status = status_dict(compute_status(obs(), now=NOW))
    assert status["phase"] == "Stable"
    assert (status["members"], status["resources"], status["assigned"]) == (2, 3, 3)
    assert status["coordinator"] == "a" and status["epoch"] == 3 and status["generation"] == 7
    assert status["assignments"] == {"a": ["r0", "r1"], "b": ["r2"]} and status["unassigned"] == []
    assert status["observedGeneration"] == 2 and status["effectiveIntervalSeconds"] == 2.0
    conds = conditions(status)
    assert [c["type"] for c in status["conditions"]] == ["Ready", "ZooKeeperConnected", "ResourcesSynced", "Balanced"]
    assert all(c["status"] == "True" for c in conds.values())
    assert conds["Ready"]["reason"] == "Stable"
    assert all(c["observedGeneration"] == 2 for c in conds.values())
    assert conds["Ready"]["lastTransitionTime"] == "2026-01-02T03:04:05.000Z"


def test_unassigned_resources_mean_rebalancing_then_degraded() -> None:
    partial = group({"a": ["r0"], "b": ["r2"]}, ["r0", "r1", "r2"])
    status = status_dict(compute_status(obs(group=partial), now=NOW))
    assert status["phase"] == "Rebalancing" and status["unassigned"] == ["r1"]
    assert conditions(status)["Balanced"]["reason"] == "Unassigned"
    assert conditions(status)["Ready"]["status"] == "False"
    late = status_dict(compute_status(obs(group=partial, unbalanced_for=120), now=NOW))
    assert late["phase"] == "Degraded"


def test_uneven_counts_are_not_balanced() -> None:
    uneven = group({"a": ["r0", "r1", "r2"], "b": []}, ["r0", "r1", "r2"])
    status = status_dict(compute_status(obs(group=uneven), now=NOW))
    assert conditions(status)["Balanced"]["reason"] == "Imbalanced"


def test_no_members_is_pending() -> None:
    empty = group({}, ["r0", "r1", "r2"])
    status = status_dict(compute_status(obs(group=empty), now=NOW))
    assert status["phase"] == "Pending" and "coordinator" not in status
    assert conditions(status)["Ready"]["reason"] == "NoMembers"


def test_lost_connection_is_degraded_and_keeps_the_last_snapshot() -> None:
    status = status_dict(compute_status(obs(zk_connected=False, zk_reason="ConnectionLost", zk_message="x"), now=NOW))
    assert status["phase"] == "Degraded" and status["members"] == 2
    assert conditions(status)["ZooKeeperConnected"] == conditions(status)["ZooKeeperConnected"] | {
        "status": "False", "reason": "ConnectionLost"}
    assert conditions(status)["Ready"]["reason"] == "ConnectionLost"


def test_never_connected_is_pending() -> None:
    status = status_dict(compute_status(
        obs(zk_connected=False, ever_connected=False, zk_reason="Unreachable", sync=None, group=None), now=NOW))
    assert status["phase"] == "Pending"
    assert conditions(status)["ResourcesSynced"]["status"] == "Unknown"


def test_invalid_spec_is_error_with_the_message() -> None:
    status = status_dict(compute_status(obs(spec_error="spec.resources.0: bad", group=None, sync=None), now=NOW))
    assert status["phase"] == "Error" and status["message"] == "spec.resources.0: bad"
    assert conditions(status)["ResourcesSynced"]["reason"] == "InvalidSpec"


def test_permanent_sync_failure_is_error() -> None:
    status = status_dict(compute_status(obs(sync=SyncState(False, "PathInUse", "taken", permanent=True)), now=NOW))
    assert status["phase"] == "Error" and conditions(status)["Ready"]["reason"] == "PathInUse"


def test_temporary_sync_failure_is_degraded() -> None:
    status = status_dict(compute_status(obs(sync=SyncState(False, "CredentialsUnavailable", "no secret")), now=NOW))
    assert status["phase"] == "Degraded" and conditions(status)["Ready"]["reason"] == "CredentialsUnavailable"


def test_drift_is_reported_in_resources_synced() -> None:
    status = status_dict(compute_status(obs(desired=4), now=NOW))
    assert conditions(status)["ResourcesSynced"]["reason"] == "Drifted"
    assert status["phase"] != "Stable"


def test_transition_time_changes_only_when_the_status_changes() -> None:
    first = status_dict(compute_status(obs(), now=NOW))
    later = NOW + timedelta(minutes=5)
    same = status_dict(compute_status(obs(), previous_conditions=first["conditions"], now=later))
    assert same["conditions"] == first["conditions"]
    partial = group({"a": ["r0"], "b": ["r2"]}, ["r0", "r1", "r2"])
    changed = status_dict(compute_status(obs(group=partial), previous_conditions=first["conditions"], now=later))
    conds = conditions(changed)
    assert conds["Balanced"]["lastTransitionTime"] == "2026-01-02T03:09:05.000Z"
    assert conds["ZooKeeperConnected"]["lastTransitionTime"] == "2026-01-02T03:04:05.000Z"


def test_assignments_are_capped_with_a_flag() -> None:
    big = {f"m{i}": [f"r{i}-{j}" for j in range(100)] for i in range(4)}
    capped, truncated = cap_assignments(big, 40)
    assert truncated and set(capped) == set(big) and all(len(v) == 10 for v in capped.values())
    assert cap_assignments({"m": ["b", "a"]}, 40) == ({"m": ["a", "b"]}, False)
    resources = sorted(r for rs in big.values() for r in rs)
    status = status_dict(compute_status(obs(group=group(big, resources), desired=400, assignment_budget=40), now=NOW))
    assert status["assignmentsTruncated"] is True and status["assigned"] == 400


def test_last_rebalance_accepts_epoch_and_iso_timestamps() -> None:
    raw = {"startedAt": 1_700_000_000_000, "completedAt": "2026-01-01T00:00:00Z", "durationMs": 41,
           "moved": 3, "generation": 9, "junk": [1]}
    last = normalise_last_rebalance(decode_rebalance(json.dumps(raw).encode()))
    assert last is not None
    assert last.started_at == "2023-11-14T22:13:20.000Z" and last.completed_at == "2026-01-01T00:00:00Z"
    assert (last.duration_ms, last.moved, last.generation) == (41.0, 3, 9)
    assert normalise_last_rebalance(None) is None


@pytest.mark.parametrize("raw", [
    b'{"moved": -1, "generation": 1}', b'{"moved": 1}', b'{"generation": 1, "completedAt": 1e999}',
    b'{"generation": 1, "completedAt": 1e300}', b'{"generation": 1, "durationMs": 1e999}',
    b'{"generation": 1, "startedAt": -5}', b"[" * 100_000 + b"]" * 100_000,
])
def test_a_state_record_out_of_range_is_rejected_before_the_status_sees_it(raw: bytes) -> None:
    with pytest.raises(CorruptDataError):
        decode_rebalance(raw)


def test_corrupt_data_degrades_a_balanced_group() -> None:
    broken = group({"a": ["r0", "r1"], "b": ["r2"]}, ["r0", "r1", "r2"], rejected=["assignment of c: bad"])
    status = status_dict(compute_status(obs(group=broken), now=NOW))
    assert status["phase"] == Phase.DEGRADED.value and conditions(status)["Ready"]["reason"] == "CorruptData"


def test_merge_patch_sends_only_changes_and_deletes_removed_keys() -> None:
    old = {"members": 2, "assignments": {"a": ["r0"], "b": ["r1"]}, "coordinator": "a"}
    new = {"members": 1, "assignments": {"a": ["r0", "r1"]}}
    assert merge_patch(old, new) == {"members": 1, "assignments": {"a": ["r0", "r1"], "b": None}, "coordinator": None}
    assert merge_patch(new, new) == {}


def test_status_shows_each_live_members_pod() -> None:
    status = status_dict(compute_status(obs(pods={"a": "orders-worker-0", "gone": "orders-worker-9"}), now=NOW))
    assert status["pods"] == {"a": "orders-worker-0"}  # b recorded no pod; gone is no longer a member
    assert "pods" not in status_dict(compute_status(obs(), now=NOW))


def test_status_records_the_connect_string_the_group_lives_on() -> None:
    assert status_dict(compute_status(obs(connect="zk-0:2181"), now=NOW))["zookeeperConnect"] == "zk-0:2181"


def test_spec_current_names_the_older_forms_without_changing_the_phase() -> None:
    older = status_dict(compute_status(obs(notices=("spec.workload is deprecated: write spec.workloadRef",)), now=NOW))
    current = status_dict(compute_status(obs(notices=()), now=NOW))
    assert conditions(older)["SpecCurrent"]["status"] == "False"
    assert conditions(older)["SpecCurrent"]["reason"] == "DeprecatedFields"
    assert "write spec.workloadRef" in conditions(older)["SpecCurrent"]["message"]
    assert conditions(current)["SpecCurrent"]["status"] == "True"
    assert older["phase"] == current["phase"] == "Stable"
    assert "SpecCurrent" not in conditions(status_dict(compute_status(obs(), now=NOW)))  # no spec adopted


@pytest.mark.parametrize(("facts", "status", "reason", "says"), [
    (FailoverFacts(watching_pods=False), "False", "PodsNotWatched", "failover.enabled=true"),
    (FailoverFacts(watching_pods=True, unconfirmable=("b",)), "False", "MembersUnconfirmable",
     "1 of 2 members record no pod UID or container instance (b)"),
    (FailoverFacts(watching_pods=True), "True", "Confirming", "all 2 members"),
])
def test_failover_ready_says_why_kubelet_confirmed_falls_back_and_how_to_fix_it(
    facts: FailoverFacts, status: str, reason: str, says: str
) -> None:
    result = status_dict(compute_status(obs(failover=facts), now=NOW))
    condition = conditions(result)["FailoverReady"]
    assert (condition["status"], condition["reason"]) == (status, reason)
    assert says in condition["message"]
    assert result["phase"] == "Stable"
    assert "FailoverReady" not in conditions(status_dict(compute_status(obs(), now=NOW)))  # SessionExpiry


def test_an_odd_coordinator_timestamp_is_left_out_rather_than_refused() -> None:
    last = normalise_last_rebalance(decode_rebalance(b'{"generation": 1, "startedAt": "yesterday"}'))
    assert last is not None and last.started_at is None
