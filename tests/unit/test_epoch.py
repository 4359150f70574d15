"""Taking an epoch, the pure part: which version to reach and in which batches."""

from __future__ import annotations

from rebalanser.coordinator_plan import retry_delay
from rebalanser.epoch import MAX_EPOCH_JUMP, Step, next_step, target_epoch


def test_an_existing_epoch_node_goes_up_by_one_when_nothing_recorded_is_higher() -> None:
    assert target_epoch(7, floor=3) == (8, False)
    assert target_epoch(7, floor=7) == (8, False)


def test_a_missing_or_recreated_epoch_node_goes_above_every_recorded_epoch() -> None:
    assert target_epoch(None, floor=0) == (1, False)
    assert target_epoch(None, floor=41) == (42, False)
    assert target_epoch(2, floor=41) == (42, False)


def test_a_recorded_epoch_out_of_reach_is_ignored_and_flagged() -> None:
    assert target_epoch(2, floor=2 + MAX_EPOCH_JUMP + 5) == (3, True)
    assert target_epoch(0, floor=MAX_EPOCH_JUMP - 1) == (MAX_EPOCH_JUMP, False)


def test_a_bump_is_cut_into_batches_that_end_exactly_at_the_target() -> None:
    steps, version = [], None
    while True:
        step = next_step(version, 1800, max_sets=798)
        steps.append(step)
        version = step.target
        if step.final:
            break
    assert steps == [Step(True, 0, 798, False), Step(False, 798, 1596, False), Step(False, 1596, 1800, True)]
    assert sum(s.sets for s in steps) == 1800
    assert next_step(5, 6) == Step(False, 5, 6, True)


def test_failed_rebalances_back_off_exponentially_up_to_a_cap() -> None:
    assert [retry_delay(n) for n in range(1, 8)] == [0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0]
