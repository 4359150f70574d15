"""The coordinator's interval policy, the pure part: which settings changes rebalance, and where a
successor places the group's last rebalance."""

from __future__ import annotations

from rebalanser.config import Algorithm, GroupConfig
from rebalanser.coordinator_plan import last_rebalance_at, needs_rebalance


def test_only_the_first_settings_or_another_algorithm_call_for_a_rebalance() -> None:
    rb, gb = GroupConfig(Algorithm.RESOURCE_BARRIER), GroupConfig(Algorithm.GLOBAL_BARRIER)
    tuned = GroupConfig(Algorithm.RESOURCE_BARRIER, effective_interval_seconds=12.0, departure_grace_seconds=5.0)
    assert needs_rebalance(None, rb) and needs_rebalance(rb, None)
    assert needs_rebalance(rb, gb) and needs_rebalance(gb, rb)
    assert not needs_rebalance(rb, tuned) and not needs_rebalance(tuned, rb)


def test_a_successor_places_the_last_rebalance_by_the_servers_stamps() -> None:
    assert last_rebalance_at(100.0, taken_ms=50_000, last_ms=47_500) == 97.5
    assert last_rebalance_at(100.0, taken_ms=50_000, last_ms=50_000) == 100.0
    assert last_rebalance_at(100.0, taken_ms=50_000, last_ms=50_001) == 0.0  # stamped ahead of us: unknown
