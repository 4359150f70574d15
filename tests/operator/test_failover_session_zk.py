"""Confirmed-death failover closes the dead member's session (issue 28 item 2): it never deletes a claim by
path, so a claim taken by a live member after the dead session ended survives the operator's run; it closes
only the session a record of that very session names."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.protocol.states import KeeperState
from kazoo.security import make_digest_acl
from rebalanser.instance import instance_digest, new_instance
from rebalanser.membership import create_member_node
from rebalanser.paths import GroupPaths
from rebalanser.wire import SessionRecord, decode_session, encode_session
from rebalanser_operator.failover import sessionclose
from rebalanser_operator.failover.choice import EndedInstance, PodRef
from rebalanser_operator.failover.endmember import Outcome, end_instances
from rebalanser_operator.failover.sessionclose import Closed, SessionCloser
from rebalanser_operator.podwatch import Failover
from rebalanser_operator.runtime import OperatorContext

from tests.operator.test_failover_fence_zk import (
    UID,
    claims,
    ctx,  # noqa: F401  (a fixture)
    dead_member,
    on_operator_client,
    pod_body,
    reconcile,
)
from tests.support.zk import admin_client

pytestmark = pytest.mark.zk

CLAIM_WRITES = ("transaction", "delete_async", "create_async")  # delete() and create() call these


def before_the_close(monkeypatch: pytest.MonkeyPatch, hook: Callable[[], None]) -> list[tuple[int, Closed]]:
    """Runs ``hook`` once, just before the operator's first close of a session; returns the closes' record."""
    real = SessionCloser.close
    done: list[tuple[int, Closed]] = []

    def close(self: SessionCloser, session_id: int, password: bytes) -> Closed:
        if not done:
            hook()
        outcome = real(self, session_id, password)
        done.append((session_id, outcome))
        return outcome

    monkeypatch.setattr(SessionCloser, "close", close)
    return done


def test_a_claim_taken_after_the_dead_session_ended_survives_the_failover(
    ctx: OperatorContext, zk: KazooClient, zk_hosts: str, group_path: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 28 item 2: the dead session ends (here: is closed) after the operator has read the member node
    and before it acts; a waiting member claims the resource at once. The operator's run then goes on: the
    waiting member's claim must survive (every claim has version 0, so a delete "at the version read" cannot
    tell the two claims apart). Failed on 4c5c8c2 with the hook at the operator's claim deletes."""
    groups = reconcile(ctx, zk_hosts, group_path)
    nonce = new_instance()
    paths = GroupPaths.of(group_path)
    with admin_client(zk_hosts) as dead, admin_client(zk_hosts) as waiting:
        dead_member(dead, group_path, nonce, ["r0"])
        taken: list[tuple[int, int]] = []

        def the_session_ends_and_r0_is_taken(*_: Any) -> None:
            if taken:
                return
            dead.stop()  # its claim goes with it, as at an expiry
            waiting.create(paths.owner("r0"), b"", ephemeral=True)
            taken.append(claims(zk, group_path)["r0"])

        writes: list[str] = []
        on_operator_client(monkeypatch, (dead, waiting, zk), CLAIM_WRITES, writes.append)
        closes = before_the_close(monkeypatch, the_session_ends_and_r0_is_taken)
        outcomes = asyncio.run(Failover(ctx).handle_pod(pod_body(nonce), groups))
        monkeypatch.undo()
        assert taken, "the operator's run never reached the point where it acts"
        now: Any = claims(zk, group_path).get("r0")
        assert now == taken[0], f"the waiting member's claim on r0 was deleted by the failover: {taken[0]} -> {now}"
        assert writes == [], f"the operator wrote in the group by path: {writes}"
        assert [c for _, c in closes] == [Closed.EXPIRED] and [o.outcome for o in outcomes] == [Outcome.ALREADY_ENDED]


def test_the_failover_closes_the_dead_session_and_nothing_else(
    ctx: OperatorContext, zk: KazooClient, zk_hosts: str, group_path: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The member node, claims and session record of the dead session go at once; the live member's stay;
    the operator sends no write of its own in the group."""
    groups = reconcile(ctx, zk_hosts, group_path)
    nonce = new_instance()
    paths = GroupPaths.of(group_path)
    with admin_client(zk_hosts) as dead, admin_client(zk_hosts) as alive:
        node = dead_member(dead, group_path, nonce, ["r0", "r1"])
        alive.create(paths.owner("r2"), b"", ephemeral=True)
        writes: list[str] = []
        on_operator_client(monkeypatch, (dead, alive, zk), CLAIM_WRITES, writes.append)
        outcomes = asyncio.run(Failover(ctx).handle_pod(pod_body(nonce), groups))
        monkeypatch.undo()
        assert [(o.member_node, o.outcome) for o in outcomes] == [(node.rsplit("/", 1)[1], Outcome.CLOSED)]
        assert writes == []
        assert zk.exists(node) is None and zk.exists(paths.session_record(node.rsplit("/", 1)[1])) is None
        assert claims(zk, group_path) == {"r2": claims(zk, group_path)["r2"]}
        assert claims(zk, group_path)["r2"][1] == alive.client_id[0]


def test_a_planted_session_record_is_refused(
    ctx: OperatorContext, zk: KazooClient, zk_hosts: str, group_path: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Someone who may write the group plants, under the dead member's record name, a record of another
    session (a victim's) before the member's own: the record is not an ephemeral node of the session it
    names, or not of the member's; the operator closes nothing and leaves the member to session expiry."""
    groups = reconcile(ctx, zk_hosts, group_path)
    paths = GroupPaths.of(group_path)
    with admin_client(zk_hosts) as dead, admin_client(zk_hosts) as victim, admin_client(zk_hosts) as planter:
        victim.create(paths.owner("r1"), b"", ephemeral=True)
        victim_id, victim_password = victim.client_id
        cases = {
            "owned by the planter, naming the victim": (planter, SessionRecord(victim_id, victim_password)),
            "owned by the victim, naming the victim": (victim, SessionRecord(victim_id, victim_password)),
        }
        for why, (owner, record) in cases.items():
            nonce = new_instance()
            node = dead_member(dead, group_path, nonce, ["r0"], record=False)
            name = node.rsplit("/", 1)[1]
            owner.create(paths.session_record(name), encode_session(record), ephemeral=True)
            closes = before_the_close(monkeypatch, lambda: None)
            outcomes = asyncio.run(Failover(ctx).handle_pod(pod_body(nonce), groups))
            monkeypatch.undo()
            assert [o.outcome for o in outcomes] == [Outcome.REFUSED], why
            assert closes == [], f"{why}: the operator closed {closes}"
            assert victim.connected and zk.exists(paths.owner("r1")) is not None, why
            assert zk.exists(node) is not None and "r0" in claims(zk, group_path), why
            dead.delete(node)
            dead.delete(paths.owner("r0"))


def test_a_member_without_a_session_record_is_left_to_session_expiry(
    ctx: OperatorContext, zk: KazooClient, zk_hosts: str, group_path: str,  # noqa: F811
) -> None:
    """A worker of a version before session records: the operator deletes nothing (never by path) and says so."""
    groups = reconcile(ctx, zk_hosts, group_path)
    nonce = new_instance()
    with admin_client(zk_hosts) as dead:
        node = dead_member(dead, group_path, nonce, ["r0"], record=False)
        outcomes = asyncio.run(Failover(ctx).handle_pod(pod_body(nonce), groups))
        assert [o.outcome for o in outcomes] == [Outcome.NO_RECORD]
        assert zk.exists(node) is not None and "r0" in claims(zk, group_path)
        assert dead.connected
        # An instance judged once is not read again at the pod's next event.
        assert asyncio.run(Failover(ctx).handle_pod(pod_body(nonce), groups))[0].outcome is Outcome.NO_RECORD


def test_an_expired_session_is_a_no_op_and_opens_no_other(zk: KazooClient, zk_hosts: str,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The attach to a session that has ended is answered "expired": nothing is closed, and the attaching
    client does not go on to open a fresh session (kazoo would, on the next server, left to itself)."""
    seen: list[list[KeeperState]] = []
    real = sessionclose._Attachment.__init__

    def recorded(self: Any, **kwargs: Any) -> None:
        real(self, **kwargs)
        seen.append(self.states)

    monkeypatch.setattr(sessionclose._Attachment, "__init__", recorded)
    with admin_client(zk_hosts) as dead:
        session, password = dead.client_id
    closer = SessionCloser.like(zk)
    closer = SessionCloser(closer.hosts * 3, closer.options, closer.auth)  # three "servers" to move on to
    assert closer.close(session, password) is Closed.EXPIRED
    assert len(seen) == 1 and KeeperState.CONNECTED not in seen[0], seen
    assert KeeperState.EXPIRED_SESSION in seen[0]


def test_the_session_record_is_readable_only_by_the_groups_identity(zk_hosts: str, group_path: str) -> None:
    """A group with digest credentials: the record names the group's identity, with READ only; the world
    (and another identity) cannot read it. Without credentials (the quick start) the world may read it."""
    paths = GroupPaths.of(group_path)
    with admin_client(zk_hosts, auth_data=[("digest", "grp:pw")],
                      default_acl=[make_digest_acl("grp", "pw", all=True)]) as member, \
            admin_client(zk_hosts) as world, admin_client(zk_hosts, auth_data=[("digest", "other:pw")]) as other:
        member.ensure_path(paths.sessions)
        member.ensure_path(paths.clients)
        node = create_member_node(member, paths, "w1", time.monotonic() + 10, pod_uid=UID)
        record = paths.session_record(node.name)
        acl, _ = member.get_acls(record)
        assert [(a.id.scheme, a.id.id.split(":")[0], a.perms) for a in acl] == [("digest", "grp", 1)]
        for outsider in (world, other):
            with pytest.raises(NoAuthError):
                outsider.get(record)
        data, stat = member.get(record)
        assert decode_session(data) == SessionRecord(*member.client_id) and stat.ephemeralOwner == member.client_id[0]
        member.delete(group_path, recursive=True)
    with admin_client(zk_hosts) as member:
        member.ensure_path(paths.root)  # G/clients and G/sessions are made by the join itself
        node = create_member_node(member, paths, "w1", time.monotonic() + 10, pod_uid=UID)
        acl, _ = member.get_acls(paths.session_record(node.name))
        assert [(a.id.scheme, a.id.id, a.perms) for a in acl] == [("world", "anyone", 1)]


def test_the_closer_attaches_as_the_groups_client_and_closes(zk: KazooClient, zk_hosts: str, group_path: str) -> None:
    """The library's join, then end_instances directly: the member's ephemeral nodes go in one close."""
    paths = GroupPaths.of(group_path)
    nonce = new_instance()
    with admin_client(zk_hosts) as member:
        for container in (paths.root, *paths.containers()[1:]):
            zk.ensure_path(container)
        node = create_member_node(member, paths, "w1", time.monotonic() + 10, pod_uid="uid-w1", pod="w-1",
                                  pod_namespace="shop", container="worker",
                                  instance_digest=instance_digest(nonce))
        member.create(paths.owner("r0"), b"", ephemeral=True)
        outcomes = end_instances(zk, group_path, PodRef("shop", "w-1", "uid-w1"), {EndedInstance("worker", nonce)},
                                 owned=lambda _: True)
        assert [o.outcome for o in outcomes] == [Outcome.CLOSED]
        assert zk.exists(paths.client(node.name)) is None and zk.exists(paths.owner("r0")) is None
        assert end_instances(zk, group_path, PodRef("shop", "w-1", "uid-w1"), {EndedInstance("worker", nonce)},
                             owned=lambda _: True) == []  # a re-run: nothing to do
