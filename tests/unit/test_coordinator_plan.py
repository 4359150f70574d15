"""The coordinator's plan, without ZooKeeper: what a rebalance decides, the Global Barrier round's
state machine, and when the next rebalance may start."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rebalanser import coordinator_plan as plan
from rebalanser.config import Algorithm
from rebalanser.coordinator_plan import (
    Assign,
    AwaitStops,
    BarrierRound,
    CloseRound,
    GiveStop,
    Idle,
    Layout,
    Pace,
    Round,
    RoundAbandoned,
    RoundState,
    Stored,
    Waited,
    WriteRound,
)
from rebalanser.errors import NotCoordinatorError
from rebalanser.paths import MemberNode
from rebalanser.wire import BarrierRecord, Phase

RB, GB = Algorithm.RESOURCE_BARRIER, Algorithm.GLOBAL_BARRIER


def node(member_id: str, seq: int, guid: str = "a") -> MemberNode:
    parsed = MemberNode.parse(f"{guid * 32}-{member_id}-{seq:010d}")
    assert parsed is not None
    return parsed


M0, M1, M2 = node("m0", 1), node("m1", 2), node("m2", 3)
RESOURCES = ["r0", "r1", "r2", "r3"]


def balanced_two() -> tuple[dict[str, tuple[str, ...]], dict[str, str]]:
    """m0 and m1 hold two resources each, as stored."""
    written = {M0.name: ("r0", "r1"), M1.name: ("r2", "r3")}
    owners = {"r0": "m0", "r1": "m0", "r2": "m1", "r3": "m1"}
    return written, owners


# -- who gets what ------------------------------------------------------------------------------


def test_of_two_nodes_of_one_member_id_only_the_oldest_gets_work() -> None:
    younger = node("m0", 9, guid="b")
    proposal = plan.propose([M0, younger, M1], RESOURCES, {}, [])
    assert younger.name not in proposal.desired
    assert younger.name in proposal.live
    assert sorted(r for rs in proposal.desired.values() for r in rs) == RESOURCES


def test_early_a_join_hands_out_only_the_orphans_and_takes_nothing_from_a_live_member() -> None:
    six = [f"r{i}" for i in range(6)]
    written = {M0.name: ("r0", "r1", "r2"), M1.name: ("r3", "r4", "r5"), M2.name: ()}
    owners = {r: "m0" if r in written[M0.name] else "m1" for r in six}
    full = plan.propose([M0, M1, M2], [*six, "r6"], owners, [])  # r6: new, nobody holds it
    early = plan.propose_early(full, written, owners, [])
    assert not early.complete  # the full plan moves resources from m0/m1 to m2: that waits
    assert early.handed_out == 1
    assert early.proposal.desired == {M0.name: ("r0", "r1", "r2"), M1.name: ("r3", "r4", "r5"), M2.name: ("r6",)}


def test_early_the_full_plan_is_taken_when_it_takes_nothing_away() -> None:
    written, owners = balanced_two()
    full = plan.propose([M0, M1], [*RESOURCES, "r4"], owners, [])
    early = plan.propose_early(full, written, owners, [])
    assert early.complete and early.proposal == full
    assert early.unplaceable == frozenset()


def test_early_with_no_live_member_the_orphans_are_unplaceable() -> None:
    full = plan.propose([], RESOURCES, {"r0": "gone"}, [])
    early = plan.propose_early(full, {}, {"r0": "gone"}, [])
    assert early.unplaceable == frozenset(RESOURCES)


def test_invalid_resource_names_are_left_out_and_counted() -> None:
    assert plan.valid_resources(["ok", "", "a/b"]) == (["ok"], 2)


def test_moved_counts_owner_changes_of_known_resources_only() -> None:
    assert plan.moved({"a": "m0", "b": "m0"}, {"a": "m1", "b": "m0", "c": "m1"}) == 1
    assert plan.moved({"a": "m0", "gone": "m0"}, {"a": "m0"}) == 0  # a resource no longer listed has not moved


owners = st.dictionaries(st.sampled_from([f"r{i}" for i in range(12)]), st.sampled_from(["m0", "m1", "m2"]))


@given(owners, owners)
def test_moved_is_the_number_of_resources_both_layouts_name_with_different_owners(
        before: dict[str, str], after: dict[str, str]) -> None:
    assert plan.moved(before, after) == len([r for r in before.keys() & after.keys() if before[r] != after[r]])


# -- what a rebalance does ----------------------------------------------------------------------


def test_resource_barrier_writes_even_when_nothing_moves_but_not_early() -> None:
    written, owners = balanced_two()
    proposal = plan.propose([M0, M1], RESOURCES, owners, [])
    assert proposal.desired == written
    decision = plan.decide(proposal, Stored(written, 7), RB, epoch=3, early=False)
    assert decision == Assign(8, proposal.desired, force=False)
    assert isinstance(plan.decide(proposal, Stored(written, 7), RB, epoch=3, early=True), Idle)


def test_global_barrier_does_not_stop_the_world_when_nothing_moves() -> None:
    written, owners = balanced_two()
    proposal = plan.propose([M0, M1], RESOURCES, owners, [])
    assert isinstance(plan.decide(proposal, Stored(written, 7), GB, epoch=3, early=False), Idle)


def test_global_barrier_hands_out_a_departed_members_resources_without_a_stop() -> None:
    written, owners = balanced_two()
    proposal = plan.propose([M0], RESOURCES, owners, [])  # m1 left: its resources go to m0
    decision = plan.decide(proposal, Stored(written, 7), GB, epoch=3, early=False)
    assert decision == Assign(8, proposal.desired, force=False, stop=False, closing=None)
    repaired = plan.decide(proposal, Stored(written, 7, unreadable=True), GB, epoch=3, early=False)
    assert isinstance(repaired, Assign) and repaired.closing == BarrierRecord(Phase.ASSIGNED, 8, 3)


def test_global_barrier_stops_everyone_when_a_live_member_loses_a_resource() -> None:
    written, owners = balanced_two()
    written[M2.name] = ()
    proposal = plan.propose([M0, M1, M2], RESOURCES, owners, [])
    assert plan.decide(proposal, Stored(written, 7), GB, epoch=3, early=False) == BarrierRound(8)


def test_a_standing_stop_is_ended_by_a_round_under_global_barrier() -> None:
    written, owners = balanced_two()
    proposal = plan.propose([M0, M1], RESOURCES, owners, [])  # nothing moves, yet the stop stands
    assert plan.decide(proposal, Stored(written, 7, standing=True), GB, epoch=3, early=False) == BarrierRound(8)


def test_a_standing_stop_is_ended_in_one_forced_write_under_resource_barrier() -> None:
    written, owners = balanced_two()
    proposal = plan.propose([M0, M1], RESOURCES, owners, [])
    decision = plan.decide(proposal, Stored(written, 7, standing=True), RB, epoch=3, early=True)
    assert decision == Assign(8, proposal.desired, force=True, closing=BarrierRecord(Phase.ASSIGNED, 8, 3),
                              drop_old=True)


def test_a_stop_order_is_foreign_unless_it_is_ours() -> None:
    assert plan.foreign_stop(BarrierRecord(Phase.STOP, 5, 2), None)
    assert not plan.foreign_stop(BarrierRecord(Phase.STOP, 5, 2), (5, 2))
    assert plan.foreign_stop(BarrierRecord(Phase.STOP, 5, 1), (5, 2))
    assert not plan.foreign_stop(BarrierRecord(Phase.ASSIGNED, 5, 1), None)


# -- the Global Barrier round -------------------------------------------------------------------


def test_a_round_stops_awaits_writes_and_closes_in_that_order() -> None:
    round_ = Round(8)
    assert round_.step() == GiveStop(8)
    round_.stopped()
    assert round_.step() == AwaitStops(8)
    round_.waited(Waited.ALL_STOPPED)
    assert round_.step() == WriteRound(8, reload=False)
    round_.written()
    assert round_.step() == CloseRound(8)
    round_.closed()
    assert round_.step() is None and round_.state is RoundState.DONE


def test_a_round_whose_coordinator_is_stopped_while_awaiting_is_abandoned_not_written() -> None:
    round_ = Round(8)
    round_.stopped()
    round_.waited(Waited.DEPOSED)
    assert round_.state is RoundState.ABANDONED
    with pytest.raises(RoundAbandoned):
        round_.step()
    assert issubclass(RoundAbandoned, NotCoordinatorError)  # the coordinator resigns


def test_a_round_goes_on_after_the_barrier_timeout() -> None:
    round_ = Round(8)
    round_.stopped()
    round_.waited(Waited.TIMED_OUT)
    assert round_.step() == WriteRound(8, reload=False)


def test_a_failed_round_write_is_replanned_then_given_up_after_the_last_attempt() -> None:
    round_ = Round(8, state=RoundState.WRITING)
    assert round_.write_failed()
    assert round_.step() == WriteRound(8, reload=True)
    assert round_.write_failed()
    assert not round_.write_failed()  # the third: the rebalance fails
    assert plan.ROUND_WRITE_ATTEMPTS == 3


def test_a_round_refuses_an_outcome_out_of_order() -> None:
    round_ = Round(8)
    with pytest.raises(ValueError):
        round_.written()
    with pytest.raises(ValueError):
        round_.waited(Waited.ALL_STOPPED)


def test_a_round_is_replanned_when_the_live_members_changed() -> None:
    proposal = plan.propose([M0, M1], RESOURCES, {}, [])
    assert not plan.members_changed(proposal, [M1, M0])
    assert plan.members_changed(proposal, [M0])


# -- when ---------------------------------------------------------------------------------------


def test_a_rebalance_waits_for_the_interval_unless_orphans_wait() -> None:
    pace = Pace(last_rebalance=100.0, interval=10.0, not_before=0.0, startup_end=0.0)
    assert plan.wait_until(pace, 105.0, orphans=lambda: False) == 110.0
    assert plan.wait_until(pace, 105.0, orphans=lambda: True) is None  # orphans go at once
    assert plan.wait_until(pace, 110.0, orphans=lambda: False) is None
    asked: list[bool] = []
    assert plan.wait_until(pace, 110.0, orphans=lambda: asked.append(True) or True) is None
    assert not asked  # the interval has passed: the listings are not searched for orphans


def test_orphans_still_wait_for_the_back_off_and_the_start_up_window() -> None:
    backing_off = Pace(last_rebalance=100.0, interval=10.0, not_before=107.0, startup_end=0.0)
    assert plan.wait_until(backing_off, 105.0, orphans=lambda: True) == 110.0
    starting = Pace(last_rebalance=0.0, interval=10.0, not_before=0.0, startup_end=120.0)
    assert plan.wait_until(starting, 105.0, orphans=lambda: True) == 120.0


def test_orphans_waiting_sees_a_departed_member_unless_reserved_or_unplaceable() -> None:
    written, owners = balanced_two()
    layout = Layout(written=written, owners=owners)
    assert not plan.orphans_waiting([M0.name, M1.name], RESOURCES, layout, [], [])
    assert plan.orphans_waiting([M0.name], RESOURCES, layout, [], [])  # m1 gone: r2, r3
    assert not plan.orphans_waiting([M0.name], RESOURCES, layout, ["m1"], [])  # reserved for it
    assert not plan.orphans_waiting([M0.name], RESOURCES, layout, [], ["r2", "r3"])
    assert plan.orphans_waiting([M0.name, M1.name], [*RESOURCES, "r4"], layout, [], [])  # unheld


def test_a_member_back_under_a_new_node_has_orphans_even_if_reserved() -> None:
    written, owners = balanced_two()
    layout = Layout(written=written, owners=owners)
    back = node("m1", 7, guid="c")
    assert plan.orphans_waiting([M0.name, back.name], RESOURCES, layout, ["m1"], [])


def test_nothing_is_an_orphan_before_anything_is_assigned() -> None:
    assert not plan.orphans_waiting([M0.name], RESOURCES, Layout(), [], [])


# -- the first plan, made ahead inside the start-up window ----------------------------------------


@pytest.mark.parametrize("algorithm", [RB, GB])
def test_a_first_plan_made_ahead_is_the_plan_and_the_bytes_the_first_rebalance_writes(algorithm: Algorithm) -> None:
    from rebalanser import write_plan
    from rebalanser.paths import GroupPaths

    paths, listed = GroupPaths.of("/g"), [M0, M1, M2]
    resources = [f"r{i:04d}" for i in range(2000)]  # over 256 names each: chunked
    ahead = plan.plan_ahead(listed, resources, 4, 1, algorithm)
    assert ahead.proposal == plan.propose(listed, resources, {}, [])
    decision = plan.decide(ahead.proposal, Stored({}, 0, None, False), algorithm, 4, early=False)
    assert isinstance(decision, Assign) and decision.generation == 1
    fresh = write_plan.plan(paths, {}, {}, decision.desired, 1, 4, algorithm, decision.force, (), decision.stop)
    reused = write_plan.plan(paths, {}, {}, decision.desired, 1, 4, algorithm, decision.force, (), decision.stop,
                             ahead.encoded)
    assert reused.ops == fresh.ops
    # every assignment came from the plan made ahead (none was encoded again)
    sentinel = {value: wire_blob(value.member) for value in ahead.encoded}
    marked = write_plan.plan(paths, {}, {}, decision.desired, 1, 4, algorithm, decision.force, (), decision.stop,
                             sentinel)
    assert {op.data for op in marked.ops if op.kind == "set"} == {n.name.encode() for n in listed}


def wire_blob(member: str) -> plan.Blob:
    return plan.Blob(member.encode(), {})


def test_a_first_plan_made_ahead_fits_only_what_it_was_made_from() -> None:
    ahead = plan.plan_ahead([M0, M1], RESOURCES, 4, 1, RB)
    assert ahead.fits([M0, M1], list(RESOURCES), [])
    assert not ahead.fits([M0, M1, M2], RESOURCES, [])  # a member joined meanwhile
    assert not ahead.fits([M0], RESOURCES, [])  # one left
    assert not ahead.fits([M0, M1], [*RESOURCES, "r4"], [])  # a resource was added
    assert not ahead.fits([M0, M1], RESOURCES, ["m9"])  # a departed member's resources are reserved


def test_a_plan_made_ahead_is_abandoned_between_encodings_once_asked() -> None:
    asked: list[int] = []

    def abandon() -> bool:
        asked.append(1)
        return len(asked) > 1  # a member joins while the first assignment is encoded

    assert plan.plan_ahead([M0, M1, M2], RESOURCES, 4, 1, RB, abandon) is None
    assert len(asked) == 2  # the other two were never encoded
