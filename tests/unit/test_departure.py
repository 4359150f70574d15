"""The departure-grace policy on its own: who stays reserved, for how long, and who gets none."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from rebalanser import departure


def test_a_member_that_vanished_is_reserved_for_the_grace_period_from_when_it_was_first_seen_gone() -> None:
    departed, reserved = departure.reserve({}, {"a", "b"}, {"a"}, set(), now=100.0, grace=10.0)
    assert departed == {"b": 100.0} and reserved == ["b"]
    departed, reserved = departure.reserve(departed, {"a", "b"}, {"a"}, set(), now=105.0, grace=10.0)
    assert departed == {"b": 100.0} and reserved == ["b"], "the first sighting counts, not the latest"
    departed, reserved = departure.reserve(departed, {"a", "b"}, {"a"}, set(), now=110.0, grace=10.0)
    assert reserved == [], "reserved no longer once the grace has run out"


def test_a_member_that_left_gracefully_gets_no_grace() -> None:
    departed, reserved = departure.reserve({}, {"a", "b"}, {"a"}, {"b"}, now=1.0, grace=10.0)
    assert departed == {} and reserved == []


def test_a_member_that_is_back_or_owns_nothing_is_forgotten() -> None:
    departed, _ = departure.reserve({"b": 1.0, "c": 1.0}, {"a", "b"}, {"a", "b"}, set(), now=2.0, grace=10.0)
    assert departed == {}


def test_without_grace_nothing_is_reserved_or_remembered() -> None:
    assert departure.reserve({"b": 1.0}, {"a", "b"}, {"a"}, set(), now=2.0, grace=0.0) == ({}, [])


def test_the_wait_is_bounded_by_the_first_reservation_to_run_out_and_never_spins() -> None:
    assert departure.next_deadline({}, 10.0, now=0.0) is None
    assert departure.next_deadline({"a": 5.0, "b": 1.0}, 10.0, now=4.0) == 7.0
    assert departure.next_deadline({"a": 1.0}, 10.0, now=50.0) == 0.05
    assert not departure.expired({"a": 1.0}, 10.0, now=10.9)
    assert departure.expired({"a": 1.0, "b": 20.0}, 10.0, now=11.0)


IDS = st.sets(st.sampled_from("abcdef"))


@settings(deadline=None)  # a loaded machine is slow; correctness, not speed, is checked here
@given(IDS, IDS, IDS, IDS, st.floats(0, 100), st.floats(0.01, 50))
def test_only_known_members_that_are_gone_and_did_not_leave_gracefully_are_reserved(
    known: set[str], live: set[str], graceful: set[str], before: set[str], now: float, grace: float
) -> None:
    departed, reserved = departure.reserve(dict.fromkeys(before, now - grace / 2), known, live, graceful, now, grace)
    assert set(reserved) <= known - live
    assert set(departed) <= known - live
    assert known - live - graceful <= set(departed)
    assert all(departed[m] <= now for m in departed)
