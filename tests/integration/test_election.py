"""Herd-free election and epoch fencing, on real ZooKeeper."""

from __future__ import annotations

from pathlib import Path

import pytest
from kazoo.client import KazooClient
from rebalanser.client import Client
from rebalanser.errors import EpochLostError, NotCoordinatorError
from rebalanser.options import Options
from rebalanser.writer import FencedWriter

from tests.integration.conftest import add_resources
from tests.support.recorder import Recorder
from tests.support.workers import Group, wait_for
from tests.support.zk import ZkCluster, four_letter

RESOURCES = {f"r{i}" for i in range(16)}


def watchers_by_path(zk_server: ZkCluster) -> dict[str, int]:
    """ZooKeeper's own account (``wchp``) of how many sessions watch each path."""
    out = four_letter(zk_server.servers[0].client_port, "wchp")
    counts: dict[str, int] = {}
    path = ""
    for line in out.splitlines():
        if line.startswith("/"):
            path = line.strip()
            counts[path] = 0
        elif line.strip().startswith("0x"):
            counts[path] += 1
    return counts


@pytest.fixture
def rb_group(zk_hosts: str, group_path: str, tmp_path: Path) -> Group:
    g = Group(zk_hosts, group_path, tmp_path)
    yield g
    g.stop_all()


def test_each_member_znode_is_watched_by_at_most_one_member(
    rb_group: Group, zk: KazooClient, zk_server: ZkCluster
) -> None:
    add_resources(zk, rb_group.path, sorted(RESOURCES))
    for i in range(8):
        rb_group.spawn(f"w{i}")
    rb_group.wait_settled(RESOURCES, timeout=30)
    members = zk.get_children(f"{rb_group.path}/clients")

    def herd_free() -> bool:
        counts = watchers_by_path(zk_server)
        member_watches = [counts.get(f"{rb_group.path}/clients/{m}", 0) for m in members]
        # Each member watches its own znode (to notice an external deletion) and its predecessor's:
        # the last member's znode has only its own watch, every other one exactly one more.
        return sorted(member_watches) == [1] + [2] * 7

    wait_for(herd_free, 10, lambda: f"watch counts: {watchers_by_path(zk_server)}")


def test_losing_the_coordinator_wakes_exactly_one_member(rb_group: Group, zk: KazooClient) -> None:
    add_resources(zk, rb_group.path, sorted(RESOURCES))
    for i in range(6):
        rb_group.spawn(f"w{i}")
    rb_group.wait_settled(RESOURCES, timeout=30)
    coordinator = next(w for w in rb_group.live() if w.of("role")[-1]["role"] == "coordinator")
    roles_before = {w.member_id: len(w.of("role")) for w in rb_group.live()}
    coordinator.kill()
    rb_group.wait_settled(RESOURCES, timeout=rb_group.session_timeout + 10)
    changed = [w.member_id for w in rb_group.live() if len(w.of("role")) != roles_before[w.member_id]]
    assert len(changed) == 1, f"role changes in {changed}"


def test_a_write_under_a_stale_epoch_is_rejected(zk: KazooClient, group_path: str) -> None:
    zk.create(f"{group_path}/epoch", b"", makepath=True)
    zk.set(f"{group_path}/epoch", b"new coordinator")  # someone else won epoch 1
    writer = FencedWriter(zk, f"{group_path}/epoch", epoch=0)
    writer.create(f"{group_path}/assignment-by-zombie")
    with pytest.raises(NotCoordinatorError):
        writer.commit()
    assert zk.exists(f"{group_path}/assignment-by-zombie") is None


def test_a_write_fenced_by_a_member_node_that_is_gone_is_rejected_even_under_the_current_epoch(
    zk: KazooClient, group_path: str
) -> None:
    """The case of a re-created group: G/epoch counts from 0 again, so a coordinator from before holds
    a version number that may be current again; its member node, though, is never re-created."""
    zk.create(f"{group_path}/epoch", b"", makepath=True)
    zk.set(f"{group_path}/epoch", b"new coordinator")  # epoch 1, the number the zombie holds too
    member = f"{group_path}/clients/zombie"
    writer = FencedWriter(zk, f"{group_path}/epoch", epoch=1, member_path=member)
    writer.create(f"{group_path}/assignment-by-zombie")
    with pytest.raises(NotCoordinatorError, match="member node"):
        writer.commit()
    assert zk.exists(f"{group_path}/assignment-by-zombie") is None
    zk.create(member, makepath=True)
    writer.create(f"{group_path}/assignment-by-the-coordinator")
    writer.commit()
    assert zk.exists(f"{group_path}/assignment-by-the-coordinator") is not None


def test_a_write_after_the_epoch_node_was_deleted_is_rejected_as_lost(zk: KazooClient, group_path: str) -> None:
    zk.create(f"{group_path}/epoch", b"", makepath=True)
    writer = FencedWriter(zk, f"{group_path}/epoch", epoch=0)
    zk.delete(f"{group_path}/epoch")
    writer.create(f"{group_path}/orphan")
    with pytest.raises(EpochLostError):
        writer.commit()


def test_a_coordinator_whose_epoch_was_taken_steps_down_and_rejoins(
    zk_hosts: str, zk: KazooClient, group_path: str
) -> None:
    add_resources(zk, group_path, ["a"])
    handler = Recorder()
    client = Client(Options(zk_hosts, group_path, member_id="solo", create_group=True,
                            session_timeout=2, min_interval=0.1), handler)
    client.start()
    try:
        wait_for(lambda: handler.owned == {"a"}, 10, "never assigned")
        first_epoch = client.epoch
        zk.set(f"{group_path}/epoch", b"usurper")  # a later epoch: the coordinator's next write must fail
        add_resources(zk, group_path, ["b"])
        wait_for(lambda: handler.owned == {"a", "b"}, 10, lambda: f"owned {handler.owned}, roles {handler.roles}")
        assert ("follower", first_epoch + 1) in handler.roles
        assert handler.roles[-1] == ("coordinator", first_epoch + 2)
    finally:
        client.stop()
