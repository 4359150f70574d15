"""Joining and following over the member's storage (:mod:`rebalanser.member_store`): each test body
runs twice, over the in-memory store (``tests/support/fake_member_store.py``) and over a real
ZooKeeper (:class:`~rebalanser.member_store.KazooMemberStore`, marked ``zk``). What the test does in
the coordinator's place (write an assignment, ``G/barrier``, a round's stop directory, ``G/epoch``)
goes through :class:`World`, the one part that differs."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any, Protocol

import pytest
from kazoo.client import KazooClient
from kazoo.protocol.states import WatchedEvent
from rebalanser import follow as fl
from rebalanser import follower as fw
from rebalanser import member_events as ev
from rebalanser import member_state as ms
from rebalanser import resource_work as rw
from rebalanser import wire
from rebalanser.callbacks import CallbackRunner
from rebalanser.handler import Handler
from rebalanser.joining import Joining
from rebalanser.lease import Lease
from rebalanser.member_store import Identity, KazooMemberStore, MemberStore
from rebalanser.metrics import NoMetrics
from rebalanser.paths import GroupPaths, MemberNode
from rebalanser.wire import BarrierRecord, MemberAssignment, Phase

from tests.support.fake_member_store import FakeMemberStore

ME = "m1"


class World(Protocol):
    store: MemberStore
    paths: GroupPaths

    def write_assignment(self, node: str, assignment: MemberAssignment) -> None: ...
    def write_barrier(self, record: BarrierRecord) -> None: ...
    def open_round(self, generation: int) -> None: ...
    def set_epoch(self, epoch: int) -> None: ...
    def exists(self, path: str) -> bool: ...


class FakeWorld:
    def __init__(self, paths: GroupPaths) -> None:
        self.paths = paths
        self.fake = FakeMemberStore(paths, ME)
        self.store: MemberStore = self.fake

    def write_assignment(self, node: str, assignment: MemberAssignment) -> None:
        self.fake.put(self.paths.member_assignment(node), assignment)

    def write_barrier(self, record: BarrierRecord) -> None:
        self.fake.put(self.paths.barrier, record)

    def open_round(self, generation: int) -> None:
        self.fake.put(self.paths.stopped_generation(generation), b"")

    def set_epoch(self, epoch: int) -> None:
        self.fake.epoch = epoch

    def exists(self, path: str) -> bool:
        return path in self.fake.nodes


class ZooKeeperWorld:
    def __init__(self, zk: KazooClient, paths: GroupPaths) -> None:
        self.zk, self.paths = zk, paths
        for container in paths.containers():
            zk.ensure_path(container)
        self.store: MemberStore = KazooMemberStore(zk, paths, Identity(ME))

    def write_assignment(self, node: str, assignment: MemberAssignment) -> None:
        blob = wire.encode_assignment(assignment)
        path = self.paths.member_assignment(node)
        for name, data in blob.chunks.items():
            self.zk.create(f"{path}/{name}", data, makepath=True)
        if self.zk.exists(path) is None:
            self.zk.create(path, blob.header, makepath=True)
        else:
            self.zk.set(path, blob.header)

    def write_barrier(self, record: BarrierRecord) -> None:
        data = wire.encode_barrier(record)
        if self.zk.exists(self.paths.barrier) is None:
            self.zk.create(self.paths.barrier, data)
        else:
            self.zk.set(self.paths.barrier, data)

    def open_round(self, generation: int) -> None:
        self.zk.ensure_path(self.paths.stopped_generation(generation))

    def set_epoch(self, epoch: int) -> None:
        self.zk.ensure_path(self.paths.epoch)
        while self.zk.exists(self.paths.epoch).version < epoch:
            self.zk.set(self.paths.epoch, b"")

    def exists(self, path: str) -> bool:
        return self.zk.exists(path) is not None


@pytest.fixture(params=["fake", pytest.param("zookeeper", marks=pytest.mark.zk)])
def world(request: pytest.FixtureRequest, group_path: str) -> Iterator[World]:
    paths = GroupPaths.of(group_path)
    if request.param == "fake":
        yield FakeWorld(paths)
    else:
        yield ZooKeeperWorld(request.getfixturevalue("zk"), paths)


class Posted:
    """The member's event queue, as the follower's watches see it (a watch fires on kazoo's thread)."""

    def __init__(self) -> None:
        self.events: list[ev.Event] = []
        self._changed = threading.Condition()

    def post(self, event: ev.Event) -> None:
        with self._changed:
            self.events.append(event)
            self._changed.notify_all()

    def wait_for(self, event: ev.Event, timeout: float = 10.0) -> None:
        with self._changed:
            if not self._changed.wait_for(lambda: event in self.events, timeout):
                raise AssertionError(f"{event} was never posted (posted: {self.events})")
            self.events.remove(event)


def joined(world: World) -> MemberNode:
    node = world.store.create_member_node(time.monotonic() + 10)
    assert node is not None and node.member_id == ME
    return node


def follower_of(world: World, node: MemberNode, posted: Posted) -> fw.Follower:
    follower = fw.Follower(lambda: world.store, posted.post, lambda: node)
    follower.new_node()
    return follower


def unreachable() -> Any:
    raise AssertionError("joining's creation of the node and standby's chores go through the store only")


def joining_of(world: World, posted: Posted) -> Joining:
    """Joining's I/O over ``world``'s store, with no claim book, roster or kazoo client behind it."""
    callbacks = CallbackRunner("test-callbacks")
    work = rw.ResourceWork(Handler(), NoMetrics(), Lease(0.8), callbacks, (1.0, 1.0), rw.Context(
        book=unreachable, prober=lambda: None, session_timeout=lambda: 4.0, seat=lambda: rw.Seat(None, 0),
        moved=threading.Event(), post=posted.post, report=unreachable))
    return Joining(world.paths, ME, zk=unreachable, store=lambda: world.store, roster=unreachable, post=posted.post,
                   callbacks=callbacks, work=work, stopped_for=lambda: None, timeout=lambda: 4.0)


def test_a_join_creates_the_member_node_and_standby_deletes_it_before_the_rejoin(world: World) -> None:
    joining = joining_of(world, Posted())
    member = replace(ms.start(False), session=7)  # the session the member's thread follows
    step = joining.execute(ms.CreateNode(7), member)
    assert step is not None
    member, effects = step
    node = member.node
    assert node is not None and node.member_id == ME and member.joined == 7
    assert ms.Joined(node, 7) in effects and world.exists(world.paths.client(node.name))
    member, effects = ms.step_aside(member, frozenset({"r"}))  # a stop callback overran: the member steps aside
    assert ms.StandbyChores(joining=False) in effects and member.node is None
    step = joining.execute(ms.StandbyChores(joining=False), member)
    assert step is not None
    member, effects = step
    assert not world.exists(world.paths.client(node.name)), "the node left on standby is still there"
    assert not world.exists(world.paths.session_record(node.name))
    assert ms.Notify("rejoining") in effects and not member.standby.aside


def test_joining_creates_a_watched_member_node_and_leaving_removes_all_it_left(world: World) -> None:
    node = joined(world)
    gone = threading.Event()

    def watch(event: WatchedEvent) -> None:
        gone.set()

    assert world.store.check_member_node(node.name, watch)
    assert world.exists(world.paths.session_record(node.name))
    world.open_round(3)
    assert world.store.create_stop_marker(3, node.name)
    world.write_assignment(node.name, MemberAssignment(1, 1, ("a",), member=node.name))
    world.store.leave(node.name, 3)
    assert gone.wait(10), "the member node's watch never fired"
    assert not world.store.check_member_node(node.name, watch)
    for path in (world.paths.client(node.name), world.paths.member_assignment(node.name),
                 world.paths.session_record(node.name), world.paths.stop_marker(3, node.name)):
        assert not world.exists(path), path


def test_following_an_assignment_applies_each_change_its_watch_reports(world: World) -> None:
    node, posted = joined(world), Posted()
    follower = follower_of(world, node, posted)
    assert follower.read_assignment(None) == []  # none yet: its watch is armed
    world.write_assignment(node.name, MemberAssignment(1, 1, ("a", "b"), member=node.name))
    posted.wait_for(ev.AssignmentChanged(node.name))
    assert follower.read_assignment(node.name) == [fl.Apply(("a", "b"), 1)]
    world.write_assignment(node.name, MemberAssignment(1, 2, ("b",), member=node.name))
    posted.wait_for(ev.AssignmentChanged(node.name))
    assert follower.moved.is_set()
    assert follower.read_assignment(node.name) == [fl.Apply(("b",), 2)]
    assert not follower.moved.is_set()
    assert follower.read_assignment("another-node") == []


def test_a_binding_stop_order_stops_work_then_marks_the_round(world: World) -> None:
    node, posted = joined(world), Posted()
    follower = follower_of(world, node, posted)
    world.set_epoch(1)
    assert follower.read_barrier() == []
    record = BarrierRecord(Phase.STOP, 2, epoch=1)
    world.write_barrier(record)
    posted.wait_for(ev.BarrierChanged())
    assert follower.read_barrier() == [fl.StopForBarrier(record)]
    assert follower.barrier_stop(record) == [fw.StopWork(), fw.MarkStopped(2)]
    world.open_round(2)
    follower.mark_stopped(2)
    assert world.exists(world.paths.stop_marker(2, node.name))
    assert follower.read_barrier() == []  # stopped for it once


def test_a_stop_order_of_another_epoch_binds_nobody_and_a_finished_round_takes_no_marker(world: World) -> None:
    node, posted = joined(world), Posted()
    follower = follower_of(world, node, posted)
    world.set_epoch(2)
    assert follower.barrier_stop(BarrierRecord(Phase.STOP, 4, epoch=1)) == []
    follower.mark_stopped(4)  # no G/stopped/g4: the round is over
    assert not world.exists(world.paths.stop_marker(4, node.name))
    assert follower.state.stopped_for == 4


def test_a_corrupt_barrier_is_reported_not_followed(zk: KazooClient, group_path: str) -> None:
    """Over ZooKeeper only: the fake keeps decoded values, so it has no bytes to corrupt."""
    world = ZooKeeperWorld(zk, GroupPaths.of(group_path))
    zk.create(world.paths.barrier, b"{not json")
    effects = follower_of(world, joined(world), Posted()).read_barrier()
    assert len(effects) == 1 and isinstance(effects[0], fw.ReportBadData)
