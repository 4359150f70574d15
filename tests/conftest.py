"""Shared fixtures: real ZooKeeper servers (never fakes), unique group paths, cleanup."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from tests.support.zk import ZkCluster, make_cluster


@pytest.fixture(scope="session")
def zk_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZkCluster]:
    """One standalone ZooKeeper server shared by the session."""
    cluster = make_cluster(tmp_path_factory.mktemp("zk"), size=1)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def zk_hosts(zk_server: ZkCluster) -> str:
    return zk_server.hosts


@pytest.fixture
def zk_ensemble(tmp_path: Path) -> Iterator[ZkCluster]:
    """A fresh 3-node ensemble per test, for tests that kill or restart servers."""
    cluster = make_cluster(tmp_path / "ensemble", size=3)
    cluster.start()
    try:
        yield cluster
    finally:
        for s in cluster.servers:
            s.resume()
        cluster.stop()


@pytest.fixture
def group_path() -> str:
    return f"/rebalanser-test/g-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def zk(zk_hosts: str) -> Iterator[KazooClient]:
    """An administrator's client (the test's own view of ZooKeeper)."""
    client = KazooClient(hosts=zk_hosts, timeout=10)
    client.start(timeout=15)
    try:
        yield client
    finally:
        client.stop()
        client.close()
