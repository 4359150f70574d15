"""The real cluster for the pod tests: :mod:`e2e.lab.podcluster`, plus ``pod_cluster_or_skip()``, which skips
the calling test with one line saying why the cluster is not available."""

from __future__ import annotations

import pytest

from e2e.lab.podcluster import *  # noqa: F403  (the shared lab module, re-exported for the tests)
from e2e.lab.podcluster import NoCluster, pod_cluster


def pod_cluster_or_skip() -> Kube:  # noqa: F405
    try:
        return pod_cluster()
    except NoCluster as exc:
        pytest.skip(f"pod e2e skipped: {exc}")
