"""The start-up window's arithmetic (rebalanser.startup): quiet after the last join, capped."""

from __future__ import annotations

from rebalanser.options import Options
from rebalanser.startup import window_end


def test_the_window_ends_quiet_after_the_last_join() -> None:
    assert window_end(opened=10.0, last_join=10.0, quiet=0.5, max_wait=5.0) == 10.5
    assert window_end(opened=10.0, last_join=12.25, quiet=0.5, max_wait=5.0) == 12.75


def test_a_steady_trickle_of_joins_cannot_hold_the_first_assignment_past_the_cap() -> None:
    assert window_end(opened=10.0, last_join=14.9, quiet=0.5, max_wait=5.0) == 15.0
    assert window_end(opened=10.0, last_join=100.0, quiet=0.5, max_wait=5.0) == 15.0


def test_joins_before_the_window_opened_count_from_its_opening() -> None:
    assert window_end(opened=10.0, last_join=3.0, quiet=0.5, max_wait=5.0) == 10.5


def test_quiet_zero_assigns_at_once_and_the_cap_never_cuts_below_quiet() -> None:
    assert window_end(opened=10.0, last_join=12.0, quiet=0.0, max_wait=5.0) == 10.0
    assert window_end(opened=10.0, last_join=10.0, quiet=1.0, max_wait=0.0) == 11.0


def test_by_default_a_rollout_of_five_seconds_gets_one_first_assignment() -> None:
    """50 workers started evenly over 5 s (a rollout's pace): the coordinator takes office with the
    first of them, and under load the last one's node appears up to ~2.5 s late (measured: joins
    spread over 7.4 s at stagger 5, load 36-48). The window must outlast them: with the cap at 5 s it
    closed on 34 or 49 of the 50, and the second rebalance moved up to 32,000 of 100,000 resources."""
    options = Options(hosts="zk:2181", group="/g")
    opened = 100.0
    joins = [opened + 7.5 * i / 49 for i in range(50)]
    end = window_end(opened, max(joins), options.initial_quiet, options.initial_max_wait)
    assert end == max(joins) + options.initial_quiet
