"""The writer fence (docs/operator-replicas.md, "Fenced writes") on a real kube-apiserver: an update of a
ResourceGroup itself, sent with the service-account token of an operator pod that ``status.servedBy``
does not name, is refused; the pod it names passes, and so does the next owner once its token is stored.
The config fence: a workers' ConfigMap published under a replica's fence refuses an older one's replace.

The requests are made as the replicas make them: with service-account tokens bound to two pods of the
operator's namespace (``kubectl create token --bound-object-kind Pod``), so the API server itself puts
the pod's name into the request's user info. The policies are those the chart installs
(:func:`writer_manifests`, :func:`fence_manifests`, :func:`config_manifests`). Evidence: the API server's
answers and the stored objects.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import config as k8s_config
from kubernetes.client.rest import ApiException
from rebalanser_operator.kube import FENCE_TOKEN, KubernetesGateway
from rebalanser_operator.replicafence import (
    CONFIG_MESSAGE,
    WRITER_MESSAGE,
    config_manifests,
    fence_manifests,
    writer_manifests,
)
from rebalanser_operator.spec.models import FINALIZER

from tests.e2e.test_operator_e2e import wait_for
from tests.support.cluster import REPO, UP_TIMEOUT, start_cluster
from tests.support.kubectl import Kube
from tests.support.podtoken import as_pod

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(UP_TIMEOUT)]

NS = "rb-tenant"
OPERATORS = "rb-ops"
ACCOUNT = "operator"
USER = f"system:serviceaccount:{OPERATORS}:{ACCOUNT}"
GROUP_NAME = "orders"
#: What the operator's Role grants on its groups (the chart's), enough for every write below.
ROLE = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "rb-writer-test"},
        "rules": [{"apiGroups": ["rebalanser.io"], "resources": ["resourcegroups", "resourcegroups/status"],
                   "verbs": ["get", "list", "watch", "patch", "update"]},
                  {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "create", "update"]}]}
BINDING = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
           "metadata": {"name": "rb-writer-test"},
           "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "rb-writer-test"},
           "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": OPERATORS}]}


def annotate(kube: Kube, value: str) -> subprocess.CompletedProcess[str]:
    return kube.kubectl("annotate", "rg", GROUP_NAME, "-n", NS, "--overwrite", f"example.com/note={value}", check=False)


def patch(kube: Kube, change: dict[str, Any], *, status: bool = False) -> subprocess.CompletedProcess[str]:
    where = ["--subresource=status"] if status else []
    return kube.kubectl("patch", "rg", GROUP_NAME, "-n", NS, *where, "--type=merge", "-p", json.dumps(change),
                        check=False)


@dataclass
class Scene:
    admin: Kube
    pods: dict[str, Kube]
    unbound: Kube

    def group(self) -> dict[str, Any]:
        proc = self.admin.kubectl("get", "rg", GROUP_NAME, "-n", NS, "-o", "json", check=False)
        return json.loads(proc.stdout) if proc.returncode == 0 else {}

    def note(self) -> str | None:
        return (self.group().get("metadata", {}).get("annotations") or {}).get("example.com/note")


@pytest.fixture
def scene(tmp_path: Path) -> Iterator[Scene]:
    with start_cluster(tmp_path / "kube") as cluster:
        admin = Kube(cluster.kubeconfig, cluster.bin_dir)
        for ns in (NS, OPERATORS):
            cluster.create_namespace(ns)
        admin.kubectl("create", "serviceaccount", ACCOUNT, "-n", OPERATORS)
        admin.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(REPO / "crds"))
        cluster.wait_established("resourcegroups.rebalanser.io")
        policies = [*fence_manifests("rb-replica-fence"), *writer_manifests("rb-replica-writer", USER),
                    *config_manifests("rb-replica-config", USER), ROLE, BINDING]
        admin.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": policies}))
        pods = {}
        for name in ("op-a", "op-b"):
            pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": OPERATORS},
                   "spec": {"serviceAccountName": ACCOUNT, "automountServiceAccountToken": False,
                            "containers": [{"name": "operator", "image": "none"}]}}
            admin.kubectl("apply", "-f", "-", input=json.dumps(pod))
            pods[name] = as_pod(admin, tmp_path / f"{name}.kubeconfig", ACCOUNT, OPERATORS, name)
        unbound = as_pod(admin, tmp_path / "unbound.kubeconfig", ACCOUNT, OPERATORS, None)
        group = {"apiVersion": "rebalanser.io/v1alpha1", "kind": "ResourceGroup",
                 "metadata": {"name": GROUP_NAME, "namespace": NS, "finalizers": [FINALIZER]},
                 "spec": {"zookeeper": {"connect": "127.0.0.1:1"}, "resources": ["a"]}}
        admin.kubectl("apply", "-f", "-", input=json.dumps(group))
        assert patch(admin, {"status": {"servedBy": {"replica": "op-a", "token": 5}}}, status=True).returncode == 0
        yield Scene(admin, pods, unbound)


def test_only_the_pod_that_serves_a_group_may_update_it_and_the_next_owner_once_its_token_is_stored(
    scene: Scene,
) -> None:
    a, b = scene.pods["op-a"], scene.pods["op-b"]

    def refused() -> bool:  # the API server compiles a new policy in the background
        return annotate(b, "probe").returncode != 0

    wait_for(refused, 60, "the writer fence to refuse the pod that status.servedBy does not name")
    early = annotate(b, "from-b")
    assert early.returncode != 0 and WRITER_MESSAGE in early.stderr, early.stderr
    assert scene.note() != "from-b"
    assert annotate(a, "from-a").returncode == 0
    assert scene.note() == "from-a"
    removal = patch(a, {"metadata": {"finalizers": None}})
    assert removal.returncode == 0 and FINALIZER not in (scene.group()["metadata"].get("finalizers") or []), \
        "the serving pod may change its own group's finalizers"
    # Our finalizer missing, any replica may put it back (kopf adds it to a group it sees without it).
    assert patch(b, {"metadata": {"finalizers": [FINALIZER]}}).returncode == 0

    # A token of the service account not bound to a pod is outside the fence (the policy judges pods).
    assert annotate(scene.unbound, "unbound").returncode == 0

    # The handover: b stores its larger token in the status (the status fence lets it), then b writes and a
    # cannot, its finalizer's removal included.
    assert patch(b, {"status": {"servedBy": {"replica": "op-b", "token": 6}}}, status=True).returncode == 0
    assert annotate(b, "from-b").returncode == 0
    late = annotate(a, "late-a")
    assert late.returncode != 0 and WRITER_MESSAGE in late.stderr, late.stderr
    assert patch(a, {"metadata": {"finalizers": None}}).returncode != 0
    assert patch(a, {"status": {"servedBy": {"replica": "op-a", "token": 5}}}, status=True).returncode != 0
    group = scene.group()
    assert group["metadata"]["annotations"]["example.com/note"] == "from-b"
    assert group["metadata"]["finalizers"] == [FINALIZER]
    assert group["status"]["servedBy"] == {"replica": "op-b", "token": 6}

    # Being deleted, the group's finalizer goes with whichever replica deletes it (the daemons that store a
    # new owner's token have stopped by then; a stale replica's deletion fails in ZooKeeper first).
    scene.admin.kubectl("delete", "rg", GROUP_NAME, "-n", NS, "--wait=false")
    assert patch(a, {"metadata": {"finalizers": None}}).returncode == 0
    wait_for(lambda: not scene.group(), 30, "the group gone once its finalizer was removed")


def test_a_workers_config_map_published_under_a_later_fence_refuses_an_earlier_ones_replace(scene: Scene) -> None:
    """As the operator publishes it (its gateway, with its service account's token): each replace carries the
    publisher's (claim, token); an older one is refused and changes nothing."""
    client = k8s_config.new_client_from_config(config_file=str(scene.unbound.kubeconfig))  # type: ignore[no-untyped-call]
    gateway = KubernetesGateway(client)
    name = f"{GROUP_NAME}-rebalanser"

    def publish(value: str, stamp: tuple[int, int] | None) -> str | None:
        try:
            gateway.publish_config(NS, name, {"REBALANSER_ZK": value}, None, stamp=stamp)
        except ApiException as exc:
            return str(exc.body)
        return None

    def stored() -> tuple[str, str]:
        cm = scene.admin.json("get", "configmap", name, "-n", NS)
        return cm["data"]["REBALANSER_ZK"], cm["metadata"]["annotations"][FENCE_TOKEN]

    def refused() -> str | None:  # the API server compiles a new policy in the background
        assert publish("zk-5:2181", (1, 5)) is None
        return publish("zk-4:2181", (1, 4))

    message = wait_for(refused, 60, "the config fence to refuse a smaller token")
    assert CONFIG_MESSAGE in message, message
    assert stored() == ("zk-5:2181", "5")
    assert publish("zk-6:2181", (1, 6)) is None  # a later owner of the same release
    assert publish("zk-b:2181", (2, 1)) is None  # another release's claim, its own smaller token
    assert stored() == ("zk-b:2181", "1")
    for late in ((1, 9), None):  # the earlier release's replica; a publisher without a fence
        assert publish("zk-late:2181", late) is not None, late
    assert stored() == ("zk-b:2181", "1")
