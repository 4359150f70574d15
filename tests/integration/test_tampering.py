"""Membership under faults and administrators' actions: reconnects that keep the session, groups and
resource lists deleted and re-created, fake persistent members and claims, duplicate member ids.

Safety is judged from the workers' JSON event streams (overlapping ticks, token order); the library's
own view is used only where a test is about that view (``owns``, ``start``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from rebalanser.client import Client
from rebalanser.errors import DuplicateMemberError
from rebalanser.options import Options
from rebalanser_operator.apply.reconcile import OwnerMarker, delete_group

from tests.chaos.proxy import FaultProxy
from tests.integration.conftest import add_resources
from tests.support.invariants import overlaps, token_regressions
from tests.support.recorder import Recorder
from tests.support.workers import Group, Worker, wait_for
from tests.support.zk import purge

RESOURCES = {f"r{i:02d}" for i in range(8)}
FAKE_GUID = "0" * 32


@pytest.fixture
def rb_group(zk_hosts: str, group_path: str, tmp_path: Path) -> Iterator[Group]:
    g = Group(zk_hosts, group_path, tmp_path)
    try:
        yield g
    finally:
        g.stop_all()



def in_process(hosts: str, group: str, member: str, **options: object) -> tuple[Client, Recorder]:
    handler = Recorder()
    settings: dict[str, object] = {"session_timeout": 2, "min_interval": 0.1, **options}
    return Client(Options(hosts, group, member_id=member, create_group=True, **settings), handler), handler  # type: ignore[arg-type]


def revoked_since(worker: Worker, ts: int) -> set[str]:
    return {r for e in worker.of("revoked") if e["ts"] >= ts for r in e["resources"]}


def test_a_group_deleted_and_recreated_after_a_reconnect_stops_the_old_owner(
    rb_group: Group, zk: KazooClient, proxy: FaultProxy
) -> None:
    """A brief cut keeps the session but drops every watch; an administrator then deletes and
    re-creates the group. The member must notice that its node and claims are gone, stop, rejoin."""
    add_resources(zk, rb_group.path, sorted(RESOURCES))
    first = rb_group.spawn("w0", hosts=proxy.hosts)
    wait_for(lambda: first.owned() == RESOURCES, 30, "w0 never took every resource")
    rb_group.spawn("w1")
    rb_group.wait_settled(RESOURCES, timeout=30)
    assert first.of("role")[-1]["role"] == "coordinator"
    held = first.owned()

    assert proxy.cut() >= 1
    wait_for(lambda: any(e["state"] == "reconnected" for e in first.of("session")), 15, "w0 never reconnected")
    time.sleep(1.0)  # the scenario: the administrator acts a while after the reconnect (not a synchronisation)
    assert [e["state"] for e in first.of("session")][-1] == "reconnected", "the cut must keep the session"

    deleted_at = time.monotonic_ns()
    purge(zk, rb_group.path)
    add_resources(zk, rb_group.path, sorted(RESOURCES))
    wait_for(lambda: held <= revoked_since(first, deleted_at), 15,
             lambda: f"w0 kept working on {sorted(held - revoked_since(first, deleted_at))} in a deleted group")
    rb_group.wait_settled(RESOURCES, timeout=30)
    assert first.alive and first.owned(), "w0 rejoined and works again"
    events = rb_group.events()
    assert overlaps(events) == []
    assert token_regressions(events) == []


def test_a_persistent_fake_member_does_not_stop_the_election(
    zk_hosts: str, zk: KazooClient, group_path: str
) -> None:
    add_resources(zk, group_path, ["a", "b"])
    fake = f"{group_path}/clients/{FAKE_GUID}-fake-0000000000"  # sorts before every real member
    zk.create(fake, b"", makepath=True)
    client, handler = in_process(zk_hosts, group_path, "m")
    client.start()
    try:
        wait_for(lambda: handler.owned == {"a", "b"}, 20,
                 lambda: f"owned {handler.owned}, role {client.role}: the fake member was taken for the coordinator")
        assert client.role == "coordinator"
        assert any(fake.rsplit("/", 1)[1] in str(e) for e in handler.errors), handler.errors
        assert zk.exists(fake) is not None, "a fake member is reported and ignored, never deleted by a member"
    finally:
        client.stop()


def test_a_persistent_fake_claim_is_reported_and_repaired(
    zk_hosts: str, zk: KazooClient, group_path: str
) -> None:
    add_resources(zk, group_path, ["a", "b"])
    zk.create(f"{group_path}/owners/a", b"", makepath=True)
    zk.create(f"{group_path}/owners/a/child", b"")  # garbage under a fake claim goes with it
    client, handler = in_process(zk_hosts, group_path, "m")
    client.start()
    try:
        wait_for(lambda: handler.owned == {"a", "b"}, 20,
                 lambda: f"owned {handler.owned}: a persistent G/owners/a blocks 'a' for good")
        stat = zk.exists(f"{group_path}/owners/a")
        assert stat is not None and stat.ephemeralOwner == client.zk.client_id[0]
        assert any("owners/a" in str(e) for e in handler.errors), handler.errors
    finally:
        client.stop()


def test_resources_deleted_and_recreated_are_assigned_again(
    zk_hosts: str, zk: KazooClient, group_path: str
) -> None:
    add_resources(zk, group_path, ["a", "b"])
    client, handler = in_process(zk_hosts, group_path, "m")
    client.start()
    try:
        wait_for(lambda: handler.owned == {"a", "b"}, 20, "never assigned")
        purge(zk, f"{group_path}/resources")
        wait_for(lambda: handler.owned == set(), 20, lambda: f"still working on deleted resources {handler.owned}")
        add_resources(zk, group_path, ["c", "d"])
        wait_for(lambda: handler.owned == {"c", "d"}, 20,
                 lambda: f"owned {handler.owned}: resources of a re-created list were never assigned")
    finally:
        client.stop()


def test_a_connection_loss_right_after_the_member_node_is_created_does_not_fail_start(
    zk_hosts: str, zk: KazooClient, group_path: str, proxy: FaultProxy
) -> None:
    add_resources(zk, group_path, ["a", "b"])
    first, first_handler = in_process(zk_hosts, group_path, "m0")
    first.start()
    second, handler = in_process(proxy.hosts, group_path, "m1")
    try:
        wait_for(lambda: first_handler.owned == {"a", "b"}, 20, "never assigned")
        # The first read after the member node exists (the barrier) loses its connection.
        trap = proxy.arm_trap({4}, deliver=False)
        second.start(timeout=20)
        assert trap.fired.is_set() and second.member_node is not None
        wait_for(lambda: len(handler.owned) == 1 and len(first_handler.owned) == 1, 20,
                 lambda: f"m0 {first_handler.owned}, m1 {handler.owned}")
    finally:
        second.stop()
        first.stop()


def test_a_second_live_member_with_the_same_id_exits_with_code_2(rb_group: Group, zk: KazooClient) -> None:
    add_resources(zk, rb_group.path, sorted(RESOURCES))
    rb_group.spawn("dup")
    rb_group.spawn("w1")
    rb_group.wait_settled(RESOURCES, timeout=30)
    original = rb_group.workers["dup"]
    duplicate = rb_group.spawn("dup")
    # Bounded by the wait for an earlier incarnation's session to expire (2T + 5 s), not by start()'s timeout.
    assert duplicate.wait(2 * rb_group.session_timeout + 20) == 2
    err = next(p for p in sorted(rb_group.log_dir.glob("dup.*.err")) if "another live member" in p.read_text())
    assert "uses id 'dup'" in err.read_text()
    assert original.alive and not duplicate.of("assigned")
    rb_group.retired.remove(original)  # the group's "dup" is the original again
    rb_group.retired.append(duplicate)
    rb_group.workers["dup"] = original
    rb_group.wait_settled(RESOURCES, timeout=10)
    assert overlaps(rb_group.events()) == []


def test_waiting_for_a_duplicate_id_arms_one_watch_and_then_fails_start(
    zk_hosts: str, zk: KazooClient, group_path: str
) -> None:
    add_resources(zk, group_path, ["a"])
    original, _ = in_process(zk_hosts, group_path, "dup")
    original.start()
    duplicate, handler = in_process(zk_hosts, group_path, "dup")
    failure: list[BaseException] = []

    def start() -> None:
        try:
            duplicate.start(timeout=60)
        except BaseException as exc:  # handed to the test thread
            failure.append(exc)

    starter = threading.Thread(target=start)
    starter.start()
    try:
        clients = f"{group_path}/clients"
        most = 0
        while starter.is_alive():
            opened = duplicate._loop._conn.opened
            zk_client = opened.zk if opened is not None else None
            if zk_client is not None:  # kazoo's own table of the callbacks it will call for this path
                most = max(most, len(zk_client._child_watchers.get(clients, ())))
            starter.join(0.2)
        assert most <= 1, f"{most} child watchers registered on {clients} while waiting"
        assert len(failure) == 1 and isinstance(failure[0], DuplicateMemberError), failure
        assert "another live member uses id 'dup'" in str(failure[0])
        assert duplicate.wait(5) and any(isinstance(e, DuplicateMemberError) for e in handler.errors)
    finally:
        starter.join(60)
        duplicate.stop()
        original.stop()


def test_deleting_a_group_under_live_workers_completes_and_it_stays_deleted(
    rb_group: Group, zk: KazooClient
) -> None:
    add_resources(zk, rb_group.path, sorted(RESOURCES))
    for member in ("w0", "w1"):
        rb_group.spawn(member)
    rb_group.wait_settled(RESOURCES, timeout=30)
    owner = OwnerMarker("tests", "tampering", "uid-1")
    zk.set(rb_group.path, owner.to_json())  # the operator deletes only a group it manages
    delete_group(zk, rb_group.path, owner)
    wait_for(lambda: all(not w.owned() for w in rb_group.live()), 15, "workers kept working on a deleted group")
    window_end = time.monotonic() + 2 * rb_group.session_timeout
    while time.monotonic() < window_end:  # an observation window: nobody may re-create the group
        assert zk.exists(rb_group.path) is None, f"re-created: {zk.get_children(rb_group.path)}"
        time.sleep(0.1)
    add_resources(zk, rb_group.path, sorted(RESOURCES))  # created again: the waiting workers rejoin
    rb_group.wait_settled(RESOURCES, timeout=30)
    assert overlaps(rb_group.events()) == []


class Gated(Recorder):
    """Holds the member in ``on_assigned`` until the test opens the gate."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.entered = threading.Event()

    def on_assigned(self, resources: Mapping[str, int]) -> None:
        self.entered.set()
        self.gate.wait(20)
        super().on_assigned(resources)


def test_reports_of_a_replaced_coordinator_instance_are_ignored(
    zk_hosts: str, zk: KazooClient, group_path: str
) -> None:
    """While the member is busy, its node is deleted (it will rejoin, with a new coordinator instance)
    and then the old instance is deposed. The old instance's report, handled after the rejoin, must not
    depose the new one: no extra role events, no extra epoch bump."""
    add_resources(zk, group_path, ["a"])
    handler = Gated()
    client = Client(Options(zk_hosts, group_path, member_id="m", create_group=True,
                            session_timeout=2, min_interval=0.1), handler)
    starter = threading.Thread(target=client.start)
    starter.start()
    try:
        assert handler.entered.wait(20), "never assigned"
        first_epoch = zk.exists(f"{group_path}/epoch").version
        zk.delete(f"{group_path}/clients/{client.member_node}")  # the member will rejoin
        zk.set(f"{group_path}/epoch", b"administrator")  # the running instance is deposed on its next write
        add_resources(zk, group_path, ["b"])  # ... which this makes it attempt
        time.sleep(1.5)  # the scenario: the old instance reports while the member is still busy
        handler.gate.set()
        wait_for(lambda: handler.owned == {"a", "b"} and client.role == "coordinator", 20,
                 lambda: f"owned {handler.owned}, role {client.role}")
        time.sleep(1.0)  # an observation window: later role changes would show here
        assert handler.roles == [("coordinator", first_epoch), ("coordinator", first_epoch + 2)], handler.roles
        assert zk.exists(f"{group_path}/epoch").version == first_epoch + 2
    finally:
        handler.gate.set()
        starter.join(30)
        client.stop()
