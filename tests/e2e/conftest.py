"""The session's local control plane (etcd + kube-apiserver), shared by the e2e modules."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.cluster import Cluster, start_cluster


@pytest.fixture(scope="session")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with start_cluster(tmp_path_factory.mktemp("kube")) as cluster:
        yield cluster
