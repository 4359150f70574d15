"""Which assignment applies now, without ZooKeeper: the records a member node takes or ignores, a
Global Barrier assignment held until its round's end, and one stop per barrier generation."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from rebalanser import follow as fl
from rebalanser.config import Algorithm
from rebalanser.wire import BarrierRecord, MemberAssignment, Phase

NODE = "m-0000000001"
GB = Algorithm.GLOBAL_BARRIER.value


def assignment(generation: int, *resources: str, member: str = NODE, algorithm: str = Algorithm.RESOURCE_BARRIER.value,
               stop: bool = True) -> MemberAssignment:
    return MemberAssignment(1, generation, resources, algorithm, member, stop)


def test_a_resource_barrier_assignment_applies_at_once() -> None:
    state, effects = fl.assignment_read(fl.NEW, assignment(3, "a", "b"), NODE)
    assert effects == [fl.Apply(("a", "b"), 3)]
    assert state.applied == 3 and state.held is None


def test_an_assignment_written_for_another_member_node_is_ignored() -> None:
    state, effects = fl.assignment_read(fl.NEW, assignment(3, "a", member="m-0000000002"), NODE)
    assert state == fl.NEW
    assert len(effects) == 1 and isinstance(effects[0], fl.Ignored)


def test_a_record_without_a_member_node_is_taken() -> None:
    _, effects = fl.assignment_read(fl.NEW, assignment(3, "a", member=""), NODE)
    assert effects == [fl.Apply(("a",), 3)]


def test_an_assignment_older_than_the_one_followed_is_ignored_and_the_same_one_is_applied_again() -> None:
    state, _ = fl.assignment_read(fl.NEW, assignment(5, "a"), NODE)
    same, effects = fl.assignment_read(state, assignment(4, "b"), NODE)
    assert same == state and isinstance(effects[0], fl.Ignored)
    _, effects = fl.assignment_read(state, assignment(5, "a"), NODE)
    assert effects == [fl.Apply(("a",), 5)]


def test_a_global_barrier_assignment_waits_for_its_round_to_say_assigned() -> None:
    held = assignment(7, "a", algorithm=GB)
    state, effects = fl.assignment_read(fl.NEW, held, NODE)
    assert effects == [] and state.held == held and state.applied == 0
    state, effects = fl.barrier_read(state, BarrierRecord(Phase.ASSIGNED, 6, 1))  # an earlier round's end
    assert state.held == held and effects == [fl.ReadAssignment()]
    state, effects = fl.barrier_read(state, BarrierRecord(Phase.ASSIGNED, 7, 1))
    assert effects == [fl.Apply(("a",), 7)] and state.held is None and state.applied == 7


def test_a_global_barrier_assignment_read_after_its_round_ended_applies_at_once() -> None:
    state, _ = fl.barrier_read(fl.NEW, BarrierRecord(Phase.ASSIGNED, 7, 1))
    _, effects = fl.assignment_read(state, assignment(7, "a", algorithm=GB), NODE)
    assert effects == [fl.Apply(("a",), 7)]


def test_a_global_barrier_generation_that_stopped_nobody_applies_at_once() -> None:
    _, effects = fl.assignment_read(fl.NEW, assignment(7, "a", algorithm=GB, stop=False), NODE)
    assert effects == [fl.Apply(("a",), 7)]


def test_a_stop_order_is_answered_once_per_generation() -> None:
    stop = BarrierRecord(Phase.STOP, 4, 2)
    state, effects = fl.barrier_read(fl.NEW, stop)
    assert effects == [fl.StopForBarrier(stop)] and state.barrier == ("stop", 4)
    state = fl.barrier_stopped(state, 4)
    again, effects = fl.barrier_read(state, stop)
    assert effects == [] and again.stopped_for == 4
    _, effects = fl.barrier_read(state, BarrierRecord(Phase.STOP, 5, 2))
    assert effects == [fl.StopForBarrier(BarrierRecord(Phase.STOP, 5, 2))]


def test_a_round_ended_that_was_applied_already_reads_nothing() -> None:
    state, _ = fl.assignment_read(fl.NEW, assignment(5, "a", algorithm=GB, stop=False), NODE)
    _, effects = fl.barrier_read(state, BarrierRecord(Phase.ASSIGNED, 5, 1))
    assert effects == []


Read = tuple[str, int, bool]  # ("a", generation, global barrier) or ("b", generation, is a stop)


@given(st.lists(st.tuples(st.sampled_from("ab"), st.integers(1, 6), st.booleans()), max_size=12))
def test_generations_applied_never_go_back_and_a_held_one_is_applied_only_once_its_round_ended(
        reads: list[Read]) -> None:
    state = fl.NEW
    applied = 0
    for kind, generation, flag in reads:
        if kind == "a":
            state, effects = fl.assignment_read(state, assignment(generation, "r", algorithm=GB if flag else "x"), NODE)
        else:
            record = BarrierRecord(Phase.STOP if flag else Phase.ASSIGNED, generation, 1)
            state, effects = fl.barrier_read(state, record)
        for effect in effects:
            if isinstance(effect, fl.Apply):
                assert effect.generation >= applied
                applied = effect.generation
                if kind == "a" and flag:
                    assert state.barrier == ("assigned", generation)
            if isinstance(effect, fl.StopForBarrier):
                state = fl.barrier_stopped(state, effect.record.generation)
        assert state.applied == applied
