"""Fixtures of the chaos subset: ZooKeeper servers owned by this package (its faults kill and restart
them, and cut their links, so they are never the suite-wide shared server)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.partition import PartitionableEnsemble, partitionable_ensemble
from tests.support.zk import TICK_MS, ZkCluster, serving_cluster


@pytest.fixture(scope="session")
def chaos_single(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZkCluster]:
    with serving_cluster(tmp_path_factory.mktemp("chaos-zk1"), size=1) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def chaos_ensemble(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PartitionableEnsemble]:
    """A 3-node ensemble whose server-to-server links can be cut (same timing as the standalone one)."""
    with partitionable_ensemble(tmp_path_factory.mktemp("chaos-zk3"), tick_ms=TICK_MS, sync_limit=8,
                                init_limit=40) as ensemble:
        yield ensemble
