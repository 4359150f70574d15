"""Coordinator writes that were not fenced (issue 19, I and J): a deposed coordinator's deletes of
stale assignment chunks, and a coordinator stopped in the middle of a Global Barrier round.

Evidence: the znodes as the test's own session reads them."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from kazoo.client import KazooClient
from rebalanser import wire
from rebalanser.client import Client
from rebalanser.config import Algorithm
from rebalanser.errors import NotCoordinatorError
from rebalanser.handler import Handler
from rebalanser.options import Options
from rebalanser.paths import GroupPaths
from rebalanser.wire import Phase

from tests.integration.conftest import add_resources
from tests.support.recorder import Recorder
from tests.support.workers import wait_for


def options(hosts: str, group: str, member: str, **kw: Any) -> Options:
    return Options(hosts, group, member_id=member, create_group=True, session_timeout=2, min_interval=0.1, **kw)


def test_a_deposed_coordinator_deletes_no_stale_chunk(zk_hosts: str, zk: KazooClient, group_path: str) -> None:
    """Chunk names follow their content: a successor may write a header naming a chunk of the same
    name as one its deposed predecessor is about to drop as stale. That delete must fail whole."""
    add_resources(zk, group_path, ["a"])
    recorder = Recorder()
    client = Client(options(zk_hosts, group_path, "m0"), recorder)
    client.start()
    try:
        wait_for(lambda: recorder.owned == {"a"}, 15, "never assigned")
        coordinator: Any = client._coordinator
        assert coordinator is not None and client.role == "coordinator"
        coordinator.stop(wait=True)  # its thread ends; the object keeps its epoch
        paths = GroupPaths.of(group_path)
        chunk = f"{paths.assignment}/successor-node/p-0123456789abcdef"
        zk.create(chunk, b"a successor's chunk", makepath=True)
        zk.set(paths.epoch, b"")  # a successor took office: the epoch moved on
        with pytest.raises(NotCoordinatorError):
            coordinator._store.drop_chunks(["successor-node/p-0123456789abcdef"])
        assert zk.exists(chunk) is not None, "a deposed coordinator deleted a chunk"
    finally:
        client.stop()


class HoldsStop(Handler):
    """``on_revoked`` blocks until released: this member's stop marker waits for it."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.stopping = threading.Event()
        self.owned: set[str] = set()

    def on_assigned(self, resources: Mapping[str, int]) -> None:
        self.owned |= set(resources)

    def on_revoked(self, resources: Sequence[str]) -> None:
        self.stopping.set()
        self.release.wait(60)
        self.owned -= set(resources)


def test_a_coordinator_stopped_in_the_middle_of_a_global_barrier_round_abandons_it(
    zk_hosts: str, zk: KazooClient, group_path: str
) -> None:
    """The round waits for m1's stop marker when its coordinator is stopped (it steps aside, leaves,
    loses office). It must not go on and write the round's assignments as if every member had
    stopped: the stop order stands, for the next coordinator to end."""
    paths = GroupPaths.of(group_path)
    add_resources(zk, group_path, ["a", "b", "c", "d"])
    gb = {"algorithm": Algorithm.GLOBAL_BARRIER, "barrier_timeout": 60.0, "stop_timeout": 60.0}
    first, held = Recorder(), HoldsStop()
    clients = {"m0": Client(options(zk_hosts, group_path, "m0", **gb), first)}
    clients["m0"].start()
    try:
        wait_for(lambda: first.owned == {"a", "b", "c", "d"}, 15, "m0 never got everything")
        clients["m1"] = Client(options(zk_hosts, group_path, "m1", **gb), held)
        clients["m1"].start()
        wait_for(lambda: len(first.owned) == 2 and len(held.owned) == 2, 15,
                 lambda: f"not balanced: {first.owned} {held.owned}")
        clients["m2"] = Client(options(zk_hosts, group_path, "m2", **gb), Recorder())
        clients["m2"].start()  # a round that moves resources between live members: everyone stops
        assert held.stopping.wait(15), "m1 was never told to stop"
        record = wire.decode_barrier(zk.get(paths.barrier)[0])
        assert record.phase is Phase.STOP
        coordinator: Any = clients["m0"]._coordinator
        coordinator.stop(wait=True)
        after = wire.decode_barrier(zk.get(paths.barrier)[0])
        assert (after.phase, after.generation) == (Phase.STOP, record.generation), (
            f"the round was finished without m1's stop marker: {after}")
    finally:
        held.release.set()
        for client in clients.values():
            client.stop()


def test_every_trigger_of_a_coordinator_term_stops_with_it(zk_hosts: str, zk: KazooClient, group_path: str) -> None:
    """Each term watches G/epoch, G/config and G/barrier (data triggers) and G/clients and G/resources
    (children triggers), each with a connection listener of its own. A term that ends stops all five:
    the member's count of connection listeners after three more terms is the one it had in the first."""
    add_resources(zk, group_path, ["a"])
    recorder = Recorder()
    client = Client(options(zk_hosts, group_path, "m0"), recorder)
    client.start()
    try:
        wait_for(lambda: recorder.owned == {"a"} and client.role == "coordinator", 15, "never assigned")
        listeners = len(client.zk.state_listeners)
        for _ in range(3):  # another coordinator took a later epoch: ours resigns, and takes office again
            epoch = client.epoch
            zk.set(f"{group_path}/epoch", b"usurper")
            wait_for(lambda: client.role == "coordinator" and client.epoch > epoch + 1, 15,  # noqa: B023
                     lambda: f"never took office again (epoch {client.epoch})")
        wait_for(lambda: len(client.zk.state_listeners) == listeners, 10,
                 lambda: f"{len(client.zk.state_listeners)} connection listeners, {listeners} in the first term")
    finally:
        client.stop()
