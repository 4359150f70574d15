"""``make dist``'s artifacts on the real cluster: the packaged chart (the ``.tgz``, not the folder) installs
with the image from the image tarball, loaded under the name the chart defaults to, and its operator
serves a ResourceGroup.

Evidence: the artifacts ``scripts/dist.sh`` wrote (names, the chart's README inside the ``.tgz``, the
SBOM beside the image), the operator Deployment's rollout, and the ResourceGroup's status written by
that operator (every resource created in ZooKeeper).
"""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import rebalanser
import yaml

from tests.pods.scene import example
from tests.support.kube import docker_unavailable_reason
from tests.support.kubectl import Kube, wait_until
from tests.support.podcluster import CLUSTER_DIR, pod_cluster_or_skip

pytestmark = [pytest.mark.pods, pytest.mark.timeout(1800)]

REPO = Path(__file__).resolve().parents[2]
VERSION = rebalanser.__version__
CHART_VALUES = yaml.safe_load((REPO / "charts" / "rebalanser-operator" / "values.yaml").read_text())
RELEASE_IMAGE = f"{CHART_VALUES['image']['repository']}:{VERSION}"  # the chart's default: its appVersion


def run(*argv: str | Path, timeout: float = 1200, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=timeout,
                          env=env, check=False)
    assert proc.returncode == 0, f"{argv} exited {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


@pytest.fixture(scope="module")
def kube() -> Kube:
    return pod_cluster_or_skip()


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``make dist`` into a fresh directory (Docker is needed for the image; skipped where it cannot run)."""
    reason = docker_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    out = tmp_path_factory.mktemp("dist")
    env = {**os.environ, "DIST_REQUIRE_IMAGE": "1", "DIST_IMAGE": f"rebalanser-dist:{VERSION}"}
    run(REPO / "scripts" / "dist.sh", out, env=env)
    return out


@pytest.fixture
def namespace(kube: Kube) -> Iterator[str]:
    name = f"dx-dist-{uuid.uuid4().hex[:6]}"
    kube.kubectl("create", "namespace", name)
    yield name
    # the ResourceGroups first, while their operator runs: its finalizer deletes their znodes
    kube.kubectl("delete", "resourcegroups.rebalanser.io", "--all", "-n", name, "--wait", "--timeout=180s",
                 check=False, timeout=240)
    kube.helm("uninstall", name, "-n", name, "--wait", check=False)
    kube.kubectl("delete", "namespace", name, "--wait=false", check=False)


def test_dist_holds_every_artifact_a_release_publishes(dist: Path) -> None:
    names = {p.name for p in dist.iterdir()}
    assert {f"rebalanser-{VERSION}-py3-none-any.whl", f"rebalanser-{VERSION}.tar.gz",
            f"rebalanser-operator-{VERSION}.tgz", f"rebalanser-image-{VERSION}.tar.gz",
            f"rebalanser-image-{VERSION}.cdx.json", "SHA256SUMS"} <= names, names
    with tarfile.open(dist / f"rebalanser-operator-{VERSION}.tgz") as chart:
        readme = chart.extractfile("rebalanser-operator/README.md")
        meta = yaml.safe_load(chart.extractfile("rebalanser-operator/Chart.yaml").read())  # type: ignore[union-attr]
        assert readme is not None and "`image.repository`" in readme.read().decode()
    assert meta["version"] == meta["appVersion"] == VERSION
    sbom = json.loads((dist / f"rebalanser-image-{VERSION}.cdx.json").read_text())
    components = {c["name"].lower() for c in sbom["components"]}
    assert sbom["bomFormat"] == "CycloneDX" and {"kazoo", "kopf"} <= components, sorted(components)


def test_the_packaged_chart_installs_with_the_image_from_the_tarball(dist: Path, kube: Kube, namespace: str) -> None:
    loaded = run("docker", "load", "-i", dist / f"rebalanser-image-{VERSION}.tar.gz")
    assert f"rebalanser-dist:{VERSION}" in loaded, loaded
    run("docker", "tag", f"rebalanser-dist:{VERSION}", RELEASE_IMAGE)
    run(CLUSTER_DIR.parent / "scripts" / "cluster.sh", "load", RELEASE_IMAGE)  # the cluster's own script
    # the release is named after the namespace: the chart's cluster-scoped objects carry the release's name
    kube.helm("install", namespace, str(dist / f"rebalanser-operator-{VERSION}.tgz"), "-n", namespace,
              "--set", "operator.allowedEnsembles={zk.zookeeper.svc.cluster.local:2181}",  # none by default
              "--wait", "--timeout", "5m", timeout=420)
    listed = kube.json("get", "deployment", "-n", namespace, "-l", f"app.kubernetes.io/instance={namespace}")
    (deployment,) = listed["items"]
    image = deployment["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == RELEASE_IMAGE, image
    group = example("resourcegroup.yaml")
    group["spec"].pop("workload", None)
    kube.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(group))
    wanted = group["spec"]["resourceSets"][0]["count"]

    def status() -> dict[str, object]:
        found = kube.maybe_json("get", "rg", group["metadata"]["name"], "-n", namespace) or {}
        return dict(found.get("status") or {})

    wait_until(lambda: status().get("resources") == wanted, 240,
               lambda: f"the packaged chart's operator never synced the group: {status()}")
