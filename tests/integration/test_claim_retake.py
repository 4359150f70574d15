"""The claim book's requests: the re-take and the release of claims a member holds send no read for a
claim verified on the current connection (its watch armed on it and not fired), and a read for any
other claim; a claim round's batches are in flight together.

Evidence: the requests the member's session sent, counted by a proxy between it and the real server
(:class:`tests.chaos.proxy.RequestTap`), and the claim znodes (``ephemeralOwner``, ``czxid``) read by
the test's own session."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
from kazoo.client import KazooClient
from rebalanser.claimcheck import Rechecker, Verified
from rebalanser.claims import BATCH, IN_FLIGHT, ClaimBook, ClaimResult
from rebalanser.containers import ensure_group
from rebalanser.options import Options
from rebalanser.paths import GroupPaths
from rebalanser.session import handshakes, make_client, session_timeout

from tests.chaos.proxy import FaultProxy, RequestTap

CLAIMS = 2 * BATCH + 7  # three batches, the last a short one
WAIT = 20.0  # seconds: a bound on every wait, never reached when the code works


@dataclass
class Member:
    """A member's session behind its own proxy, and its claim book wired as the member wires it:
    claims verified per connection, numbered by the session's handshakes."""

    zk: KazooClient
    proxy: FaultProxy
    book: ClaimBook
    lost: list[tuple[str, int]]
    reported: threading.Event

    def tapped(self) -> RequestTap:
        tap = RequestTap()
        self.proxy.tap(tap)
        return tap


@pytest.fixture
def member(zk_hosts: str, group_path: str) -> Iterator[Member]:
    proxy = FaultProxy(zk_hosts.split(","))
    zk = make_client(Options(proxy.hosts, group_path, session_timeout=10.0))
    zk.start(timeout=15)
    paths = GroupPaths.of(group_path)
    assert ensure_group(zk, paths, create_root=True)
    node = zk.create(f"{paths.clients}/m0-", b"", ephemeral=True, sequence=True)
    shakes = handshakes(zk)
    book = ClaimBook(zk, paths, "m0", verified=Verified(lambda: shakes.connection))
    book.reset(zk.client_id[0], node)
    lost: list[tuple[str, int]] = []
    reported = threading.Event()

    def on_lost(resource: str, token: int) -> None:
        lost.append((resource, token))
        reported.set()

    book.on_lost = on_lost
    try:
        yield Member(zk, proxy, book, lost, reported)
    finally:
        proxy.tap(None)
        proxy.close()
        zk.stop()
        zk.close()


def names(count: int) -> list[str]:
    return [f"r{i:05d}" for i in range(count)]


def claim_of(zk: KazooClient, paths: GroupPaths, resource: str) -> tuple[int, int] | None:
    """(ephemeralOwner, czxid) of the claim on ``resource``, read by the test's session."""
    stat = zk.exists(paths.owner(resource))
    return None if stat is None else (int(stat.ephemeralOwner), int(stat.czxid))


def test_a_re_take_of_claims_verified_on_the_current_connection_sends_no_request(member: Member) -> None:
    """Before: one ``getEphemerals`` listing every claim of the session (12-23 ms for 5,000)."""
    resources = names(CLAIMS)
    first = member.book.claim(resources)
    assert len(first.claimed) == CLAIMS
    tap = member.tapped()
    again = member.book.claim(resources)
    assert again.claimed == first.claimed and not again.blocked
    assert tap.seen == [], f"a re-take of {CLAIMS} verified claims sent requests: {tap.seen}"


def test_a_claim_whose_deletion_was_reported_is_read_not_re_taken(
    member: Member, zk: KazooClient, group_path: str
) -> None:
    """A claim deleted from outside on a live connection: its watch fired, so a re-take reads it (it is
    claimed again, with a new token); the claims still verified are re-taken as they are."""
    paths = GroupPaths.of(group_path)
    resources = names(CLAIMS)
    first = member.book.claim(resources).claimed
    gone = resources[BATCH + 3]
    zk.delete(paths.owner(gone))
    assert member.reported.wait(WAIT), "the deletion of a held claim was not reported"
    assert member.lost == [(gone, first[gone])]
    tap = member.tapped()
    again = member.book.claim(resources).claimed
    assert "getEphemerals" in tap.seen, f"the reported claim was not read: {tap.seen}"
    assert again[gone] > first[gone], "the deleted claim was re-taken with its old token"
    assert claim_of(zk, paths, gone) == (member.zk.client_id[0], again[gone])
    assert {r: t for r, t in again.items() if r != gone} == {r: t for r, t in first.items() if r != gone}


def test_a_release_of_claims_verified_on_the_current_connection_sends_only_its_deletes(
    member: Member, zk: KazooClient, group_path: str
) -> None:
    """Before: one ``getEphemerals`` listing every claim of the session, then the deletes (a loser's
    release at N = 50 waited for that round trip before its multi)."""
    paths = GroupPaths.of(group_path)
    resources = names(CLAIMS)
    assert len(member.book.claim(resources).claimed) == CLAIMS
    tap = member.tapped()
    member.book.release(resources)
    assert tap.seen == ["multi"] * 3, f"a release of {CLAIMS} verified claims sent: {tap.seen}"
    assert [claim_of(zk, paths, r) for r in resources] == [None] * CLAIMS
    assert not member.book.held and not member.book.uncertain


def test_a_claim_whose_deletion_was_reported_is_read_before_its_release(
    member: Member, zk: KazooClient, zk_hosts: str, group_path: str
) -> None:
    """Someone else deleted our claim and another session claimed the resource: the deletion was
    reported (the watch fired), so the release reads what is there and leaves the other's claim; the
    claims still verified are deleted without a read."""
    paths = GroupPaths.of(group_path)
    resources = names(CLAIMS)
    member.book.claim(resources)
    gone = resources[BATCH + 3]
    zk.delete(paths.owner(gone))
    assert member.reported.wait(WAIT), "the deletion of a held claim was not reported"
    other = KazooClient(hosts=zk_hosts, timeout=15)
    other.start(timeout=15)
    try:
        other.create(paths.owner(gone), b"", ephemeral=True)
        tap = member.tapped()
        member.book.release(resources)
        assert tap.seen == ["getEphemerals", "multi", "multi", "multi"], f"the release sent: {tap.seen}"
        held = claim_of(zk, paths, gone)
        assert held is not None and held[0] == other.client_id[0], "another session's claim was deleted"
    finally:
        other.stop()
        other.close()
    assert [claim_of(zk, paths, r) for r in resources if r != gone] == [None] * (CLAIMS - 1)
    assert not member.book.held and not member.book.uncertain


@pytest.mark.parametrize("recheck", [False, True], ids=["loop-only", "with-recheck"])
def test_a_claim_deleted_while_the_member_was_disconnected_is_read_after_the_reconnection(
    member: Member, zk: KazooClient, group_path: str, recheck: bool
) -> None:
    """kazoo drops every watch with the connection: a claim deleted meanwhile is reported by nobody.
    After the reconnection no claim is verified until read again (by the re-check of
    :mod:`rebalanser.claimcheck`, or by the re-take itself): the deleted one is claimed again with a
    new token, never re-taken blindly with its old one."""
    paths = GroupPaths.of(group_path)
    resources = names(CLAIMS)
    first = member.book.claim(resources).claimed
    rechecker = Rechecker(member.zk, member.book, lambda: session_timeout(member.zk)) if recheck else None
    if rechecker is not None:
        member.zk.add_listener(rechecker.on_state)
        rechecker.start()
    try:
        shakes = handshakes(member.zk)
        before = shakes.connection
        member.proxy.blackhole()  # new connections hang until restored
        member.proxy.cut()
        gone = resources[7]
        zk.delete(paths.owner(gone))  # while the member is away: its watch is gone with the connection
        member.proxy.restore()
        latest = shakes.wait_newer(before, WAIT)
        assert latest is not None and latest.connection > before, "the member did not reconnect"
        assert latest.session_id == member.zk.client_id[0], "the session expired: the scene needs it alive"
        if rechecker is not None:
            assert member.reported.wait(WAIT), "the re-check did not report the claim deleted while away"
        tap = member.tapped()
        again = member.book.claim(resources).claimed
        assert again[gone] > first[gone], "the claim deleted while away was re-taken with its old token"
        assert claim_of(zk, paths, gone) == (member.zk.client_id[0], again[gone])
        assert tap.seen[:1] == ["getEphemerals"], f"the re-take after the reconnection read nothing: {tap.seen}"
        assert {r: t for r, t in again.items() if r != gone} == {r: t for r, t in first.items() if r != gone}
    finally:
        if rechecker is not None:
            member.zk.remove_listener(rechecker.on_state)
            rechecker.stop()


def wait_until(done: Callable[[], bool], timeout: float, message: Callable[[], str]) -> None:
    """Polls ``done`` (what it watches, the proxy's count of requests, has no event) within ``timeout``."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(message())
        time.sleep(0.01)


def test_a_claim_round_sends_several_batches_before_the_first_is_answered(
    member: Member, zk: KazooClient, group_path: str
) -> None:
    """Before: one ``multi`` per round trip (a member's 2,000 claims at a cold start waited four round
    trips in turn). The server hears the member but answers nothing until the proxy lets it: the
    batches the member sent by then were all in flight at once."""
    paths = GroupPaths.of(group_path)
    resources = names(IN_FLIGHT * BATCH + 3)
    tap = member.tapped()
    member.proxy.stall_replies()
    outcome: list[ClaimResult] = []
    claiming = threading.Thread(target=lambda: outcome.append(member.book.claim(resources)), daemon=True)
    claiming.start()
    try:
        wait_until(lambda: tap.seen.count("multi") >= IN_FLIGHT, 5.0,
                   lambda: f"{IN_FLIGHT} claim transactions were not in flight at once: {tap.seen}")
        assert tap.seen.count("multi") == IN_FLIGHT, f"more than {IN_FLIGHT} in flight: {tap.seen}"
    finally:
        member.proxy.restore()
        claiming.join(WAIT)
    assert not claiming.is_alive(), "the claim round did not end"
    assert len(outcome[0].claimed) == len(resources) and not outcome[0].blocked
    assert tap.seen.count("multi") == IN_FLIGHT + 1, f"one transaction per batch, each sent once: {tap.seen}"
    assert sorted(zk.get_children(paths.owners)) == resources, "each resource claimed once"
    owner = claim_of(zk, paths, resources[-1])
    assert owner is not None and owner[0] == member.zk.client_id[0]
