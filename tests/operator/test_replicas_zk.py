"""Operator replicas' membership and ownership (rebalanser_operator.replicas) against a real ZooKeeper:
two replicas in one process share ResourceGroups through the worker library, the one in office writes
the list behind the epoch fence, a revocation waits for the group to stop being served, and the
operator group carries the identity's ACL."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import Permissions
from rebalanser.paths import GroupPaths
from rebalanser_operator.identity import OperatorIdentity
from rebalanser_operator.metrics import Metrics
from rebalanser_operator.replicadeath import designated, end_dead_replicas
from rebalanser_operator.replicas import (
    RESOURCE_NAME_MAX,
    NotCreatedByOperator,
    Replicas,
    ReplicaSettings,
    resource_name,
)

from tests.support.relay import Relay
from tests.support.zk import admin_client, purge

pytestmark = pytest.mark.zk

GROUPS = [("shop", f"g{i}") for i in range(8)] + [("bank", "ledger")]


def wait_for(predicate: Callable[[], Any], timeout: float, what: Callable[[], str]) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s: {what()}")
        time.sleep(0.05)


def settings(hosts: str, group: str, member: str) -> ReplicaSettings:
    return ReplicaSettings(hosts=hosts, group=group, member_id=member, session_timeout=4.0, min_interval=0.2,
                           stop_timeout=10.0)


@pytest.fixture
def pair(zk_hosts: str, group_path: str) -> Iterator[tuple[Replicas, Replicas]]:
    started: list[Replicas] = []
    try:
        for member in ("op-a", "op-b"):
            replica = Replicas(settings(zk_hosts, group_path, member), metrics=Metrics())
            replica.start()
            started.append(replica)
        yield started[0], started[1]
    finally:
        for replica in started:
            replica.stop()


def office(pair: tuple[Replicas, Replicas]) -> Replicas:
    return wait_for(lambda: next((r for r in pair if r.in_office()), None), 20, lambda: "no replica took office")


def owners(pair: tuple[Replicas, Replicas]) -> dict[tuple[str, str], list[str]]:
    return {group: [r.member_id for r in pair if r.owns(*group)] for group in GROUPS}


def test_a_resource_name_is_a_function_of_the_two_names_and_fits() -> None:
    assert resource_name("shop", "orders") == "shop.orders"
    long = "x" * 253
    named = resource_name("n" * 63, long)
    assert len(named) <= RESOURCE_NAME_MAX and named == resource_name("n" * 63, long)
    assert named != resource_name("n" * 63, "x" * 252 + "y")


def test_a_replica_not_joined_is_not_ready(zk_hosts: str, group_path: str) -> None:
    replica = Replicas(settings(zk_hosts, group_path, "op-a"))
    assert replica.ready() == (False, "NotStarted none, 0 groups")


def test_without_an_operator_group_every_group_is_owned() -> None:
    single = Replicas.single()
    assert single.ready() == (True, "no operator group: every group")
    assert not single.enabled and single.owns("any", "group") and single.token("any", "group") == 0
    assert single.write_list(GROUPS) == (0, 0)
    single.start()
    single.stop()


def test_each_group_is_owned_by_exactly_one_replica_and_moves_when_one_leaves(
    pair: tuple[Replicas, Replicas], zk: KazooClient, group_path: str
) -> None:
    writer = office(pair)
    assert writer.write_list(GROUPS) == (len(GROUPS), 0)
    assert sorted(zk.get_children(GroupPaths.of(group_path).resources)) == sorted(resource_name(*g) for g in GROUPS)
    wait_for(lambda: all(len(o) == 1 for o in owners(pair).values()), 30, lambda: f"owners {owners(pair)}")
    shares = {r.member_id: len(r.owned()) for r in pair}
    assert sorted(shares.values()) == [4, 5], shares  # Resource Barrier shares 9 as evenly as it can
    for replica in pair:  # each replica's share, and which one keeps the list, in its metrics
        value = replica.metrics.registry.get_sample_value
        assert value("rebalanser_operator_replica_groups") == shares[replica.member_id]
        assert value("rebalanser_operator_replica_in_office") == (1 if replica is writer else 0)

    assert {r.describe() for r in pair} == {"Assigned coordinator, 4 groups", "Assigned follower, 5 groups"} or \
        {r.describe() for r in pair} == {"Assigned coordinator, 5 groups", "Assigned follower, 4 groups"}
    assert all(r.ready()[0] for r in pair)
    leaving, staying = pair
    leaving.stop()
    assert not leaving.ready()[0] and leaving.ready()[1].startswith("Stopped")
    wait_for(lambda: all(staying.owns(*g) for g in GROUPS), 30, lambda: f"owners {owners(pair)}")
    assert not any(leaving.owns(*g) for g in GROUPS)
    gone = leaving.metrics.registry.get_sample_value
    assert gone("rebalanser_operator_replica_groups") == 0
    assert gone("rebalanser_operator_replica_handovers_total", {"direction": "lost"}) == shares[leaving.member_id]
    wait_for(lambda: staying.metrics.registry.get_sample_value("rebalanser_operator_replica_groups") == len(GROUPS),
             10, lambda: "the staying replica's metric")


def test_the_list_follows_the_groups_and_only_the_replica_in_office_writes_it(
    pair: tuple[Replicas, Replicas], zk: KazooClient, group_path: str
) -> None:
    writer = office(pair)
    other = next(r for r in pair if r is not writer)
    assert other.write_list(GROUPS) == (0, 0)  # not in office: writes nothing
    assert zk.get_children(GroupPaths.of(group_path).resources) == []
    writer.write_list(GROUPS)
    assert writer.write_list(GROUPS[:-1]) == (0, 1)
    assert resource_name(*GROUPS[-1]) not in zk.get_children(GroupPaths.of(group_path).resources)


def test_a_deposed_writer_is_fenced_by_the_epoch(
    pair: tuple[Replicas, Replicas], zk: KazooClient, group_path: str
) -> None:
    writer = office(pair)
    zk.set(GroupPaths.of(group_path).epoch, b"taken")  # as a later coordinator's epoch would: version + 1
    # The writer still believes it is in office (until its watch fires): its write must fail as a whole.
    created, deleted = writer.write_list(GROUPS)
    assert (created, deleted) == (0, 0)
    assert zk.get_children(GroupPaths.of(group_path).resources) == []


def test_a_revocation_waits_until_the_group_stopped_being_served(
    pair: tuple[Replicas, Replicas], group_path: str
) -> None:
    first, second = pair
    office(pair).write_list(GROUPS[:1])
    group = GROUPS[0]
    holder = wait_for(lambda: next((r for r in pair if r.owns(*group)), None), 30, lambda: "nobody owns the group")
    woken = threading.Event()
    token = holder.token(*group)
    assert token is not None
    serving = holder.serving(*group, token, woken.set)
    assert serving is not None
    released = threading.Event()
    leaving = threading.Thread(target=lambda: (holder.stop(), released.set()), daemon=True)
    leaving.start()
    assert woken.wait(10), "the revocation did not wake the group's loop"
    assert not holder.owns(*group)
    time.sleep(0.5)  # the stop is held while the group is still served
    other = second if holder is first else first
    assert not other.owns(*group) and not released.is_set()
    serving.done()
    wait_for(lambda: other.owns(*group), 20, lambda: "the group did not move after it stopped")
    assert released.wait(10)


def test_a_revocation_lets_a_group_that_does_not_stop_go_within_the_librarys_wait(
    zk_hosts: str, group_path: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Groups whose loops do not stop (steps stuck under load) are let go before the library stops waiting
    for ``on_revoked`` (the same stop timeout): a callback that outlived it would put the member on standby
    and make it rejoin, another rebalance (at 3,000 groups on 3 replicas, one every minute or so)."""
    caplog.set_level(logging.INFO)

    def quick(member: str) -> ReplicaSettings:
        return ReplicaSettings(hosts=zk_hosts, group=group_path, member_id=member, session_timeout=4.0,
                               min_interval=0.2, stop_timeout=3.0)

    started: list[Replicas] = []
    try:
        first = Replicas(quick("op-a"), metrics=Metrics())
        first.start()
        started.append(first)
        wait_for(first.in_office, 20, lambda: "op-a did not take office")
        first.write_list(GROUPS)
        wait_for(lambda: all(first.owns(*g) for g in GROUPS), 30, lambda: f"op-a owns {first.owned()}")
        for group in GROUPS:  # every group served by a loop that never stops
            token = first.token(*group)
            assert token is not None and first.serving(*group, token, lambda: None) is not None
        second = Replicas(quick("op-b"), metrics=Metrics())
        second.start()
        started.append(second)
        let_go = lambda: [r.getMessage() for r in caplog.records if "op-a: let go of" in r.getMessage()]  # noqa: E731
        wait_for(let_go, 30, lambda: "op-a let nothing go")
        wait_for(lambda: second.owned() and first.describe().startswith("Assigned")
                 and len(first.owned()) + len(second.owned()) == len(GROUPS), 30,
                 lambda: f"op-a {first.describe()}, op-b {second.describe()}")
        overruns = [r.getMessage() for r in caplog.records
                    if "did not return within" in r.getMessage() or "on standby" in r.getMessage()]
        assert not overruns, overruns
    finally:
        for replica in started:
            replica.stop()


def test_a_group_lost_before_its_serving_was_registered_is_not_served(
    pair: tuple[Replicas, Replicas], group_path: str
) -> None:
    """The window between finding a group owned (``until_owned``) and registering its serving: a
    revocation in between finds nothing to wait for and lets the group go at once, so the registration
    that comes after it must be refused (else the old owner serves beside the new one)."""
    office(pair).write_list(GROUPS[:1])
    group = GROUPS[0]
    holder = wait_for(lambda: next((r for r in pair if r.owns(*group)), None), 30, lambda: "nobody owns the group")
    other = pair[1] if holder is pair[0] else pair[0]
    token = holder.token(*group)
    assert token is not None
    assert holder.serving(*group, token + 1, lambda: None) is None, "registered with a token it does not hold"
    holder.stop()  # the revocation: nothing registered, so nothing waited for
    wait_for(lambda: other.owns(*group), 20, lambda: "the group did not move")
    late = holder.serving(*group, token, lambda: None)
    assert late is None, "a serving registered after its group was let go"


def test_with_the_identity_the_operator_group_is_the_operators_alone(zk_hosts: str, zk: KazooClient) -> None:
    identity = OperatorIdentity.digest("rebalanser-operator", "a-long-random-password")
    parent = f"/rebalanser-operator-test-{uuid.uuid4().hex[:8]}"  # its parent is locked too: one of its own
    path = f"{parent}/ops"
    replica = Replicas(settings(zk_hosts, path, "op-a"), identity)
    replica.start()
    try:
        paths = GroupPaths.of(path)
        for node in (parent, paths.root, paths.resources, paths.owners, paths.clients):
            acl, _ = zk.get_acls(node)
            expected = [("digest", Permissions.ALL), ("world", Permissions.READ)]
            assert [(e.id.scheme, e.perms) for e in acl] == expected, (node, acl)
            assert acl[0].id.id.split(":")[0] == identity.username  # ZooKeeper shows the hash to nobody
        member = paths.client(zk.get_children(paths.clients)[0])
        with pytest.raises(NoAuthError):
            zk.get_acls(member)  # the library's nodes name the operator alone: nobody else even reads them
        with admin_client(zk_hosts, auth_data=[identity.auth]) as owner:  # type: ignore[list-item]
            acl, _ = owner.get_acls(member)
        assert [(e.id.scheme, e.id.id.split(":")[0]) for e in acl] == [("digest", identity.username)], acl
        with pytest.raises(NoAuthError):
            zk.create(paths.resource("planted"), b"")  # nobody else may write the list
    finally:
        replica.stop()
        with admin_client(zk_hosts, auth_data=[identity.auth]) as owner:  # type: ignore[list-item]
            purge(owner, parent)


def test_an_operator_group_someone_else_made_is_refused(zk_hosts: str, zk: KazooClient) -> None:
    """A squatter's operator group (open ACL, made before the operator) is not joined: its members and
    claims could be anybody's."""
    identity = OperatorIdentity.digest("rebalanser-operator", "a-long-random-password")
    parent = f"/rebalanser-operator-test-{uuid.uuid4().hex[:8]}"
    path = f"{parent}/ops"
    zk.ensure_path(f"{path}/owners")  # open, by a client without the identity
    replica = Replicas(settings(zk_hosts, path, "op-a"), identity)
    try:
        with pytest.raises(NotCreatedByOperator, match="someone else made it"):
            replica.start()
        assert zk.get_children(path) == ["owners"]  # nothing written into it, nobody joined
    finally:
        replica.stop()
        purge(zk, parent)


def test_one_replica_is_designated_to_end_a_dead_ones_membership(
    pair: tuple[Replicas, Replicas], zk: KazooClient, group_path: str
) -> None:
    assert [r.member_id for r in pair] == ["op-a", "op-b"]  # joined in this order: op-a is first in line
    assert designated(zk, group_path, dead="op-b", me="op-a") and not designated(zk, group_path, dead="op-b", me="op-b")
    assert designated(zk, group_path, dead="op-a", me="op-b") and not designated(zk, group_path, dead="op-a", me="op-a")
    assert designated(zk, group_path, dead="op-x", me="op-a") and not designated(zk, group_path, dead="op-x", me="op-b")


@pytest.mark.parametrize("with_identity", [False, True], ids=["open", "identity"])
def test_a_replica_whose_ended_instance_is_reported_loses_its_groups_at_once(
    zk_hosts: str, zk: KazooClient, tmp_path: Path, with_identity: bool
) -> None:
    """replicadeath.end_dead_replicas on a pod body as the kubelet writes it: the designated replica closes
    the dead one's session (T = 30 s here) and takes its groups; a report of another pod, or the same
    report again, ends nothing. With the identity, the session record only the operator may read."""
    logs = {member: tmp_path / f"{member}.termination-log" for member in ("op-a", "op-b")}
    identity = OperatorIdentity.digest("rebalanser-operator", "a-long-random-password") if with_identity else None
    parent = f"/rebalanser-operator-test-{uuid.uuid4().hex[:8]}"
    group_path = f"{parent}/ops"
    started: dict[str, Replicas] = {}
    try:
        for member in ("op-a", "op-b"):
            started[member] = Replicas(ReplicaSettings(
                hosts=zk_hosts, group=group_path, member_id=member, session_timeout=30.0, min_interval=0.2,
                pod=member, pod_uid=f"uid-{member}", pod_namespace="ops", container="operator",
                termination_log=str(logs[member])), identity, Metrics())
            started[member].start()
        dead, alive = started["op-a"], started["op-b"]
        office_of(started["op-a"], started["op-b"]).write_list(GROUPS)
        wait_for(lambda: len(dead.owned()) + len(alive.owned()) == len(GROUPS) and dead.owned(), 30,
                 lambda: f"shares {dead.owned()} {alive.owned()}")
        pod = {"metadata": {"namespace": "ops", "name": "op-a", "uid": "uid-op-a"},
               "status": {"containerStatuses": [{"name": "operator", "state": {"terminated": {
                   "exitCode": 137, "message": logs["op-a"].read_text()}}}]}}
        other = {**pod, "metadata": {**pod["metadata"], "uid": "uid-someone-else"}}
        done: dict[tuple[str, str], None] = {}
        assert end_dead_replicas(alive, other, done) == []
        assert end_dead_replicas(dead, pod, {}) == []  # not the designated one: the dead pod's own member
        share = len(dead.owned())

        def gained() -> float:
            return alive.metrics.registry.get_sample_value("rebalanser_operator_replica_handovers_total",
                                                           {"direction": "gained"}) or 0.0

        before = gained()
        started_at = time.monotonic()
        (ended,) = end_dead_replicas(alive, pod, done)
        assert ended.outcome.final, ended
        # (the in-process "dead" member then rejoins with a new session and may take some back: counted, not held)
        wait_for(lambda: gained() >= before + share, 20, lambda: f"the survivor gained {gained() - before} of {share}")
        assert time.monotonic() - started_at < 20  # under 1 s expected; the dead one's session is 30 s
        assert end_dead_replicas(alive, pod, done) == []  # handled once
    finally:
        for replica in started.values():
            replica.stop(timeout=5)
        with admin_client(zk_hosts, auth_data=[identity.auth] if identity else None) as owner:  # type: ignore[list-item]
            purge(owner, parent)


def office_of(*replicas: Replicas) -> Replicas:
    return office((replicas[0], replicas[1]))


def test_a_status_refresh_run_after_the_group_was_lost_writes_nothing(zk_hosts: str, group_path: str) -> None:
    """A replica frozen while a refresh of a group's status was queued or under way, thawed after the group
    moved: the refresh goes on (the controller's step, not the loop's turn), and its patch, computed from a
    session that expired meanwhile, must not be sent (the real cluster showed it sent, and accepted: the
    new owner had not stored its token yet). The loop asks whether the group is still its own right before
    the patch."""
    from rebalanser_operator.apply.actions import apply_spec
    from rebalanser_operator.replicaserve import ReplicaStatusLoop
    from rebalanser_operator.runtime import LoopOptions, OperatorContext

    from tests.operator.support import TEST_TENANCY, RecordingKube

    kube = RecordingKube()
    ctx = OperatorContext(tenancy=TEST_TENANCY, kube=kube, options=LoopOptions(connect_wait=2.0, period=2.0))
    try:
        rt = ctx.group("shop", "orders", uuid.uuid4().hex)
        apply_spec(ctx, rt, {"zookeeper": {"connect": zk_hosts, "path": group_path}, "resources": ["a", "b"]},
                   generation=1, body={"apiVersion": "rebalanser.io/v1alpha1", "kind": "ResourceGroup",
                                       "metadata": {"name": "orders"}})
        owned = [True]
        loop = ReplicaStatusLoop(ctx, rt, initial_status={}, replica="op-a", token=7, owned=lambda: owned[0])
        loop.refresh()
        assert kube.status.get("servedBy") == {"replica": "op-a", "token": 7} and loop.patches == 1, kube.status
        assert kube.status["members"] == 0
        with admin_client(zk_hosts) as zk:  # a member joins: the next refresh has something to say
            zk.create(f"{GroupPaths.of(group_path).clients}/{uuid.uuid4().hex}-m1-", ephemeral=True, sequence=True)
            owned[0] = False  # lost while that refresh was on its way
            loop.refresh()
            assert loop.patches == 1 and kube.status["members"] == 0, f"a refresh after the loss patched: " \
                                                                      f"{kube.patches[-1]}"
            owned[0] = True  # the same refresh while still owned does write it (the test can fail)
            loop.refresh()
            assert loop.patches == 2 and kube.status["members"] == 1, kube.status
    finally:
        ctx.close()


def test_a_replica_that_cannot_reach_the_operator_group_serves_nothing_and_says_so(
    zk_hosts: str, group_path: str
) -> None:
    """Issue 32, "What bad input gets": a replica cut from the operator group's ensemble (a relay held, like
    a silent partition) is not ready at once, with its member's state, and owns nothing once its lease has
    run out (every gate of the replica is ``owns``); the other replica serves every group; healed, it is
    ready again."""
    host, port = zk_hosts.split(",")[0].rsplit(":", 1)
    relay = Relay((host, int(port)))
    cut = Replicas(settings(relay.address, group_path, "op-a"), metrics=Metrics())
    other = Replicas(settings(zk_hosts, group_path, "op-b"), metrics=Metrics())
    try:
        cut.start()
        other.start()
        office_of(cut, other).write_list(GROUPS)
        wait_for(lambda: cut.owned() and other.owned() and all(len(o) == 1 for o in owners((cut, other)).values()),
                 30, lambda: f"owners {owners((cut, other))}")
        assert cut.ready()[0], cut.ready()
        relay.hold()
        held_at = time.monotonic()
        wait_for(lambda: not cut.ready()[0], 10, lambda: f"the cut replica still ready: {cut.ready()}")
        assert cut.ready()[1].startswith("Suspended"), cut.ready()
        wait_for(lambda: not any(cut.owns(*g) for g in GROUPS), 4.0 + 5, lambda: f"owners {owners((cut, other))}")
        serving_stopped = time.monotonic() - held_at
        wait_for(lambda: all(other.owns(*g) for g in GROUPS), 30, lambda: f"owners {owners((cut, other))}")
        assert not cut.ready()[0], cut.ready()
        relay.release()
        wait_for(lambda: cut.ready()[0], 30, lambda: f"the healed replica not ready: {cut.ready()}")
        print(f"\ncut replica: not ready, owns nothing {serving_stopped:.2f} s after the cut (T = 4 s)")
    finally:
        cut.stop(timeout=5)
        other.stop(timeout=5)
        relay.close()
