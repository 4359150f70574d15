"""--max-groups-per-namespace with operator replicas: the verdict over every ResourceGroup of the
namespace (rebalanser_operator.replicaserve.within_limit), the same on every replica."""

from __future__ import annotations

from rebalanser_operator.replicaserve import Admission, within_limit

GROUPS = [("2026-11-29T08:00:02Z", "b"), ("2026-11-29T08:00:01Z", "z"), ("2026-11-29T08:00:02Z", "a"),
          ("2026-11-29T08:00:03Z", "c")]


def test_the_oldest_are_within_the_limit_equal_times_by_name() -> None:
    assert [n for n in "zabc" if within_limit(GROUPS, n, 2)] == ["z", "a"]
    assert all(within_limit(GROUPS, n, 4) for n in "zabc")
    assert within_limit(GROUPS, "c", 3) is False


def test_a_group_the_index_has_not_seen_is_left_to_the_local_count() -> None:
    assert within_limit(GROUPS, "new", 10) is None
    admission = Admission()
    assert admission.admits("shop", "a", 2) is None  # no index yet
    admission.index = {"shop": GROUPS}
    assert admission.admits("shop", "a", 2) is True and admission.admits("shop", "c", 2) is False
    assert admission.admits("bank", "a", 2) is None
