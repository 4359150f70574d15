"""Operator replicas, the pure parts: --max-groups-per-namespace over every ResourceGroup of the
namespace (rebalanser_operator.replicaserve.within_limit), the same on every replica; the token in every
status patch (rebalanser_operator.replicafence.fenced)."""

from __future__ import annotations

from rebalanser_operator.replicafence import fenced, served_by
from rebalanser_operator.replicaserve import Admission, live_only, within_limit

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


def test_every_patch_of_a_replica_carries_its_token_and_an_empty_one_stays_empty() -> None:
    """The fence needs the token in each patch: merged into a status a newer owner wrote, a patch without
    it would keep the newer token, and the admission policy would let the stale write through."""
    assert fenced({"phase": "Stable"}, "op-1", 7) == {"phase": "Stable", "servedBy": {"replica": "op-1", "token": 7}}
    assert fenced({}, "op-1", 7) == {}
    assert served_by("op-1", 7) == {"servedBy": {"replica": "op-1", "token": 7}}


def test_the_list_keeps_only_what_the_api_server_lists_where_it_answered() -> None:
    groups = [("shop", "a"), ("shop", "gone"), ("bank", "b")]
    assert live_only(groups, {"shop": {"a", "new"}}) == [("shop", "a"), ("bank", "b")]
    assert live_only(groups, {}) == groups
