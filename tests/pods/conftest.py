"""The real cluster for the pod tests: ``kube_cluster`` (tests/support/kube.py) brings it up with
``rebalanser:dev`` loaded (idempotent, cached), or skips with one line where Docker cannot run;
``kube`` is the kubectl/helm handle on it."""

from __future__ import annotations

import pytest

from tests.support.kube import KubeCluster, kube_cluster
from tests.support.kubectl import Kube

__all__ = ["kube", "kube_cluster"]


@pytest.fixture(scope="session")
def kube(kube_cluster: KubeCluster) -> Kube:
    return Kube(kubeconfig=kube_cluster.kubeconfig, bin_dir=kube_cluster.bin_dir)
