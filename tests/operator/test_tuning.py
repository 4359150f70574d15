"""The adaptive interval policy is a pure function: these tests are its specification."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rebalanser_operator.status.tuning import (
    CHURN,
    DECAYING,
    FIXED,
    QUIET,
    ROLLING_OUT,
    TuningPolicy,
    TuningState,
    initial_state,
    observe,
)

POLICY = TuningPolicy(min_interval=2, max_interval=30, churn_window=60, quiet_period=30, decay_every=15)


def run(policy: TuningPolicy, steps: list[tuple[float, int, bool]], state: TuningState | None = None) -> TuningState:
    current = state or initial_state(policy, now=0)
    for now, changes, rolling in steps:
        current = observe(policy, current, now=now, membership_changes=changes, rolling_out=rolling)
    return current


def test_starts_at_the_minimum() -> None:
    assert initial_state(POLICY, now=0).effective == 2


def test_one_isolated_membership_change_keeps_the_minimum() -> None:
    assert run(POLICY, [(1, 1, False)]).effective == 2


def test_churn_doubles_per_change_within_the_window() -> None:
    state = run(POLICY, [(1, 1, False), (2, 1, False)])
    assert (state.effective, state.reason) == (4, CHURN)
    assert run(POLICY, [(1, 1, False), (2, 1, False), (3, 2, False)]).effective == 16


def test_churn_is_capped_at_the_maximum() -> None:
    assert run(POLICY, [(1, 50, False)]).effective == 30


def test_changes_outside_the_window_are_forgotten() -> None:
    state = run(POLICY, [(0, 1, False), (61, 1, False)])
    assert state.effective == 2


def test_rolling_out_pins_the_maximum() -> None:
    state = run(POLICY, [(1, 0, True)])
    assert (state.effective, state.reason) == (30, ROLLING_OUT)


def test_decay_starts_after_the_quiet_period_and_halves_each_step() -> None:
    raised = run(POLICY, [(0, 0, True)])
    assert run(POLICY, [(29, 0, False)], raised).effective == 30
    assert run(POLICY, [(30, 0, False)], raised).effective == 15
    assert run(POLICY, [(45, 0, False)], raised).reason == DECAYING
    assert run(POLICY, [(45, 0, False)], raised).effective == 7.5
    assert run(POLICY, [(60, 0, False)], raised).effective == 3.75
    settled = run(POLICY, [(75, 0, False)], raised)
    assert (settled.effective, settled.reason) == (2, QUIET)


def test_decay_is_independent_of_how_often_it_is_observed() -> None:
    raised = run(POLICY, [(0, 0, True)])
    sparse = run(POLICY, [(50, 0, False)], raised)
    dense = run(POLICY, [(t, 0, False) for t in range(1, 51)], raised)
    assert sparse.effective == dense.effective


def test_new_churn_during_decay_holds_the_interval_and_restarts_the_quiet_period() -> None:
    state = run(POLICY, [(0, 0, True), (40, 0, False), (41, 3, False)])
    assert (state.reason, state.effective) == (CHURN, 15)
    assert run(POLICY, [(70, 0, False)], state).effective == 15
    assert run(POLICY, [(42, 5, False)], state).effective == 30


def test_not_adaptive_pins_the_minimum() -> None:
    fixed = TuningPolicy(min_interval=3, max_interval=30, adaptive=False)
    state = run(fixed, [(1, 20, True), (2, 5, False)])
    assert (state.effective, state.reason) == (3, FIXED)


def test_zero_minimum_rises_from_one_second() -> None:
    zero = TuningPolicy(min_interval=0, max_interval=10)
    assert run(zero, [(1, 1, False)]).effective == 0
    assert run(zero, [(1, 2, False)]).effective == 2
    assert run(zero, [(1, 2, False), (100, 0, False)]).effective == 0


def test_seed_survives_a_restart_and_then_decays() -> None:
    state = initial_state(POLICY, now=100, seed=16)
    assert state.effective == 16
    assert run(POLICY, [(130, 0, False)], state).effective == 8
    assert initial_state(POLICY, now=0, seed=999).effective == 30


def test_invalid_policies_are_refused() -> None:
    with pytest.raises(ValueError):
        TuningPolicy(min_interval=5, max_interval=1)
    with pytest.raises(ValueError):
        TuningPolicy(min_interval=1, max_interval=5, decay_every=0)


@given(
    minimum=st.floats(0, 100),
    spread=st.floats(0, 500),
    adaptive=st.booleans(),
    steps=st.lists(st.tuples(st.floats(0, 30), st.integers(0, 20), st.booleans()), max_size=40),
)
def test_effective_always_within_bounds(
    minimum: float, spread: float, adaptive: bool, steps: list[tuple[float, int, bool]]
) -> None:
    policy = TuningPolicy(min_interval=minimum, max_interval=minimum + spread, adaptive=adaptive)
    state = initial_state(policy, now=0)
    now = 0.0
    for delta, changes, rolling in steps:
        now += delta
        state = observe(policy, state, now=now, membership_changes=changes, rolling_out=rolling)
        assert policy.min_interval <= state.effective <= policy.max_interval
        if not adaptive:
            assert state.effective == policy.min_interval
        if rolling and adaptive:
            assert state.effective == policy.max_interval


@given(steps=st.lists(st.tuples(st.floats(0, 10), st.integers(0, 5)), max_size=30))
def test_quiet_long_enough_always_returns_to_the_minimum(steps: list[tuple[float, int]]) -> None:
    state = initial_state(POLICY, now=0)
    now = 0.0
    for delta, changes in steps:
        now += delta
        state = observe(POLICY, state, now=now, membership_changes=changes, rolling_out=False)
    later = observe(POLICY, state, now=now + 30 + 15 * 8, membership_changes=0, rolling_out=False)
    assert later.effective == POLICY.min_interval
