"""The operator's per-group controller, its pure decisions: what a refresh does, whether the group is
read, repaired, polled, failed over, admitted (no ZooKeeper, no API server, no clock)."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
from rebalanser.config import GroupConfig
from rebalanser_operator.controller.plan import (
    Admission,
    Failover,
    GroupView,
    PollFacts,
    Read,
    RefreshFacts,
    Step,
    needs_polling,
    plan_admission,
    plan_drift,
    plan_failover,
    plan_read,
    plan_refresh,
    plan_rollout,
)
from rebalanser_operator.tenancy import PATH_NOT_ALLOWED, Placement, Refusal

RECONCILED = GroupView("shop", "orders", "uid-1", connect="zk:2181", path="/rebalanser/shop/orders", owned=True,
                       synced=True, failover=True)
REFUSED = replace(RECONCILED, owned=False, synced=False, refused=True)


# ---------------------------------------------------------------------------------------- refresh

def test_a_terminating_namespace_releases_the_group_and_does_nothing_else() -> None:
    for current, grace, changed in itertools.product((True, False), repeat=3):
        assert plan_refresh(RefreshFacts(True, current, grace, changed)) == (Step.RELEASE,)


def test_a_quiet_refresh_observes_then_publishes() -> None:
    assert plan_refresh(RefreshFacts(False, True, False, False)) == (Step.OBSERVE, Step.PUBLISH)


def test_a_changed_secret_is_reapplied_before_the_group_is_read() -> None:
    assert plan_refresh(RefreshFacts(False, True, False, True)) == (Step.REAPPLY, Step.OBSERVE, Step.PUBLISH)


def test_a_session_that_connected_after_a_failed_apply_is_applied_again() -> None:
    assert plan_refresh(RefreshFacts(False, True, False, False, connected_late=True)) == (
        Step.REAPPLY, Step.OBSERVE, Step.PUBLISH)
    assert Step.REAPPLY not in plan_refresh(RefreshFacts(False, False, False, False, connected_late=True))


def test_the_end_of_a_grace_period_re_acls_the_group_in_the_same_refresh() -> None:
    assert plan_refresh(RefreshFacts(False, True, True, False)) == (
        Step.END_GRACE, Step.REAPPLY, Step.OBSERVE, Step.PUBLISH)


def test_a_deleted_object_is_never_reapplied() -> None:
    for grace, changed in itertools.product((True, False), repeat=2):
        assert Step.REAPPLY not in plan_refresh(RefreshFacts(False, False, grace, changed))


def test_every_plan_publishes_last_and_reads_before_it() -> None:
    for facts in itertools.product((True, False), repeat=4):
        steps = plan_refresh(RefreshFacts(*facts))
        if Step.PUBLISH in steps:
            assert steps[-2:] == (Step.OBSERVE, Step.PUBLISH), steps


# ------------------------------------------------------------------------------------------- read

def test_a_deleted_object_is_not_read() -> None:
    assert plan_read(RECONCILED, current=False) is Read.GONE


def test_a_refused_group_reads_nothing_of_what_lies_at_its_path() -> None:
    assert plan_read(REFUSED, current=True) is Read.REFUSED


def test_a_group_without_a_reconcile_has_nothing_to_read() -> None:
    assert plan_read(GroupView("shop", "orders", "uid-1"), current=True) is Read.UNCONFIGURED


def test_a_reconciled_group_is_read() -> None:
    assert plan_read(RECONCILED, current=True) is Read.READ


# --------------------------------------------------------------------------------------- failover

def test_failover_acts_only_for_an_owned_reconciled_opted_in_group() -> None:
    assert plan_failover(RECONCILED) is Failover.ACT


def test_failover_never_acts_across_a_refusal() -> None:
    assert plan_failover(REFUSED) is Failover.NEVER
    # a path stored before the ownership check must not make the group look reconciled
    assert plan_failover(replace(REFUSED, synced=True)) is Failover.NEVER


def test_failover_waits_for_the_first_reconcile_and_for_the_credentials() -> None:
    assert plan_failover(None) is Failover.WAIT
    assert plan_failover(replace(RECONCILED, owned=False)) is Failover.WAIT
    assert plan_failover(replace(RECONCILED, synced=False)) is Failover.WAIT
    assert plan_failover(replace(RECONCILED, path=None)) is Failover.WAIT
    assert plan_failover(replace(RECONCILED, needs_credentials=True)) is Failover.WAIT
    assert plan_failover(replace(RECONCILED, needs_credentials=True, has_credentials=True)) is Failover.ACT


def test_failover_is_never_for_a_group_that_did_not_opt_in() -> None:
    assert plan_failover(replace(RECONCILED, failover=False)) is Failover.NEVER


# ------------------------------------------------------------------------------------------ drift

CONFIG = GroupConfig(min_interval_seconds=2.0)


def drift(**changes: object) -> tuple[bool, bool]:
    facts: dict[str, object] = dict(exists=True, resources=["a", "b"], config=CONFIG, desired={"a", "b"},
                                    wanted=CONFIG, now=100.0, last_repair=0.0, interval=5.0)
    facts.update(changes)
    outcome = plan_drift(**facts)  # type: ignore[arg-type]
    return outcome.drifted, outcome.repair


def test_a_group_as_the_spec_says_is_left_alone() -> None:
    assert drift() == (False, False)


@pytest.mark.parametrize("changes", [{"exists": False}, {"resources": ["a"]}, {"resources": ["a", "b", "c"]},
                                     {"config": None}, {"config": GroupConfig(min_interval_seconds=3.0)}],
                         ids=["root gone", "resource gone", "resource added", "config gone", "config changed"])
def test_drift_is_repaired(changes: dict[str, object]) -> None:
    assert drift(**changes) == (True, True)


def test_repairs_are_at_most_one_per_interval() -> None:
    assert drift(exists=False, last_repair=97.0) == (True, False)
    assert drift(exists=False, last_repair=95.0) == (True, True)


# ---------------------------------------------------------------------------------------- polling

SETTLED = PollFacts(reconciled=True, connected=True, rotation=False, retry=False, unbalanced=False,
                    workload_unwatched=False, tuning_settled=True)


def test_a_settled_group_is_only_watched() -> None:
    assert not needs_polling(SETTLED)


@pytest.mark.parametrize("changes", [{"reconciled": False}, {"connected": None}, {"connected": False},
                                     {"rotation": True}, {"retry": True}, {"unbalanced": True},
                                     {"workload_unwatched": True}, {"tuning_settled": False}])
def test_anything_that_changes_by_time_is_polled(changes: dict[str, object]) -> None:
    assert needs_polling(replace(SETTLED, **changes))  # type: ignore[arg-type]


def test_a_rollout_event_refreshes_only_when_it_changes_something() -> None:
    assert plan_rollout(None, ("Deployment", "w", False))
    assert plan_rollout(("Deployment", "w", False), ("Deployment", "w", True))
    assert not plan_rollout(("Deployment", "w", True), ("Deployment", "w", True))


# --------------------------------------------------------------------------------------- admission

PLACED = Placement("/rebalanser/shop/orders", "/rebalanser/shop")


def admit(**changes: object) -> Admission:
    facts: dict[str, object] = dict(placed=PLACED, resources_refusal=None, path="/rebalanser/shop/orders",
                                    previous_path=None, connect="zk:2181", previous_connect=None)
    facts.update(changes)
    return plan_admission(**facts)  # type: ignore[arg-type]


def test_a_first_spec_within_the_settings_proceeds() -> None:
    outcome = admit()
    assert outcome.proceed and not outcome.check_move


def test_the_administrators_settings_refuse_before_anything_else() -> None:
    refusal = Refusal(PATH_NOT_ALLOWED, "outside")
    outcome = admit(placed=refusal, previous_path="/elsewhere", previous_connect="old:2181")
    assert not outcome.proceed and outcome.refusal == refusal
    too_many = Refusal("LimitExceeded", "too many")
    assert admit(resources_refusal=too_many).refusal == too_many


def test_the_path_is_immutable() -> None:
    outcome = admit(previous_path="/rebalanser/shop/other")
    assert not outcome.proceed and "immutable" in (outcome.invalid or "")


def test_a_changed_connect_string_is_checked_before_it_is_used() -> None:
    assert admit(previous_connect="old:2181").check_move
    assert not admit(previous_connect="zk:2181").check_move
    assert not admit(previous_connect="ZK").check_move  # one ensemble in another spelling: not a move

