"""One operator release per ResourceGroup, the pure parts (rebalanser_operator.releaseclaim): whose a
group is from its status and the other release's heartbeat, the claim's and the refusal's status patches,
the release identity, and every status patch under a claim carrying the release and its claim number
(rebalanser_operator.replicafence.fenced)."""

from __future__ import annotations

import datetime
from typing import Any

import kopf
import pytest
from rebalanser_operator.handlers import handled_here, replica_ready
from rebalanser_operator.releaseclaim import (
    SERVED_BY_ANOTHER_RELEASE,
    Free,
    Mine,
    Release,
    ReleaseClaims,
    ReleaseSettingError,
    Taken,
    claim_status,
    claimed,
    lease_alive,
    refusal_status,
    said,
    verdict,
)
from rebalanser_operator.replicafence import fenced
from rebalanser_operator.replicas import Replicas
from rebalanser_operator.uninstallcheck import successor

A, B = "ops-a/rebalanser-operator", "ops-b/rebalanser-operator"
NOW = datetime.datetime(2026, 11, 29, 12, 0, tzinfo=datetime.UTC)


def status(release: str | None, claim: int | None = None, token: int = 3) -> dict[str, Any]:
    served: dict[str, Any] = {"replica": "op-0", "token": token}
    if release is not None:
        served["release"] = release
    if claim is not None:
        served["claim"] = claim
    return {"phase": "Stable", "servedBy": served}


def alive(answer: bool | None) -> Any:
    return lambda release: (answer, "live" if answer else "its heartbeat Lease is gone")


def test_a_group_nobody_claimed_is_free_as_claim_one() -> None:
    assert verdict(None, A, alive(True)) == Free(1, None)
    assert verdict({}, A, alive(True)) == Free(1, None)
    assert verdict(status(None), A, alive(True)) == Free(1, None)  # served by replicas before releases claimed


def test_a_group_of_this_release_is_mine_whichever_replica_wrote_it() -> None:
    """An upgrade of the release (the same identity, new pods) is never refused by itself."""
    assert verdict(status(A, 4), A, alive(None)) == Mine(4)


def test_another_live_release_keeps_the_group_and_an_unknown_one_counts_as_live() -> None:
    assert verdict(status(B, 2), A, alive(True)) == Taken(B, 2, "live")
    unknown = verdict(status(B, 2), A, lambda release: (None, "its heartbeat Lease cannot be read: 403"))
    assert isinstance(unknown, Taken) and "403" in unknown.why


def test_a_gone_or_expired_release_passes_the_group_on_with_a_larger_claim() -> None:
    assert verdict(status(B, 2), A, alive(False)) == Free(3, B)
    assert verdict(status(B), A, alive(False)) == Free(1, B)


def test_the_claim_is_read_from_servedBy_only() -> None:
    assert claimed(status(A, 5)) == (A, 5)
    assert claimed({"servedBy": {"replica": "x", "token": 1}}) == (None, 0)
    assert claimed(None) == (None, 0)


def test_the_claim_patch_names_the_release_and_clears_its_own_refusal() -> None:
    assert claim_status(A, 2, "op-1", 7) == {
        "servedBy": {"replica": "op-1", "token": 7, "release": A, "claim": 2}, "refusedReleases": {A: None}}


def test_the_refusal_names_the_release_that_serves_the_group() -> None:
    patch = refusal_status(B, Taken(A, 1, "live"), NOW)
    entry = patch["refusedReleases"][B]
    assert entry["reason"] == SERVED_BY_ANOTHER_RELEASE and entry["servedBy"] == A
    assert A in entry["message"] and B in entry["message"] and entry["since"] == "2026-11-29T12:00:00Z"
    assert set(patch) == {"refusedReleases"}  # nothing of the serving release's status: no servedBy, no conditions


def test_a_lease_stands_until_its_duration_after_its_renewal() -> None:
    renewed = NOW - datetime.timedelta(seconds=59)
    assert lease_alive(renewed, 60, NOW)
    assert not lease_alive(renewed, 59, NOW)
    assert lease_alive(renewed.replace(tzinfo=None), 60, NOW)  # a naive time is UTC
    assert not lease_alive(None, 60, NOW) and not lease_alive(renewed, None, NOW)


def test_every_patch_under_a_claim_carries_the_release_and_its_number() -> None:
    assert fenced({"phase": "Stable"}, "op-1", 7, A, 2) == {
        "phase": "Stable", "servedBy": {"replica": "op-1", "token": 7, "release": A, "claim": 2}}
    assert fenced({"phase": "Stable"}, "op-1", 7) == {"phase": "Stable", "servedBy": {"replica": "op-1", "token": 7}}


@pytest.mark.parametrize("text", ["ops", "/name", "ops/", "Ops/name", "ops/na_me", "a/b/c", "x" * 64 + "/n"])
def test_a_release_is_namespace_slash_name(text: str) -> None:
    with pytest.raises(ReleaseSettingError):
        Release.parse(text)


def test_a_release_parses_and_prints_back() -> None:
    assert str(Release.parse(" ops/rebalanser-operator ")) == "ops/rebalanser-operator"


class Api:
    """The claims' edge, for the heartbeat's own freshness (no request is made)."""

    def __init__(self) -> None:
        self.renewals = 0

    def renew(self, release: Release, holder: str, duration: float, now: datetime.datetime) -> None:
        self.renewals += 1


def test_a_replica_whose_heartbeat_is_not_renewed_holds_nothing() -> None:
    claims = ReleaseClaims(Api(), Release.parse(A), "op-0", lease_seconds=10)  # type: ignore[arg-type]
    assert not claims.fresh() and not claims.holds(status(A, 1))  # not renewed yet
    claims.renew()
    assert claims.fresh() and claims.holds(status(A, 1)) and not claims.holds(status(B, 1))
    assert claims.still_ours(status(None), 1)  # kopf's body has not seen the claim's own write yet
    assert claims.still_ours(status(A, 1), 1) and not claims.still_ours(status(B, 2), 1)
    with pytest.raises(ReleaseSettingError):
        ReleaseClaims(Api(), Release.parse(A), "op-0", lease_seconds=1)  # type: ignore[arg-type]


def test_a_replica_whose_release_heartbeat_is_not_renewed_is_not_ready() -> None:
    """The readiness endpoint: a replica that cannot renew its release's heartbeat serves nothing, and says so."""
    claims = ReleaseClaims(Api(), Release.parse(A), "op-0", lease_seconds=10)  # type: ignore[arg-type]
    ok, text = replica_ready(Replicas.single(), claims)
    assert not ok and f"the heartbeat of release {A} is not renewed" in text, text
    claims.renew()
    assert replica_ready(Replicas.single(), claims) == (True, "no operator group: every group")
    assert replica_ready(Replicas.single(), None) == (True, "no operator group: every group")


def test_kopf_stores_the_handled_spec_only_for_the_groups_of_this_release() -> None:
    """(rebalanser_operator.diffbase): a release that leaves a group to another stores nothing on it."""
    assert handled_here(Replicas.single(), None) is None  # one operator without a release: every group
    claims = ReleaseClaims(Api(), Release.parse(A), "op-0", lease_seconds=10)  # type: ignore[arg-type]
    claims.renew()
    handled = handled_here(Replicas.single(), claims)
    assert handled is not None
    meta = {"namespace": "shop", "name": "orders"}
    assert handled(kopf.Body({"metadata": meta, "status": status(A, 1)}))
    assert not handled(kopf.Body({"metadata": meta, "status": status(B, 1)}))
    assert not handled(kopf.Body({"metadata": meta}))  # not claimed yet: its creation is handled once claimed


def test_a_refusal_already_in_the_status_is_not_said_again() -> None:
    current = {**status(A, 1), **refusal_status(B, Taken(A, 1, "live"), NOW)}
    assert said(current, B) == A and said(current, A) is None and said(None, B) is None


def test_the_uninstall_check_lets_a_group_go_that_another_live_release_takes_over() -> None:
    """(rebalanser_operator.uninstallcheck): B serves it, or B serves its namespace and left it to A."""
    live = {B: (True, "live"), "ops-c/gone": (False, "its heartbeat Lease is gone")}

    def alive(release: str) -> tuple[bool | None, str]:
        return live.get(release, (None, "unknown"))

    assert successor(status(B, 2), A, alive) == B
    refused_by_b = {**status(A, 1), **refusal_status(B, Taken(A, 1, "live"), NOW)}
    assert successor(refused_by_b, A, alive) == B
    assert successor(status(A, 1), A, alive) is None  # nobody else serves its namespace: it holds the uninstall
    assert successor({**status(A, 1), **refusal_status("ops-c/gone", Taken(A, 1, "live"), NOW)}, A, alive) is None
    assert successor(None, A, alive) is None
