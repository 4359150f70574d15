"""The epoch fence across deletion and re-creation of ``G/epoch`` (and of the whole group)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.security import OPEN_ACL_UNSAFE, make_acl
from rebalanser.client import Client
from rebalanser.options import Options
from rebalanser.writer import FencedWriter

from tests.integration.conftest import add_resources
from tests.support.recorder import Recorder
from tests.support.workers import Group, wait_for
from tests.support.zk import ZkCluster, purge

RESOURCES = {f"r{i}" for i in range(6)}


@pytest.fixture
def rb_group(zk_hosts: str, group_path: str, tmp_path: Path) -> Iterator[Group]:
    g = Group(zk_hosts, group_path, tmp_path)
    yield g
    g.stop_all()


def coordinator_epochs(group: Group) -> list[int]:
    return [e["epoch"] for e in group.events() if e["event"] == "role" and e["role"] == "coordinator"]


def test_a_deleted_epoch_node_is_recreated_above_every_recorded_epoch_and_the_group_goes_on(
    rb_group: Group, zk: KazooClient
) -> None:
    add_resources(zk, rb_group.path, sorted(RESOURCES))
    for i in range(2):
        rb_group.spawn(f"w{i}")
    rb_group.wait_settled(RESOURCES, timeout=30)
    for _ in range(3):  # later epochs: each takeover bumps the epoch again
        zk.set(f"{rb_group.path}/epoch", b"usurper")
        add_resources(zk, rb_group.path, [f"x{_}"])
        rb_group.wait_settled(RESOURCES | {f"x{i}" for i in range(_ + 1)}, timeout=30)
    resources = RESOURCES | {"x0", "x1", "x2"}
    before = max(coordinator_epochs(rb_group))
    state = json.loads(zk.get(f"{rb_group.path}/state")[0])
    assert state["epoch"] == before
    zk.delete(f"{rb_group.path}/epoch")
    add_resources(zk, rb_group.path, ["late"])
    rb_group.wait_settled(resources | {"late"}, timeout=rb_group.session_timeout + 15)
    after = max(coordinator_epochs(rb_group))
    assert after > before, f"epochs restarted after G/epoch was re-created: {coordinator_epochs(rb_group)}"
    stat = zk.exists(f"{rb_group.path}/epoch")
    assert stat is not None and stat.version == after, "the epoch is G/epoch's version"


class StalledWrites:
    """Holds the next fenced write that touches ``G/state`` from one coordinator thread until released,
    and records what ZooKeeper answered to it."""

    def __init__(self, state_path: str) -> None:
        self.state_path = state_path
        self.thread: threading.Thread | None = None
        self.held = threading.Event()
        self.release = threading.Event()
        self.outcome: list[str] = []
        self._real = FencedWriter.commit

    def commit(self, writer: FencedWriter) -> int:
        if threading.current_thread() is self.thread and any(op.path == self.state_path for op in writer.ops):
            self.thread = None
            self.held.set()
            self.release.wait(60)
            try:
                sent = self._real(writer)
            except Exception as exc:
                self.outcome.append(f"rejected: {type(exc).__name__}")
                raise
            self.outcome.append("landed")
            return sent
        return self._real(writer)


def test_a_coordinator_from_before_the_group_was_recreated_cannot_write_into_the_new_group(
    zk_hosts: str, zk: KazooClient, group_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A coordinator stalled in the middle of a write while the whole group is deleted and re-created.
    Every record of epoch 1 went with the group, so the new ``G/epoch`` could count up to 1 again: the
    number the stalled coordinator holds (it did, before the fix, and the stalled write landed)."""
    stall = StalledWrites(f"{group_path}/state")
    monkeypatch.setattr(FencedWriter, "commit", lambda writer: stall.commit(writer))
    add_resources(zk, group_path, ["a", "b"])
    recorders = {m: Recorder() for m in ("m0", "m1")}
    clients: dict[str, Client] = {}

    def start(member: str) -> None:
        options = Options(zk_hosts, group_path, member_id=member, create_group=True,
                          session_timeout=3, min_interval=0.1)
        clients[member] = Client(options, recorders[member])
        clients[member].start()

    start("m0")
    try:
        wait_for(lambda: recorders["m0"].owned == {"a", "b"}, 15, "m0 never got both resources")
        old = clients["m0"]
        assert old.role == "coordinator" and old.epoch == 1
        coordinator: Any = old._coordinator  # the instance whose next write is held
        stall.thread = coordinator._thread
        start("m1")  # a rebalance: the coordinator writes the assignments, then G/state (held)
        assert stall.held.wait(15), "the coordinator never wrote G/state"
        purge(zk, group_path)
        add_resources(zk, group_path, ["a", "b"])
        wait_for(lambda: zk.exists(f"{group_path}/epoch") is not None
                 and any(c.role == "coordinator" and c.member_node is not None for c in clients.values()),
                 20, "no coordinator took office in the re-created group")
        stall.release.set()
        wait_for(lambda: bool(stall.outcome), 15, "the held write never returned")
        assert stall.outcome == ["rejected: NotCoordinatorError"], (
            f"a write of the coordinator from before the re-creation: {stall.outcome}"
        )
    finally:
        stall.release.set()
        for c in clients.values():
            c.stop()


def requests_received(zk_server: ZkCluster) -> int:
    return int(zk_server.mntr()["zk_packets_received"])


def test_a_coordinator_whose_writes_keep_failing_backs_off_and_resigns(
    zk_hosts: str, zk: KazooClient, zk_server: ZkCluster, group_path: str
) -> None:
    """G/state made read-only: every rebalance fails at its last write. The coordinator must retry
    with back-off (not in a tight loop) and, after repeated failures, resign and take office afresh."""
    add_resources(zk, group_path, ["a"])
    rec = Recorder()
    c = Client(Options(zk_hosts, group_path, member_id="solo", create_group=True,
                       session_timeout=3, min_interval=0.0), rec)
    c.start()
    try:
        wait_for(lambda: rec.owned == {"a"} and zk.exists(f"{group_path}/state") is not None, 15, "never settled")
        roles = len(rec.roles)
        zk.set_acls(f"{group_path}/state", [make_acl("world", "anyone", read=True, admin=True)])
        add_resources(zk, group_path, ["b"])
        wait_for(lambda: rec.owned == {"a", "b"}, 15, "b was never assigned")  # written before G/state
        before = requests_received(zk_server)
        window = 4.0
        time.sleep(window)  # an observation window: how busy the failing coordinator keeps the server
        rate = (requests_received(zk_server) - before) / window
        assert rate < 150, f"{rate:.0f} requests/s while every rebalance fails: no back-off"
        wait_for(lambda: any(role == "follower" for role, _ in rec.roles[roles:]), 20,
                 lambda: f"the coordinator never resigned: roles {rec.roles}")
        wait_for(lambda: rec.roles[-1][0] == "coordinator", 20, lambda: f"roles {rec.roles}")
    finally:
        zk.set_acls(f"{group_path}/state", OPEN_ACL_UNSAFE)
        c.stop()
