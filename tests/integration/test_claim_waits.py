"""What a claim round costs and reports: claims won are watched (a deletion is reported), claims
held by another session are read once and their release reported.

Evidence: the claim znodes read by the test's own sessions, the reports the claim book makes, and
the requests the member's session sends (counted at kazoo's request queue)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient
from rebalanser.paths import GroupPaths

from tests.support.claimbook import joined
from tests.support.zk import admin_client

WAIT = 20.0  # seconds: generous, the machine may be loaded


@pytest.fixture
def member(zk_hosts: str) -> Iterator[KazooClient]:
    """The claiming member's own session, its requests counted by type (``requests``)."""
    with admin_client(zk_hosts) as client:
        counts: Counter[str] = Counter()
        call = client._call

        def counted(request: Any, result: Any) -> Any:
            counts[type(request).__name__] += 1
            return call(request, result)

        client._call = counted  # type: ignore[method-assign]
        client.requests = counts  # type: ignore[attr-defined]
        yield client



class Reports:
    """What the claim book tells, with an event per resource to wait on."""

    def __init__(self) -> None:
        self.lost: list[tuple[str, int]] = []
        self.released: list[str] = []
        self._came: dict[str, threading.Event] = {}
        self._lock = threading.Lock()

    def event(self, resource: str) -> threading.Event:
        with self._lock:
            return self._came.setdefault(resource, threading.Event())

    def on_lost(self, resource: str, token: int) -> None:
        self.lost.append((resource, token))
        self.event(resource).set()

    def on_release(self, resource: str) -> None:
        self.released.append(resource)
        self.event(resource).set()

    def wait(self, resource: str) -> None:
        assert self.event(resource).wait(WAIT), f"nothing reported for {resource} within {WAIT}s"


def test_every_claim_of_a_batch_is_watched_and_shares_the_batchs_token(
    zk: KazooClient, member: KazooClient, group_path: str
) -> None:
    """A batch's claims are watched through one setWatches request (one exists for the token), and
    the deletion of any of them, by someone else, is reported with that token."""
    paths = GroupPaths.of(group_path)
    book = joined(member, paths)
    reports = Reports()
    book.on_lost = reports.on_lost
    names = [f"r{i:03d}" for i in range(200)]
    member.requests.clear()  # type: ignore[attr-defined]
    claimed = book.claim(names).claimed
    assert sorted(claimed) == names
    tokens = {int(zk.exists(paths.owner(r)).czxid) for r in names}
    assert set(claimed.values()) == tokens and len(tokens) == 1, "one transaction, one token"
    assert member.requests["Exists"] <= 1, f"one read per claim: {member.requests}"  # type: ignore[attr-defined]
    for resource in ("r000", "r001", "r137", "r199"):
        zk.delete(paths.owner(resource))
        reports.wait(resource)
    assert sorted(reports.lost) == [(r, claimed[r]) for r in ("r000", "r001", "r137", "r199")]


def test_a_claim_deleted_before_its_watch_is_armed_is_reported(
    zk: KazooClient, member: KazooClient, zk_hosts: str, group_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between the transaction and the request arming the watches, someone deletes one claim and
    another session claims another: both are reported (deleted, and replaced), never taken as ours."""
    paths = GroupPaths.of(group_path)
    book = joined(member, paths)
    reports = Reports()
    book.on_lost = reports.on_lost
    import rebalanser.claims as claims_module

    arm = claims_module.watch_unchanged
    with admin_client(zk_hosts) as other:

        def overtaken(*args: Any, **kwargs: Any) -> None:
            zk.delete(paths.owner("r2"))
            zk.delete(paths.owner("r3"))
            other.create(paths.owner("r3"), b"", ephemeral=True)
            arm(*args, **kwargs)

        monkeypatch.setattr(claims_module, "watch_unchanged", overtaken)
        book.claim([f"r{i}" for i in range(12)])  # more than READ_EACH: their watches in one request
        reports.wait("r2")
        reports.wait("r3")
        assert sorted(r for r, _ in reports.lost) == ["r2", "r3"]
        assert not book.still_held("r3", book.held.get("r3", 0)), "another session's claim taken for ours"


def test_claims_held_by_another_session_are_read_once_and_their_release_is_reported(
    zk: KazooClient, member: KazooClient, zk_hosts: str, group_path: str
) -> None:
    """A round that meets claims of another session returns them blocked, having read each once; the
    release watch needs no second read, and each release is reported, also one that came before the
    caller asked (returned as gone)."""
    paths = GroupPaths.of(group_path)
    book = joined(member, paths)
    reports = Reports()
    names = [f"r{i:02d}" for i in range(40)]
    with admin_client(zk_hosts) as other:
        for resource in names[:30]:
            other.create(paths.owner(resource), b"", ephemeral=True)
        member.requests.clear()  # type: ignore[attr-defined]
        result = book.claim(names)
        assert sorted(result.claimed) == names[30:] and sorted(result.blocked) == names[:30]
        other.delete(paths.owner("r00"))  # released before the caller asks for the watches
        book.watch_releases(["r05"], reports.on_release)  # the caller arms them
        gone = book.watch_releases([r for r in result.blocked if r != "r05"], reports.on_release)
        reads = member.requests["Exists"]  # type: ignore[attr-defined]
        assert reads <= len(names) + 2, f"the blocked claims were read again for their watches: {reads} reads"
        if "r00" not in gone:
            reports.wait("r00")
        for resource in ("r05", "r17", "r29"):
            other.delete(paths.owner(resource))
            reports.wait(resource)
        assert sorted(reports.released) == sorted(["r05", "r17", "r29"] + ([] if "r00" in gone else ["r00"]))
