"""The kind path (``e2e/kind/run.sh``): image, kind cluster, ZooKeeper, chart, workers as real Pods.

Runs only where a Docker engine answers and ``kind`` is installed; elsewhere it is skipped (the local
control-plane e2e tests cover the operator). The script's syntax and the manifests are checked always.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
import yaml

from tests.support.cluster import REPO

KIND_DIR = REPO / "e2e" / "kind"
RUN = KIND_DIR / "run.sh"
SKIP_MESSAGE = (
    "no Docker engine: the kind e2e path needs Docker; the local control-plane e2e tests cover the operator here"
)


def docker_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=30, check=False).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def test_script_is_valid_bash() -> None:
    subprocess.run(["bash", "-n", str(RUN)], check=True)
    assert os.access(RUN, os.X_OK)
    if shutil.which("shellcheck"):
        proc = subprocess.run(["shellcheck", str(RUN)], capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stdout


def test_manifests_agree() -> None:
    """The workers, the ResourceGroup and ZooKeeper name the same group, service and image."""
    zookeeper = list(yaml.safe_load_all((KIND_DIR / "zookeeper.yaml").read_text()))
    workers = yaml.safe_load((KIND_DIR / "workers.yaml").read_text())
    rg = yaml.safe_load((KIND_DIR / "resourcegroup.yaml").read_text())
    statefulset = next(d for d in zookeeper if d["kind"] == "StatefulSet")
    assert statefulset["spec"]["template"]["spec"]["containers"][0]["image"] == "zookeeper:3.9"
    assert {d["metadata"]["name"] for d in zookeeper if d["kind"] == "Service"} == {"zk", "zookeeper"}
    container = workers["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "rebalanser:dev" and container["command"] == ["rebalanser", "worker"]
    args = dict(a.removeprefix("--").split("=", 1) for a in container["args"] if "=" in a)
    assert args["zk"] == rg["spec"]["zookeeper"]["connect"] == "zookeeper.rebalanser-demo.svc:2181"
    assert args["group"] == f"/rebalanser/rebalanser-demo/{rg['metadata']['name']}"
    assert rg["spec"]["workload"] == {"kind": "Deployment", "name": workers["metadata"]["name"]}
    assert workers["spec"]["replicas"] == 3


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_kind_path() -> None:
    if not docker_answers():
        pytest.skip(SKIP_MESSAGE)
    if shutil.which("kind") is None:
        pytest.skip("kind is not installed: the kind e2e path needs it (https://kind.sigs.k8s.io)")
    env = {**os.environ, "KIND_CLUSTER": f"rebalanser-test-{uuid.uuid4().hex[:6]}", "WAIT_TIMEOUT": "300"}
    try:
        proc = subprocess.run([str(RUN), "up"], cwd=REPO, env=env, capture_output=True, text=True, timeout=1500,
                              check=False)
        output = proc.stdout + proc.stderr
        assert proc.returncode == 0, output[-6000:]
        assert "done: 12 of 12 resources assigned to 3 worker pods" in output
    finally:
        subprocess.run([str(RUN), "down"], cwd=REPO, env=env, capture_output=True, timeout=300, check=False)


def test_kind_path_refuses_without_docker(tmp_path: Path) -> None:
    """Without a Docker engine the script stops at once with a clear message (no half-made cluster)."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "docker").write_text("#!/bin/sh\nexit 1\n")  # a client whose engine does not answer
    (fake / "docker").chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run([str(RUN), "up"], cwd=REPO, env=env, capture_output=True, text=True, timeout=60,
                          check=False)
    assert proc.returncode == 1
    assert "no Docker engine answers" in proc.stderr
