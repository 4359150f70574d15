"""The local control plane itself: etcd + kube-apiserver from scripts/cluster.sh controlplane, kubectl, helm."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cluster import REPO, UP_TIMEOUT, Cluster, start_cluster

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(UP_TIMEOUT)]

CRD = """\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.controlplane-test.rebalanser.io
spec:
  group: controlplane-test.rebalanser.io
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
    - name: v1
      served: true
      storage: true
      subresources: {status: {}}
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              properties:
                size: {type: integer}
            status:
              type: object
              x-kubernetes-preserve-unknown-fields: true
"""


def pinned_kubernetes_version() -> str:
    text = (REPO / "e2e" / "controlplane" / "go.mod").read_text()
    match = re.search(r"^\s*(?:require\s+)?k8s\.io/kubernetes (v1\.\d+\.\d+)", text, re.M)
    assert match, "k8s.io/kubernetes not found in e2e/controlplane/go.mod"
    return match.group(1)


def pid_of(cluster_dir: Path, name: str) -> int:
    return int((cluster_dir / f"{name}.pid").read_text().strip())


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with start_cluster(tmp_path_factory.mktemp("controlplane")) as c:
        yield c


def test_layout(cluster: Cluster) -> None:
    assert cluster.kubeconfig.is_file()
    assert (cluster.bin_dir / "kubectl").exists()
    assert (cluster.bin_dir / "helm").exists()
    assert re.fullmatch(r"https://127\.0\.0\.1:\d+", cluster.server)
    assert f"server: {cluster.server}" in cluster.kubeconfig.read_text()


def test_kubectl_version(cluster: Cluster) -> None:
    version = pinned_kubernetes_version()
    minor = version.split(".")[1]
    out = json.loads(cluster.run_kubectl("version", "-o", "json").stdout)
    for side in ("clientVersion", "serverVersion"):
        assert out[side]["gitVersion"] == version, out
        assert out[side]["major"] == "1", out
        assert out[side]["minor"] == minor, out


def test_admin_and_rbac(cluster: Cluster) -> None:
    assert cluster.run_kubectl("auth", "can-i", "*", "*").stdout.strip() == "yes"
    # RBAC is really on: an unknown user may do nothing.
    denied = cluster.run_kubectl("auth", "can-i", "create", "pods", "--as=nobody", check=False)
    assert denied.stdout.strip() == "no", denied


def test_system_namespaces(cluster: Cluster) -> None:
    names = cluster.run_kubectl("get", "namespaces", "-o", "name").stdout.split()
    assert "namespace/default" in names
    assert "namespace/kube-system" in names


def test_namespace_and_crd(cluster: Cluster) -> None:
    cluster.create_namespace("cp-test")
    phase = cluster.run_kubectl("get", "namespace", "cp-test", "-o", "jsonpath={.status.phase}").stdout
    assert phase == "Active"

    cluster.run_kubectl("apply", "-f", "-", input=CRD)
    cluster.wait_established("widgets.controlplane-test.rebalanser.io")
    widget = (
        "apiVersion: controlplane-test.rebalanser.io/v1\nkind: Widget\n"
        "metadata: {name: w1, namespace: cp-test}\nspec: {size: 3}\n"
    )
    # Discovery of a just-established CRD can lag a little behind the condition.
    deadline = time.monotonic() + 30
    while True:
        applied = cluster.run_kubectl("apply", "-f", "-", input=widget, check=False)
        if applied.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert applied.returncode == 0, applied.stderr
    size = cluster.run_kubectl("get", "widget", "w1", "-n", "cp-test", "-o", "jsonpath={.spec.size}").stdout
    assert size == "3"


def test_helm_runs(cluster: Cluster) -> None:
    out = subprocess.run(
        [str(cluster.helm), "version", "--short"],
        capture_output=True,
        text=True,
        check=True,
        env=cluster.env(),
    )
    assert out.stdout.startswith("v3."), out.stdout
    listed = subprocess.run(
        [str(cluster.helm), "list", "-A"], capture_output=True, text=True, check=True, env=cluster.env()
    )
    assert "NAME" in listed.stdout


def test_up_is_idempotent(cluster: Cluster) -> None:
    again = start_cluster(cluster.dir)
    assert again.server == cluster.server
    assert cluster.is_up()


def test_down_then_up_again(tmp_path: Path) -> None:
    cluster_dir = tmp_path / "c"
    for _ in range(2):
        cluster = start_cluster(cluster_dir)
        pids = [pid_of(cluster_dir, "etcd"), pid_of(cluster_dir, "kube-apiserver")]
        assert all(alive(p) for p in pids)
        assert cluster.run_kubectl("get", "--raw", "/readyz").stdout.strip() == "ok"
        cluster.stop()
        assert not any(alive(p) for p in pids)
        assert not (cluster_dir / "etcd-data").exists()
        assert not cluster.is_up()
    cluster.stop()  # down when already down is fine
