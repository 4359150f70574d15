"""Fixtures of the chaos subset: ZooKeeper servers owned by this package (its faults kill and restart
them, so they are never the suite-wide shared server)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.zk import ZkCluster, serving_cluster


@pytest.fixture(scope="session")
def chaos_single(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZkCluster]:
    with serving_cluster(tmp_path_factory.mktemp("chaos-zk1"), size=1) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def chaos_ensemble(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZkCluster]:
    with serving_cluster(tmp_path_factory.mktemp("chaos-zk3"), size=3) as cluster:
        yield cluster
