"""Releasing claims: one transaction fenced by the member node while it exists, never another
session's claim once it does not (an administrator deleted the group, another member claimed again).

Evidence: the claim znodes and their ``ephemeralOwner``, read by the test's own sessions."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss
from kazoo.interfaces import IAsyncResult
from kazoo.protocol.serialization import Transaction
from rebalanser.claims import ClaimBook
from rebalanser.containers import ensure_group
from rebalanser.paths import GroupPaths

from tests.support.claimbook import joined
from tests.support.zk import admin_client

RESOURCES = [f"r{i}" for i in range(5)]


@pytest.fixture
def member(zk_hosts: str) -> Iterator[KazooClient]:
    """The releasing member's own session."""
    with admin_client(zk_hosts) as client:
        yield client



def owner(zk: KazooClient, paths: GroupPaths, resource: str) -> int | None:
    stat = zk.exists(paths.owner(resource))
    return None if stat is None else int(stat.ephemeralOwner)


def test_a_joined_member_releases_its_claims(zk: KazooClient, member: KazooClient, group_path: str) -> None:
    paths = GroupPaths.of(group_path)
    book = joined(member, paths)
    assert sorted(book.claim(RESOURCES).claimed) == RESOURCES
    book.release(RESOURCES[:3])
    assert [owner(zk, paths, r) for r in RESOURCES] == [None] * 3 + [member.client_id[0]] * 2
    assert sorted(book.held) == RESOURCES[3:]


def test_a_claim_gone_from_under_the_member_does_not_stop_the_release_of_the_others(
    zk: KazooClient, member: KazooClient, group_path: str
) -> None:
    paths = GroupPaths.of(group_path)
    book = joined(member, paths)
    book.claim(RESOURCES)
    zk.delete(paths.owner("r1"))  # the fenced transaction fails as a whole: the careful path goes on
    book.release(RESOURCES)
    assert [owner(zk, paths, r) for r in RESOURCES] == [None] * 5
    assert not book.held


def test_after_the_group_was_deleted_another_members_claim_is_never_released(
    zk: KazooClient, member: KazooClient, zk_hosts: str, group_path: str
) -> None:
    """The administrator deletes the group (the member node with it) and re-creates it; another
    member claims the resources the first still lists as held. Releasing them must leave its claims."""
    paths = GroupPaths.of(group_path)
    book = joined(member, paths)
    book.claim(RESOURCES)
    zk.delete(group_path, recursive=True)
    with admin_client(zk_hosts) as other:
        assert ensure_group(other, paths, create_root=True)
        for resource in RESOURCES:
            other.create(paths.owner(resource), b"", ephemeral=True, makepath=True)
        book.release(RESOURCES)
        assert [owner(zk, paths, r) for r in RESOURCES] == [other.client_id[0]] * 5, "another's claim was deleted"
    assert not book.held


def test_a_claim_taken_over_after_someone_else_deleted_ours_is_never_released(
    zk: KazooClient, member: KazooClient, zk_hosts: str, group_path: str
) -> None:
    """An administrator (or the operator's failover) deletes our claim while our member node lives,
    and another member claims the resource: our release must leave that member's claim alone."""
    paths = GroupPaths.of(group_path)
    book = joined(member, paths)
    book.claim(RESOURCES)
    zk.delete(paths.owner("r2"))
    with admin_client(zk_hosts) as other:
        other.create(paths.owner("r2"), b"", ephemeral=True)
        book.release(RESOURCES)
        assert owner(zk, paths, "r2") == other.client_id[0], "another session's claim was deleted"
    assert [owner(zk, paths, r) for r in RESOURCES if r != "r2"] == [None] * 4
    assert not book.held


def test_a_remembered_claim_is_read_before_it_is_taken_again(
    zk: KazooClient, member: KazooClient, zk_hosts: str, group_path: str
) -> None:
    """Re-taking a claim (after a lease lapse, at a resync) reads it: one deleted by someone else and
    held by another session now is blocked, never reported as ours with its old token."""
    paths = GroupPaths.of(group_path)
    book = joined(member, paths)
    first = book.claim(RESOURCES).claimed
    zk.delete(paths.owner("r0"))
    zk.delete(paths.owner("r1"))
    with admin_client(zk_hosts) as other:
        other.create(paths.owner("r0"), b"", ephemeral=True)
        again = book.claim(RESOURCES)
        assert again.blocked == ["r0"]
        assert again.claimed["r1"] > first["r1"], "r1 was re-taken without a new claim"
        assert {r: again.claimed[r] for r in RESOURCES[2:]} == {r: first[r] for r in RESOURCES[2:]}
        assert owner(zk, paths, "r1") == member.client_id[0]


def test_the_deletion_of_a_held_claim_is_reported(
    zk: KazooClient, member: KazooClient, group_path: str
) -> None:
    """Every claim won is watched: its deletion by someone else is reported with its token."""
    paths = GroupPaths.of(group_path)
    book = joined(member, paths)
    lost: list[tuple[str, int]] = []
    reported = threading.Event()

    def on_lost(resource: str, token: int) -> None:
        lost.append((resource, token))
        reported.set()

    book.on_lost = on_lost
    tokens = book.claim(RESOURCES).claimed
    zk.delete(paths.owner("r3"))
    assert reported.wait(10), "the deletion of a held claim was not reported"
    assert lost == [("r3", tokens["r3"])]
    assert book.forget("r3", tokens["r3"]) and "r3" not in book.held


class _ReadsLostAfterCommit:
    """The member's own client, except that once a transaction has been applied, its next read fails
    with ConnectionLoss (as if the connection dropped right after the multi's reply, or, for reads
    sent with the transaction, right after the server applied it)."""

    def __init__(self, client: KazooClient) -> None:
        self._client = client
        self._armed = False

    def __getattr__(self, name: str) -> object:
        return getattr(self._client, name)

    def transaction(self) -> object:
        txn = self._client.transaction()
        commit = txn.commit

        def applied_then_armed() -> object:
            results = commit()
            self._armed = True
            return results

        def sent_then_armed() -> object:  # the claim round sends its reads before awaiting the reply
            pending = commit_async()
            pending.get()  # applied: the reads sent after it are the ones lost
            self._armed = True
            return pending

        commit_async = txn.commit_async
        txn.commit = applied_then_armed
        txn.commit_async = sent_then_armed
        return txn

    def _call(self, request: Any, async_object: Any) -> object:
        """A claim round's transaction, sent through kazoo's queue (rebalanser.claimtxn): armed once
        applied, as above."""
        sent = self._client._call(request, async_object)
        if request.type == Transaction.type:
            async_object.get()
            self._armed = True
        return sent

    def _lose(self) -> None:
        if self._armed:
            self._armed = False
            raise ConnectionLoss("injected: the connection dropped after the multi was applied")

    def exists(self, *args: object, **kwargs: object) -> object:
        self._lose()
        return self._client.exists(*args, **kwargs)

    def exists_async(self, *args: object, **kwargs: object) -> object:
        self._lose()
        return self._client.exists_async(*args, **kwargs)


def test_a_batch_whose_token_read_is_lost_is_not_leaked(
    zk: KazooClient, member: KazooClient, group_path: str
) -> None:
    """Issue 19, F: the claim batch is applied, then the read of its token fails (ConnectionLoss). Its
    claims must stay known as held or uncertain, so that the member's next release deletes them."""
    paths = GroupPaths.of(group_path)
    book = joined(member, paths)
    book.zk = _ReadsLostAfterCommit(member)  # type: ignore[assignment]
    with pytest.raises(ConnectionLoss):
        book.claim(RESOURCES)
    assert [owner(zk, paths, r) for r in RESOURCES] == [member.client_id[0]] * 5
    book.release(RESOURCES)
    assert [owner(zk, paths, r) for r in RESOURCES] == [None] * 5, "the batch leaked: its claims stay"
    assert not book.held and not book.uncertain


def test_joining_again_in_the_same_session_forgets_no_claim(
    zk: KazooClient, member: KazooClient, group_path: str
) -> None:
    """Issue 19, B: after an eviction or standby the member joins again in the same session, with a new
    member node. That session still holds the claims it could not release: they are released later,
    never forgotten (a new session's join forgets them: they ended with the old one)."""
    paths = GroupPaths.of(group_path)
    book = joined(member, paths)
    book.claim(RESOURCES)
    node = member.create(f"{paths.clients}/m0-", b"", ephemeral=True, sequence=True)
    book.reset(member.client_id[0], node)
    book.release(RESOURCES)
    assert [owner(zk, paths, r) for r in RESOURCES] == [None] * 5, "claims of the live session were forgotten"


class _FencedInBetween(ClaimBook):
    """A ClaimBook whose release is overtaken between its read and its delete: the operator's failover
    fences the session (deletes its member node), deletes its claim on r2, and another member claims r2
    (what a late release of a dead process meets)."""

    def __init__(self, *args: object, overtake: Callable[[], None], **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.overtake: Callable[[], None] | None = overtake

    def _send_deletes(self, mine: dict[str, int], fenced: bool) -> IAsyncResult:
        if self.overtake is not None:
            self.overtake, overtake = None, self.overtake
            overtake()
            return super()._send_deletes(mine, fenced)  # the late request itself
        raise AssertionError("a release sent after the fence: only the late request may reach the server")


def test_a_release_read_before_the_fence_changes_nothing_after_it(
    zk: KazooClient, member: KazooClient, zk_hosts: str, group_path: str
) -> None:
    """The release transaction checks the member node: once the failover has deleted it, a release
    of that session still on its way deletes no claim, not even the next owner's (all version 0)."""
    paths = GroupPaths.of(group_path)
    plain = joined(member, paths)
    plain.claim(RESOURCES)
    with admin_client(zk_hosts) as other:

        def failover() -> None:
            zk.delete(plain.member_path)
            zk.delete(paths.owner("r2"))
            other.create(paths.owner("r2"), b"", ephemeral=True)

        book = _FencedInBetween(member, paths, "m0", overtake=failover)
        book.session_id, book.member_path, book.held = plain.session_id, plain.member_path, dict(plain.held)
        with pytest.raises(AssertionError, match="after the fence"):
            book.release(["r2", "r3"])
        assert owner(zk, paths, "r2") == other.client_id[0], "the next owner's claim was deleted"
        assert owner(zk, paths, "r3") == member.client_id[0], "a fenced release deleted a claim"


def test_a_watch_fired_by_another_sessions_release_is_not_taken_for_our_claims_deletion(
    zk: KazooClient, member: KazooClient, zk_hosts: str, group_path: str
) -> None:
    """kazoo keeps one set of watchers per path: the watch armed on another session's claim (while
    ours was blocked) fires for that claim's release, even when it is delivered after we claimed the
    path ourselves. The member must read before it believes it lost the claim (it is still ours)."""
    paths = GroupPaths.of(group_path)
    book = joined(member, paths)
    reported: list[tuple[str, int]] = []
    came = threading.Event()

    def lost(resource: str, token: int) -> None:
        reported.append((resource, token))
        came.set()

    book.on_lost = lost
    with admin_client(zk_hosts) as other:
        other.create(paths.owner("r0"), b"", ephemeral=True, makepath=True)
        assert book.claim(["r0"]).blocked == ["r0"]  # its read armed our watcher on the other's claim
        gate, held_up = threading.Event(), threading.Event()

        def hold_up(_event: object) -> None:  # kazoo runs callbacks one at a time: the next ones wait
            held_up.set()
            gate.wait(10)

        member.exists(f"{group_path}/trigger", watch=hold_up)
        zk.create(f"{group_path}/trigger", b"")
        assert held_up.wait(10), "the trigger's notification never came"
        other.delete(paths.owner("r0"))  # its notification now waits behind hold_up
        token = book.claim(["r0"]).claimed["r0"]  # ours now, before the notification reaches our watcher
        gate.set()
        assert came.wait(10), "the release's notification never reached our watcher"
    assert reported == [("r0", token)], "the race this test builds did not happen"
    assert book.still_held("r0", token), "the claim is ours: the deletion reported was the other's"
    assert owner(zk, paths, "r0") == member.client_id[0]
