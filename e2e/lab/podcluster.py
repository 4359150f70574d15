"""Where the pod tests and the pod demo find the real cluster (``make cluster-up``) and the image.

``pod_cluster()`` returns a :class:`Kube` for ``.cluster/kubeconfig`` once a node is Ready, or raises
:class:`NoCluster` with one line saying why (``tests.support.podcluster.pod_cluster_or_skip`` skips then).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from e2e.lab.kubectl import Kube, KubeError

REPO = Path(__file__).resolve().parents[2]
#: REBALANSER_CLUSTER_DIR and REBALANSER_IMAGE point a development run at another cluster or image.
CLUSTER_DIR = Path(os.environ.get("REBALANSER_CLUSTER_DIR", REPO / ".cluster"))
IMAGE = os.environ.get("REBALANSER_IMAGE", "rebalanser:dev")
IMAGE_REPOSITORY, IMAGE_TAG = IMAGE.rsplit(":", 1)


class NoCluster(RuntimeError):
    """The real cluster is not available; the message says why in one line."""


def pod_cluster(cluster_dir: Path = CLUSTER_DIR) -> Kube:
    """The running cluster (a node Ready), or :class:`NoCluster`."""
    kube = Kube(kubeconfig=cluster_dir / "kubeconfig", bin_dir=cluster_dir / "bin")
    if not kube.kubeconfig.exists() or not (kube.bin_dir / "kubectl").exists():
        raise NoCluster(f"no cluster at {cluster_dir} (make cluster-up starts one)")
    try:
        nodes = json.loads(kube.kubectl("get", "nodes", "-o", "json", timeout=30).stdout)["items"]
    except KubeError as exc:
        raise NoCluster(f"the cluster at {cluster_dir} does not answer: {exc}") from exc
    ready = [n for n in nodes if any(c["type"] == "Ready" and c["status"] == "True"
                                     for c in n.get("status", {}).get("conditions", []))]
    if not ready:
        raise NoCluster(f"the cluster at {cluster_dir} has no Ready node")
    return kube
