"""Groups whose assignment data is far beyond ZooKeeper's 1 MiB znode limit."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from rebalanser import wire
from rebalanser.client import Client
from rebalanser.options import Options

from tests.support.recorder import Recorder
from tests.support.workers import wait_for
from tests.support.zk import ZkCluster, admin_client, serving_cluster


def create_resources(zk: KazooClient, group: str, names: list[str]) -> None:
    zk.ensure_path(f"{group}/resources")
    for start in range(0, len(names), 1000):
        txn = zk.transaction()
        for name in names[start : start + 1000]:
            txn.create(f"{group}/resources/{name}")
        assert not any(isinstance(r, Exception) for r in txn.commit())


@pytest.fixture
def own_server(tmp_path: Path) -> Iterator[ZkCluster]:
    """A server of its own: 100k claims would crowd the shared server's heap for the tests after this one."""
    with serving_cluster(tmp_path / "zk", size=1) as cluster:
        yield cluster


@pytest.fixture
def own_zk(own_server: ZkCluster) -> Iterator[KazooClient]:
    with admin_client(own_server.hosts) as client:
        yield client


def test_a_hundred_thousand_resources_are_shared_without_gaps_or_doubles(
    own_server: ZkCluster, own_zk: KazooClient
) -> None:
    zk_hosts, zk, group_path = own_server.hosts, own_zk, "/rebalanser-test/scale"
    names = [uuid.uuid4().hex for _ in range(100_000)]  # 50,000 a member: the assignment is chunked
    create_resources(zk, group_path, names)
    handlers = [Recorder() for _ in range(2)]
    clients = [
        Client(Options(zk_hosts, group_path, member_id=f"m{i}", create_group=True,
                       session_timeout=10, min_interval=0.5), h)
        for i, h in enumerate(handlers)
    ]
    started = time.monotonic()
    for c in clients:
        c.start()
    try:
        def complete() -> bool:
            a, b = handlers[0].owned, handlers[1].owned
            return len(a) + len(b) == len(names) and not (a & b)

        wait_for(complete, 120, lambda: f"owned {[len(h.owned) for h in handlers]}")
        print(f"\n100k resources, 2 members: all claimed after {time.monotonic() - started:.1f}s")
        assert abs(len(handlers[0].owned) - len(handlers[1].owned)) <= 1
        node = clients[0].member_node
        header = wire.decode_assignment_header(zk.get(f"{group_path}/assignment/{node}")[0])
        assert len(header.chunks) > 100, "expected the assignment to be stored in chunks"
    finally:
        for c in clients:
            c.stop()
