"""The real cluster for the pod end-to-end tests: brought up by ``make cluster-up``, or skipped with one line."""

from __future__ import annotations

import pytest

from tests.support.kubectl import Kube
from tests.support.podcluster import pod_cluster_or_skip


@pytest.fixture(scope="session")
def kube() -> Kube:
    return pod_cluster_or_skip()
