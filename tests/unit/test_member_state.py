"""Joining, the session and standby as pure transitions, without ZooKeeper: which session a member may
join in, what it announces, the steps of a join, eviction, standby, and invariants over random runs
(never two member nodes in one session; standby ends only through its rules)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from rebalanser import member_state as ms
from rebalanser.member_events import Connection
from rebalanser.member_state import State
from rebalanser.paths import MemberNode

S1, S2 = 0x11, 0x22
NODE = MemberNode(1, "m", "g" * 32, "m-0000000001")
NODE2 = MemberNode(2, "m", "g" * 32, "m-0000000002")


def connected(state: ms.Member, session: int = S1) -> ms.Step:
    return ms.connection(state, Connection.CONNECTED, session, session, shutdown=False)


def joined(session: int = S1, node: MemberNode = NODE) -> ms.Member:
    state, _ = connected(ms.START, session)
    state, _ = ms.node_created(state, node, session)
    return state


def test_the_first_connection_announces_it_and_takes_a_join_step() -> None:
    state, effects = connected(ms.START)
    assert effects == [ms.Notify("connected"), ms.Join()]
    assert state.session == S1 and state.announced == S1 and not state.joined


def test_a_join_step_creates_the_group_root_only_on_the_first_join_of_a_member_asked_to() -> None:
    state, _ = connected(ms.start(create_group=True))
    _, effects = ms.join_step(state, S1, ending=False)
    assert effects == [ms.Enter(State.JOINING), ms.EnsureGroup(True, S1)]
    state, _ = ms.node_created(state, NODE, S1)
    state, _ = ms.evicted(state)
    _, effects = ms.join_step(state, S1, ending=False)
    assert effects == [ms.Enter(State.JOINING), ms.EnsureGroup(False, S1)]


def test_a_join_step_of_another_session_or_a_joined_one_or_an_ending_member_does_nothing() -> None:
    state, _ = connected(ms.START)
    assert ms.join_step(state, S2, ending=False) == (state, [])  # kazoo is already in a newer session
    assert ms.join_step(state, 0, ending=False) == (state, [])
    assert ms.join_step(state, S1, ending=True) == (state, [])
    state, _ = ms.node_created(state, NODE, S1)
    assert ms.join_step(state, S1, ending=False) == (state, [])  # joined already: never a second node


def test_the_steps_of_a_join_end_with_a_member_node_then_the_sync() -> None:
    state, _ = connected(ms.START)
    state, effects = ms.group_checked(state, True, S1)
    assert effects == [ms.CheckSameId(S1, watch=False)]
    state, effects = ms.same_id_checked(state, False, S1, now=100.0, timeout=10.0)
    assert effects == [ms.CancelJoinTimer(), ms.CreateNode(S1)]
    state, effects = ms.node_created(state, NODE, S1)
    assert effects == [ms.Joined(NODE, S1), ms.ReleasePending(), ms.Enter(State.PENDING_ASSIGNMENT),
                       ms.SyncWithGroup(NODE)]
    assert state.joined == S1 and state.node == NODE and state.ever_joined and state.in_session(S1)
    assert not state.in_session(S2)


def test_by_default_a_first_join_never_creates_the_group_and_ends_on_a_missing_one() -> None:
    state, _ = connected(ms.START)
    _, effects = ms.join_step(state, S1, ending=False)
    assert effects == [ms.Enter(State.JOINING), ms.EnsureGroup(False, S1)]
    assert ms.group_checked(state, ms.Found.MISSING, S1) == (state, [ms.GroupMissing()])
    assert ms.node_created(state, None, S1) == (state, [ms.GroupMissing()])


def test_a_group_gone_after_a_join_is_waited_for_never_created_again() -> None:
    state = joined()
    state, _ = ms.evicted(state)
    assert ms.group_checked(state, False, S1) == (state, [ms.AwaitGroup()])
    assert ms.node_created(state, None, S1) == (state, [ms.AwaitGroup()])


def test_a_group_marked_deleted_ends_the_member_whether_or_not_it_joined_before() -> None:
    for state in (connected(ms.start(create_group=True))[0], ms.evicted(joined())[0]):
        assert ms.group_checked(state, ms.Found.DELETED, S1) == (state, [ms.GroupDeleted()])


def test_an_earlier_incarnation_is_waited_for_2t_plus_5s_then_the_id_is_a_duplicate() -> None:
    state, _ = connected(ms.START)
    state, effects = ms.same_id_checked(state, True, S1, now=100.0, timeout=10.0)
    assert state.same_id_until == 125.0
    assert effects[1:] == [ms.Notify("waiting"), ms.JoinTimer(25.0), ms.CheckSameId(S1, watch=True)]
    assert isinstance(effects[0], ms.Note) and effects[0].warning
    assert ms.same_id_rechecked(state, True, S1) == (state, [])  # the watch or the timer goes on
    again, effects = ms.same_id_checked(state, True, S1, now=110.0, timeout=10.0)
    assert again == state and effects == [ms.CheckSameId(S1, watch=True)]  # announced once
    _, effects = ms.same_id_checked(state, True, S1, now=125.0, timeout=10.0)
    assert effects == [ms.DuplicateId()]
    gone, effects = ms.same_id_rechecked(state, False, S1)
    assert effects == [ms.CancelJoinTimer(), ms.CreateNode(S1)] and gone.same_id_until == 0.0


def test_suspension_then_reconnection_in_the_joined_session_resyncs() -> None:
    state = joined()
    state, effects = ms.connection(state, Connection.SUSPENDED, S1, S1, shutdown=False)
    assert effects == [ms.Enter(State.SUSPENDED), ms.Notify("suspended")] and state.suspended
    state, effects = connected(state)
    # the claims are not re-read here: the re-check thread does it at the handshake (rebalanser.claimcheck)
    assert effects == [ms.Notify("reconnected"), ms.ReleasePending(), ms.SyncWithGroup(NODE), ms.Reclaim()]
    assert not state.suspended
    assert connected(state) == (state, [])  # a CONNECTED without a suspension in between: nothing to redo


def test_a_reconnection_before_the_member_node_existed_joins() -> None:
    state, _ = connected(ms.START)
    state, _ = ms.connection(state, Connection.SUSPENDED, S1, S1, shutdown=False)
    _, effects = connected(state)
    assert effects == [ms.Join()]  # announced already: only the join goes on


def test_an_expiry_ends_the_session_and_the_next_one_is_announced_as_a_reconnection() -> None:
    state = joined()
    state, effects = ms.connection(state, Connection.LOST, S1, 0, shutdown=False)
    assert effects == [ms.Notify("expired"), ms.StopCoordinating(), ms.EndSessionWork()]
    assert state.session == 0 and state.joined == 0
    assert ms.join_step(state, S2, ending=False) == (state, [])  # a join step queued ahead of CONNECTED
    state, effects = connected(state, S2)
    assert effects == [ms.Notify("connected"), ms.Join()]  # joined is 0: announced as a new session
    _, effects = ms.join_step(state, S2, ending=False)
    assert effects == [ms.Enter(State.JOINING), ms.EnsureGroup(False, S2)]


def test_an_expiry_under_the_shutdown_policy_aborts() -> None:
    _, effects = ms.connection(joined(), Connection.LOST, S1, 0, shutdown=True)
    assert effects[-1] == ms.Expired()


def test_a_connection_event_of_a_session_no_longer_current_waits_for_what_follows() -> None:
    state, _ = connected(ms.START)
    again, effects = ms.connection(state, Connection.CONNECTED, S1, S2, shutdown=False)
    assert again == state and len(effects) == 1 and isinstance(effects[0], ms.Note)


def test_an_eviction_stops_all_work_and_joins_again_with_a_new_node() -> None:
    state, effects = ms.evicted(joined())
    assert effects == [ms.Evicted(), ms.StopCoordinating(), ms.StopAllWork(), ms.Join()]
    assert state.node is None and not state.joined and state.session == S1
    _, effects = ms.join_step(state, S1, ending=False)
    assert effects[-1] == ms.EnsureGroup(False, S1)


def test_stepping_aside_leaves_the_group_and_waits_for_the_callbacks() -> None:
    state, effects = ms.step_aside(joined(), frozenset({"a"}))
    assert effects == [ms.Stuck(frozenset({"a"})), ms.Notify("standby"), ms.StopCoordinating(), ms.DropAssignment(),
                       ms.StandbyChores(joining=False), ms.Enter(State.JOINING), ms.JoinWhenCallbacksClear()]
    assert state.standby.aside and state.standby.node == NODE.name and state.node is None and not state.joined
    _, effects = ms.join_step(state, S1, ending=False)
    assert effects == [ms.Enter(State.JOINING), ms.StandbyChores(joining=True)]  # never straight to a new node


def test_standby_retries_its_chores_and_a_join_goes_on_only_once_it_is_over() -> None:
    state, _ = ms.step_aside(joined(), frozenset({"a"}))
    state, effects = ms.standby_observed(state, node_gone=False, releases_left=False, callbacks_blocked=False,
                                         joining=True)
    assert effects == [ms.RetryStandbyLater()] and state.standby.aside
    state, effects = ms.standby_observed(state, node_gone=True, releases_left=False, callbacks_blocked=True,
                                         joining=True)
    assert effects == [] and state.standby.aside
    state, effects = ms.standby_observed(state, node_gone=True, releases_left=False, callbacks_blocked=False,
                                         joining=True)
    assert effects == [ms.Notify("rejoining"), ms.EnsureGroup(False, S1)] and not state.standby.aside


def test_standby_over_outside_a_join_step_only_announces_the_rejoin() -> None:
    state, _ = ms.step_aside(joined(), frozenset({"a"}))
    _, effects = ms.standby_observed(state, node_gone=True, releases_left=False, callbacks_blocked=False,
                                     joining=False)
    assert effects == [ms.Notify("rejoining")]


# -- random runs -------------------------------------------------------------------------------


class World:
    """ZooKeeper as far as joining goes: kazoo's current session and each session's member nodes."""

    def __init__(self) -> None:
        self.kazoo = 0
        self.live: dict[int, set[str]] = {}
        self.created = 0

    def answer(self, state: ms.Member, effect: ms.Effect, flag: bool, now: float) -> ms.Step | None:
        """What ZooKeeper answers an effect that asks it something (``flag`` picks the answer)."""
        match effect:
            case ms.Join():
                return ms.join_step(state, self.kazoo, ending=False)
            case ms.EnsureGroup(_, session):
                return ms.group_checked(state, True, session)
            case ms.CheckSameId(session, watch):
                if watch:
                    return ms.same_id_rechecked(state, False, session)
                return ms.same_id_checked(state, False, session, now, 10.0)
            case ms.CreateNode(session):
                self.created += 1
                node = MemberNode(self.created, "m", "g" * 32, f"m-{self.created:010d}")
                assert not self.live.get(session), f"a second member node in session {session:#x}"
                self.live.setdefault(session, set()).add(node.name)
                return ms.node_created(state, node, session)
            case ms.StandbyChores(joining):
                if flag and state.standby.node:  # the delete went through
                    for names in self.live.values():
                        names.discard(state.standby.node)
                gone = not any(state.standby.node in names for names in self.live.values())
                return ms.standby_observed(state, gone, False, False, joining)
        return None

    def run(self, step: ms.Step, flag: bool, now: float) -> ms.Member:
        """Runs a transition's effects like the member's loop: queued, each answer's effects first."""
        state, effects = step
        todo = list(effects)
        while todo:
            answer = self.answer(state, todo.pop(0), flag, now)
            if answer is not None:
                state, more = answer
                todo[:0] = more
        return state


KINDS = ["expire", "connect", "lost", "suspend", "join", "evict", "aside"]


@settings(max_examples=400)
@given(st.lists(st.tuples(st.sampled_from(KINDS), st.booleans()), max_size=30))
def test_never_two_member_nodes_in_one_session(actions: list[tuple[str, bool]]) -> None:
    """Whatever the order of connection events (kazoo may be in a new session while LOST and CONNECTED
    still wait in the queue), stale join steps (a timer's, a watch's), evictions and standby (whose
    delete of the node left may fail): a session never gets a second member node while its first one
    exists, and a member is joined only in kazoo's current session."""
    world = World()
    world.kazoo = 1
    state = ms.START
    for n, (kind, flag) in enumerate(actions):
        match kind:
            case "expire":  # kazoo is in a new session; the old one's nodes are gone; its events are queued
                world.live.pop(world.kazoo, None)
                world.kazoo += 1
                continue
            case "connect":
                step = ms.connection(state, Connection.CONNECTED, world.kazoo, world.kazoo, shutdown=False)
            case "lost":
                if not state.session or state.session == world.kazoo:
                    continue  # LOST is only reported for a session that ended
                step = ms.connection(state, Connection.LOST, state.session, world.kazoo, shutdown=False)
            case "suspend":
                step = ms.connection(state, Connection.SUSPENDED, world.kazoo, world.kazoo, shutdown=False)
            case "join":
                step = ms.join_step(state, world.kazoo, ending=False)
            case "evict":
                if state.node is None or not state.in_session(world.kazoo):
                    continue  # the own node's watch is of the joined session (others are dropped)
                world.live[state.joined].discard(state.node.name)  # someone else deleted it
                step = ms.evicted(state)
            case _:
                if state.node is None or not state.in_session(world.kazoo):
                    continue  # claims are made only in the joined session
                step = ms.step_aside(state, frozenset({"a"}))
        state = world.run(step, flag, float(n))
        if state.in_session(world.kazoo):
            assert state.node is not None and world.live[state.joined] == {state.node.name}


def test_a_join_step_queued_ahead_of_an_expiry_does_not_join_the_next_session() -> None:
    """The campaign's seed 7105 as transitions: kazoo is in session 2 while LOST(1) and CONNECTED(2)
    still wait in the queue; a timer's join step runs first. It must not join session 2 early (LOST
    would then forget that join and CONNECTED join again: two member nodes in session 2)."""
    world = World()
    world.kazoo = 1
    state = world.run(connected(ms.START, 1), True, 0.0)
    assert state.joined == 1
    world.live.pop(1)
    world.kazoo = 2
    state = world.run(ms.join_step(state, world.kazoo, ending=False), True, 1.0)
    assert world.live.get(2) is None
    state = world.run(ms.connection(state, Connection.LOST, 1, 2, shutdown=False), True, 2.0)
    state = world.run(connected(state, 2), True, 3.0)
    assert state.in_session(2) and world.live[2] == {state.node.name if state.node else ""}
