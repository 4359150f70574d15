"""Standby's rules, without ZooKeeper: no rejoin while the member node left still exists or a claim is
still to release; failed chores are tried again later; the callbacks' end is waited for."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from rebalanser import standby as sb


def test_stepping_aside_releases_and_deletes_the_node_left() -> None:
    state, effects = sb.step_aside(sb.IN_GROUP, "n1")
    assert state == sb.Standby(True, "n1")
    assert effects == [sb.Release(), sb.DeleteNode("n1")]


def test_a_node_not_yet_deleted_is_deleted_again_later_and_blocks_the_rejoin() -> None:
    state, _ = sb.step_aside(sb.IN_GROUP, "n1")
    state, effects = sb.observed(state, node_gone=False, releases_left=False, callbacks_blocked=False)
    assert effects == [sb.RetryLater()] and state.node == "n1"
    assert sb.chores(state) == [sb.Release(), sb.DeleteNode("n1")]


def test_a_release_still_pending_is_tried_again_later_and_blocks_the_rejoin() -> None:
    state, _ = sb.step_aside(sb.IN_GROUP, "n1")
    state, effects = sb.observed(state, node_gone=True, releases_left=True, callbacks_blocked=False)
    assert effects == [sb.RetryLater()] and state == sb.Standby(True, "")
    assert sb.chores(state) == [sb.Release()]


def test_with_the_chores_done_standby_waits_for_the_callbacks_then_ends() -> None:
    state, _ = sb.step_aside(sb.IN_GROUP, "n1")
    state, effects = sb.observed(state, node_gone=True, releases_left=False, callbacks_blocked=True)
    assert effects == [] and state.aside
    state, effects = sb.observed(state, node_gone=True, releases_left=False, callbacks_blocked=False)
    assert effects == [sb.Rejoin()] and state == sb.IN_GROUP
    assert sb.chores(state) == []


@given(st.lists(st.tuples(st.booleans(), st.booleans(), st.booleans()), max_size=8))
def test_a_rejoin_never_comes_with_the_old_node_or_a_release_left(observations: list[tuple[bool, bool, bool]]) -> None:
    state, _ = sb.step_aside(sb.IN_GROUP, "n1")
    node_seen_gone = False
    for gone, left, blocked in observations:
        node_seen_gone = node_seen_gone or gone
        state, effects = sb.observed(state, gone, left, blocked)
        if sb.Rejoin() in effects:
            assert node_seen_gone and not left and not blocked
            assert state == sb.IN_GROUP
            break
        assert state.aside
