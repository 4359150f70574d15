"""The real local cluster (a kind node built here, see docs/controlplane.md) for tests that run pods.

``ensure_cluster()`` runs ``scripts/cluster.sh up`` (idempotent: a healthy cluster is kept; the
first run builds the node image and the ZooKeeper image, which the cache keeps) and
``scripts/build-image.sh`` (the repository image ``rebalanser:dev``, loaded into the node), and
returns a :class:`KubeCluster`. Where Docker cannot run (not root, no apt-get, dockerd does not come
up) it raises :class:`DockerUnavailable` carrying one line; the ``kube_cluster`` fixture turns that
into ``pytest.skip``. The cluster is left running after the session (``make cluster-down`` stops it).

Use it from a conftest.py::

    from tests.support.kube import kube_cluster  # noqa: F401  (the session fixture)

    def test_x(kube_cluster: KubeCluster) -> None:
        kube_cluster.run_kubectl("get", "nodes")
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CLUSTER_SH = REPO / "scripts" / "cluster.sh"
IMAGE_SH = REPO / "scripts" / "build-image.sh"
DOCKER_SH = REPO / "scripts" / "install-docker.sh"
CLUSTER_DIR = REPO / ".cluster"
#: The image every pod of the project runs (the repository's Dockerfile).
IMAGE = os.environ.get("REBALANSER_IMAGE", "rebalanser:dev")
#: ``cluster-up`` on empty caches builds node binaries and images: minutes on 2 cores.
UP_TIMEOUT = 3600.0
#: install-docker.sh's exit status when Docker cannot run here.
DOCKER_UNAVAILABLE_EXIT = 3


class KubeError(RuntimeError):
    """A cluster script failed; the message carries the tail of its output."""


class DockerUnavailable(RuntimeError):
    """Docker cannot run on this machine; the message is one line saying why."""


def _tail(text: str, lines: int = 60) -> str:
    return "\n".join(text.splitlines()[-lines:])


def _run(cmd: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            cmd, cwd=REPO, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"") + (exc.stderr or b"")
        text = out.decode(errors="replace") if isinstance(out, bytes) else str(out)
        raise KubeError(f"{' '.join(cmd)} timed out after {timeout:.0f}s\n{_tail(text)}") from exc


def docker_unavailable_reason() -> str | None:
    """None when a Docker engine answers (installing and starting it if this machine allows), else why not."""
    proc = _run([str(DOCKER_SH)], timeout=900)
    if proc.returncode == 0:
        return None
    lines = [line for line in proc.stderr.splitlines() if line.startswith("docker unavailable:")]
    if proc.returncode == DOCKER_UNAVAILABLE_EXIT and lines:
        return lines[-1]
    raise KubeError(f"install-docker.sh failed (exit {proc.returncode})\n{_tail(proc.stdout + proc.stderr)}")


@dataclass(frozen=True)
class KubeCluster:
    """A running cluster. ``kubeconfig`` is kind's admin kubeconfig (context ``kind-<name>``)."""

    name: str
    kubeconfig: Path
    bin_dir: Path
    server: str
    node_image: str

    @property
    def kubectl(self) -> Path:
        return self.bin_dir / "kubectl"

    @property
    def helm(self) -> Path:
        return self.bin_dir / "helm"

    @property
    def node(self) -> str:
        """The node's name (also its container's name)."""
        return f"{self.name}-control-plane"

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """A process environment with ``KUBECONFIG`` set and ``bin_dir`` first on ``PATH``."""
        env = dict(os.environ if base is None else base)
        env["KUBECONFIG"] = str(self.kubeconfig)
        env["PATH"] = f"{self.bin_dir}{os.pathsep}{env.get('PATH', '')}"
        return env

    def run_kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120.0
    ) -> subprocess.CompletedProcess[str]:
        """``kubectl --kubeconfig KUBECONFIG ARGS...`` with text output; ``check`` raises on failure."""
        proc = subprocess.run(
            [str(self.kubectl), "--kubeconfig", str(self.kubeconfig), *args],
            input=input, capture_output=True, text=True, timeout=timeout, check=False, env=self.env(),
        )
        if check and proc.returncode != 0:
            raise KubeError(f"kubectl {' '.join(args)} failed (exit {proc.returncode}): {proc.stderr}")
        return proc

    def load_image(self, image: str) -> None:
        """Load a local Docker image into the node's container runtime."""
        proc = _run([str(CLUSTER_SH), "load", image], timeout=600)
        if proc.returncode != 0:
            raise KubeError(f"loading {image} failed\n{_tail(proc.stdout + proc.stderr)}")


def _read_env(path: Path) -> dict[str, str]:
    values: dict[str, str] = {}
    for line in path.read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip()] = value.strip()
    return values


def ensure_cluster(*, timeout: float = UP_TIMEOUT) -> KubeCluster:
    """Bring the cluster up (or keep it) and load ``rebalanser:dev`` into it; see the module docstring."""
    reason = docker_unavailable_reason()
    if reason is not None:
        raise DockerUnavailable(reason)
    up = _run([str(CLUSTER_SH), "up"], timeout)
    if up.returncode != 0:
        raise KubeError(f"cluster.sh up failed (exit {up.returncode})\n{_tail(up.stdout + up.stderr)}")
    image = _run([str(IMAGE_SH)], timeout)
    if image.returncode != 0:
        raise KubeError(f"build-image.sh failed (exit {image.returncode})\n{_tail(image.stdout + image.stderr)}")
    values = _read_env(CLUSTER_DIR / "kind.env")
    cluster = KubeCluster(
        name=values["CLUSTER"],
        kubeconfig=Path(values["KUBECONFIG"]),
        bin_dir=CLUSTER_DIR / "bin",
        server=values["SERVER"],
        node_image=values["NODE_IMAGE"],
    )
    upgrade_crd(cluster, timeout)
    return cluster


def upgrade_crd(cluster: KubeCluster, timeout: float) -> None:
    """Applies this checkout's CRD, as docs/operator.md tells users to before every ``helm upgrade``: a
    kept cluster holds the CRD of whichever checkout first installed the chart (Helm installs a chart's
    CRDs once and never upgrades them), and a new field would fail validation against it."""
    shown = _run([str(cluster.helm), "show", "crds", str(REPO / "charts" / "rebalanser-operator")], timeout)
    if shown.returncode != 0:
        raise KubeError(f"helm show crds failed (exit {shown.returncode})\n{_tail(shown.stdout + shown.stderr)}")
    crd = subprocess.run([str(cluster.kubectl), "--kubeconfig", str(cluster.kubeconfig), "apply", "--server-side",
                          "--force-conflicts", "-f", "-"], input=shown.stdout, capture_output=True, text=True,
                         timeout=timeout, check=False)
    if crd.returncode != 0:
        raise KubeError(f"applying the CRD failed (exit {crd.returncode})\n{_tail(crd.stdout + crd.stderr)}")


@pytest.fixture(scope="session")
def kube_cluster() -> Iterator[KubeCluster]:
    """The real cluster with ``rebalanser:dev`` loaded; skips (one line) where Docker cannot run."""
    try:
        cluster = ensure_cluster()
    except DockerUnavailable as exc:
        pytest.skip(f"pod tests skipped: {exc}")
    yield cluster
