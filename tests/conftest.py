"""Shared fixtures: real ZooKeeper servers (never fakes), unique group paths, cleanup."""

from __future__ import annotations

import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException

from tests.support.zk import ZkCluster, admin_client, purge, serving_cluster


@pytest.fixture(scope="session")
def zk_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZkCluster]:
    """One standalone ZooKeeper server shared by the session."""
    with serving_cluster(tmp_path_factory.mktemp("zk"), size=1) as cluster:
        yield cluster


@pytest.fixture
def zk_hosts(zk_server: ZkCluster) -> str:
    server = zk_server.servers[0]
    if not server.alive():  # e.g. a JVM that ran out of heap: say so once, and serve the next tests
        tail = server.log_tail()
        zk_server.start()
        pytest.fail(f"the shared ZooKeeper server had died before this test; restarted it\n{tail}")
    return zk_server.hosts


@pytest.fixture
def zk_ensemble(tmp_path: Path) -> Iterator[ZkCluster]:
    """A fresh 3-node ensemble per test, for tests that kill or restart servers."""
    with serving_cluster(tmp_path / "ensemble", size=3) as cluster:
        yield cluster


@pytest.fixture
def group_path(request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh group path; its znodes are deleted afterwards so the shared server's heap stays small."""
    path = f"/rebalanser-test/g-{uuid.uuid4().hex[:10]}"
    yield path
    if "zk_server" not in request.fixturenames:
        return
    server: ZkCluster = request.getfixturevalue("zk_server")
    if not server.servers[0].alive():
        return
    try:
        with admin_client(server.hosts) as client:
            purge(client, path)
    except KazooException as exc:  # cleanup is best effort; the test's verdict stands
        warnings.warn(f"could not delete {path}: {exc!r}", stacklevel=1)


@pytest.fixture
def zk(zk_hosts: str) -> Iterator[KazooClient]:
    """An administrator's client (the test's own view of ZooKeeper)."""
    with admin_client(zk_hosts) as client:
        yield client


ZOOKEEPER_FIXTURES = frozenset({"zk_server", "zk_ensemble"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The one rule for "needs ZooKeeper": a test that uses a real server's fixture is marked ``zk``
    (``make unit`` runs the tests without it, and without ``e2e``/``pods``/``slow``)."""
    for item in items:
        if ZOOKEEPER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.zk)
