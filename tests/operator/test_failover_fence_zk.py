"""Confirmed-death failover against what a dead session may still do, and against stale reads (issue 19
C, D, E and K). The dead worker is a kazoo session that stops acting (its process is "dead", its session
is not expired yet); every check reads ZooKeeper itself."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NodeExistsError
from rebalanser.instance import new_instance, termination_record
from rebalanser.membership import session_companion
from rebalanser.paths import GroupPaths, member_prefix
from rebalanser.wire import MemberRecord, encode_member
from rebalanser.zk import create_protected, new_guid
from rebalanser_operator.apply.actions import apply_spec
from rebalanser_operator.failover.endmember import Outcome
from rebalanser_operator.failover.sessionclose import Closed, SessionCloser
from rebalanser_operator.podwatch import Failover, index_entry
from rebalanser_operator.runtime import LoopOptions, OperatorContext

from tests.operator.support import TEST_TENANCY, RecordingKube
from tests.support.partition import partitionable_ensemble
from tests.support.workers import wait_for
from tests.support.zk import admin_client

pytestmark = pytest.mark.zk

RESOURCES = ["r0", "r1", "r2"]
UID = "7d0c2f7e-0000-4000-8000-000000000001"


class Killed(Exception):
    """The operator process dies here."""


@pytest.fixture
def ctx() -> Iterator[OperatorContext]:
    context = OperatorContext(tenancy=TEST_TENANCY, kube=RecordingKube(), options=LoopOptions(connect_wait=10.0))
    yield context
    context.close()


def reconcile(ctx: OperatorContext, connect: str, path: str, namespace: str = "shop", name: str = "orders",
              uid: str = "uid-orders") -> Any:
    spec = {"zookeeper": {"connect": connect, "path": path, "sessionTimeoutSeconds": 10},
            "resources": RESOURCES, "failover": "KubeletConfirmed"}
    apply_spec(ctx, ctx.group(namespace, name, uid), spec, generation=1)
    entry = index_entry(namespace, name, spec)
    assert entry is not None
    return entry.values()


def dead_member(dead: KazooClient, path: str, nonce: str, claims: list[str], *, record: bool = True) -> str:
    """A worker's member node and claims, in its own session. The record is what both the old and the new
    operator read: the nonce (in clear, as member nodes written before the digest) and the pod's name and UID.
    With ``record``, the session record is created with the member node in one ``multi``, as the library does
    (without it: a worker of a version before session records)."""
    paths = GroupPaths.of(path)
    data = encode_member(MemberRecord("w1", time.time(), instance=nonce, pod="w-1", pod_uid=UID))
    prefix = member_prefix(new_guid(), "w1")
    dead.ensure_path(paths.sessions)
    companions = [session_companion(dead, paths, prefix)] if record else []
    name = create_protected(dead, paths.clients, prefix, data, deadline=time.monotonic() + 10, companions=companions)
    node = paths.client(name)
    for resource in claims:
        tx = dead.transaction()
        tx.check(node, -1)
        tx.create(paths.owner(resource), b"", ephemeral=True)
        assert not any(isinstance(r, Exception) for r in tx.commit())
    return node


def pod_body(nonce: str, namespace: str = "shop", uid: str = UID) -> dict[str, Any]:
    """What the kubelet reports once the worker's container instance has ended."""
    return {"metadata": {"name": "w-1", "namespace": namespace, "uid": uid},
            "status": {"containerStatuses": [{"name": "worker", "state": {"running": {}}, "lastState": {
                "terminated": {"exitCode": 137, "message": termination_record(nonce)}}}]}}


def claims(zk: KazooClient, path: str) -> dict[str, tuple[int, int]]:
    """resource -> (czxid, owning session) of every claim, read after a sync."""
    paths = GroupPaths.of(path)
    zk.sync(paths.owners)
    out = {}
    for name in zk.get_children(paths.owners):
        stat = zk.exists(paths.owner(name))
        if stat is not None:
            out[name] = (stat.czxid, stat.ephemeralOwner)
    return out


def on_operator_client(monkeypatch: pytest.MonkeyPatch, others: tuple[KazooClient, ...], names: tuple[str, ...],
                       before: Callable[[str], None]) -> None:
    """Calls ``before(method)`` ahead of each of ``names`` issued by any client but ``others`` (the operator's)."""
    for method in names:
        real = getattr(KazooClient, method)

        def wrapped(self: KazooClient, *args: Any, _real: Any = real, _method: str = method, **kwargs: Any) -> Any:
            if not any(self is other for other in others):
                before(_method)
            return _real(self, *args, **kwargs)

        monkeypatch.setattr(KazooClient, method, wrapped)


def test_a_late_request_of_the_dead_session_changes_nothing_after_an_interrupted_run(
    ctx: OperatorContext, zk: KazooClient, zk_hosts: str, group_path: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 19 D, with the session close of issue 28: the operator is killed just before it closes the dead
    session: it has changed nothing. Its next run (an operator restart) closes the session; then a request
    the dead process had sent before it died arrives (a release of a claim, and a claim). Neither may change
    anything: the session is closed, and its member node (which each such request checks) is gone with it.
    (Before issue 28 the run was killed after its first write, the fence: the delete of the member node.)"""
    groups = reconcile(ctx, zk_hosts, group_path)
    nonce = new_instance()
    paths = GroupPaths.of(group_path)
    with admin_client(zk_hosts) as dead, admin_client(zk_hosts) as alive:
        node = dead_member(dead, group_path, nonce, ["r0", "r1"])
        real_close = SessionCloser.close

        def killed(*_: Any) -> Closed:
            raise Killed("close")

        monkeypatch.setattr(SessionCloser, "close", killed)
        with pytest.raises(Killed):
            asyncio.run(Failover(ctx).handle_pod(pod_body(nonce), groups))
        assert zk.exists(node) is not None and set(claims(zk, group_path)) == {"r0", "r1"}, "a run changed things"
        monkeypatch.setattr(SessionCloser, "close", real_close)
        outcomes = asyncio.run(Failover(ctx).handle_pod(pod_body(nonce), groups))  # an operator restart
        assert [o.outcome for o in outcomes] == [Outcome.CLOSED]
        monkeypatch.undo()
        for resource in RESOURCES:  # the live member takes whatever is free
            try:
                alive.create(paths.owner(resource), b"", ephemeral=True)
            except NodeExistsError:
                pass
        before = claims(zk, group_path)
        # The dead process's last requests, each fenced by its member node as the library sends them.
        release = dead.transaction()
        release.check(node, -1)
        release.delete(paths.owner("r0"))
        late_claim = dead.transaction()
        late_claim.check(node, -1)
        late_claim.create(paths.owner("r9"), b"", ephemeral=True)
        for late in (release, late_claim):
            with contextlib.suppress(KazooException):  # the session is closed: kazoo may say so
                late.commit()
        after = claims(zk, group_path)
        assert after == before, f"a late request of the dead session changed the claims: {before} -> {after}"
        assert zk.exists(node) is None, "the session's close took its member node"
        assert asyncio.run(Failover(ctx).handle_pod(pod_body(nonce), groups)) == []  # handled: skipped
        assert set(claims(zk, group_path)) == set(RESOURCES)
        assert {owner for _, owner in claims(zk, group_path).values()} == {alive.client_id[0]}


def test_a_stale_scan_is_not_what_a_member_finds_ended(ctx: OperatorContext, zk: KazooClient, zk_hosts: str,
                                                        group_path: str) -> None:
    """Issue 19 K: a scan that finds no member node (here: not yet there) does not mark the nonce handled."""
    groups = reconcile(ctx, zk_hosts, group_path)
    nonce = new_instance()
    failover = Failover(ctx)
    with admin_client(zk_hosts) as dead:
        assert asyncio.run(failover.handle_pod(pod_body(nonce), groups)) == []
        node = dead_member(dead, group_path, nonce, ["r0"])
        outcomes = asyncio.run(failover.handle_pod(pod_body(nonce), groups))
        assert [o.member_node for o in outcomes] == [node.rsplit("/", 1)[1]]
        assert zk.exists(node) is None and "r0" not in claims(zk, group_path)


def test_a_group_in_another_namespace_cannot_aim_the_failover_at_a_victim(
    ctx: OperatorContext, zk: KazooClient, zk_hosts: str, group_path: str,
) -> None:
    """Issue 19 E / issue 20 item 3: a ResourceGroup in another namespace names the victim's path (it is
    refused: PathInUse) and a pod of the victim's pod name reports the victim's nonce. Nothing is ended."""
    reconcile(ctx, zk_hosts, group_path)  # the victim's group, owned by shop/orders
    with pytest.raises(Exception):  # noqa: B017  (RetryLater: the path is another group's)
        reconcile(ctx, zk_hosts, group_path, namespace="attacker", name="orders", uid="uid-attacker")
    spec = {"zookeeper": {"connect": zk_hosts, "path": group_path}, "failover": "KubeletConfirmed"}
    entry = index_entry("attacker", "orders", spec)
    assert entry is not None
    nonce = new_instance()
    with admin_client(zk_hosts) as victim:
        node = dead_member(victim, group_path, nonce, ["r0"])
        forged = pod_body(nonce, namespace="attacker", uid="uid-of-the-attackers-pod")
        assert asyncio.run(Failover(ctx).handle_pod(forged, entry.values())) == []
        assert zk.exists(node) is not None and "r0" in claims(zk, group_path)
        # The attacker's group reconciled at a path of its own, then the spec names the victim's path: the
        # runtime holds that path before the reconcile finds it taken. Even the victim's own pod report
        # ends nothing through the attacker's group: the failover checks the marker in ZooKeeper.
        groups = reconcile(ctx, zk_hosts, f"{group_path}-attacker", namespace="attacker", uid="uid-attacker")
        attacker = ctx.group("attacker", "orders", "uid-attacker")
        attacker.applied = replace(attacker.applied, path=group_path)
        assert asyncio.run(Failover(ctx).handle_pod(pod_body(nonce, namespace="attacker"), groups)) == []
        assert zk.exists(node) is not None and "r0" in claims(zk, group_path)
    zk.delete(f"{group_path}-attacker", recursive=True)


def run_while_isolated(ensemble: Any, ctx: OperatorContext, body: dict[str, Any], groups: Any,
                       monkeypatch: pytest.MonkeyPatch, others: tuple[KazooClient, ...]) -> list[Any]:
    """Runs the failover for ``body`` with its follower cut off; heals the cut once the run has sent a request
    that needs the leader (a sync or a write), or has finished without one."""
    needs_leader = threading.Event()
    on_operator_client(monkeypatch, others, ("sync", "sync_async", "transaction", "delete_async"),
                       lambda _: needs_leader.set())
    try:
        with ThreadPoolExecutor(1) as pool:
            run = pool.submit(asyncio.run, Failover(ctx).handle_pod(body, groups))
            wait_for(lambda: needs_leader.is_set() or run.done(), 60,
                     "the failover neither finished nor sent a request that needs the leader")
            ensemble.heal()
            return list(run.result(timeout=60))
    finally:
        monkeypatch.undo()


@pytest.mark.ensemble
def test_the_failover_reads_what_the_leader_committed(ctx: OperatorContext, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 19 C: the operator's session is on a follower cut from the leader (for less than syncLimit x
    tickTime, so it stays a follower).

    1. The dead worker released r1 just before it died and a live member claimed it; the follower still shows
       r1 owned by the dead session. The live member's claim survives; the dead session's r0 goes.
    2. Another worker joined and died while the follower was cut off: the follower does not show its member
       node yet. The failover still finds and ends it."""
    with partitionable_ensemble(tmp_path, tick_ms=500, sync_limit=20) as ensemble:
        leader, (follower, _) = ensemble.leader(), ensemble.followers()
        path = "/rebalanser-test/c"
        groups = reconcile(ctx, follower.address, path)
        paths = GroupPaths.of(path)
        nonce, later = new_instance(), new_instance()
        with admin_client(leader.address) as dead, admin_client(leader.address) as alive, \
                admin_client(leader.address) as dead_later, admin_client(leader.address) as admin:
            others = (dead, alive, dead_later, admin)
            node = dead_member(dead, path, nonce, ["r0", "r1"])
            with admin_client(follower.address) as probe:
                probe.sync("/")
                assert probe.exists(paths.owner("r1")) is not None
            ensemble.isolate(follower.myid)
            release = dead.transaction()
            release.check(node, -1)
            release.delete(paths.owner("r1"))
            release.commit()
            alive.create(paths.owner("r1"), b"", ephemeral=True)
            taken = claims(admin, path)["r1"]
            outcomes = run_while_isolated(ensemble, ctx, pod_body(nonce), groups, monkeypatch, others)
            assert [o.member_node for o in outcomes] == [node.rsplit("/", 1)[1]]
            now = claims(admin, path)
            assert now.get("r1") == taken, f"the live member's claim on r1 was deleted: {taken} -> {now.get('r1')}"
            assert "r0" not in now and admin.exists(node) is None

            ensemble.isolate(follower.myid)
            late_node = dead_member(dead_later, path, later, ["r2"])
            outcomes = run_while_isolated(ensemble, ctx, pod_body(later), groups, monkeypatch, others)
            assert [o.member_node for o in outcomes] == [late_node.rsplit("/", 1)[1]], "a stale scan missed it"
            assert admin.exists(late_node) is None and "r2" not in claims(admin, path)
