"""The local Kubernetes control plane (etcd + kube-apiserver) for e2e tests and demos.

A thin wrapper over ``scripts/cluster.sh controlplane``: ``start_cluster(dir)`` runs
``cluster.sh controlplane up DIR`` (which builds the binaries first when the cache is cold; see
docs/controlplane.md) and returns a :class:`Cluster`; ``Cluster.stop()`` runs
``cluster.sh controlplane down DIR``. There is no controller manager,
scheduler or kubelet: create namespaces explicitly; no Pods ever run.

Typical session fixture::

    @pytest.fixture(scope="session")
    def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
        with start_cluster(tmp_path_factory.mktemp("kube")) as cluster:
            yield cluster
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

REPO = Path(__file__).resolve().parents[2]
CLUSTER_SH = REPO / "scripts" / "cluster.sh"
#: The lightweight control plane's command: ``scripts/cluster.sh controlplane up|down|status DIR``.
CONTROLPLANE = (str(CLUSTER_SH), "controlplane")
BUILD_SH = REPO / "scripts" / "build-controlplane.sh"

#: Upper bound for ``cluster.sh up``: a cold build of kube-apiserver takes tens of minutes on 2 cores.
UP_TIMEOUT = 3600.0
DOWN_TIMEOUT = 120.0


class ClusterError(RuntimeError):
    """``cluster.sh`` failed; the message carries the tail of its output."""


def _tail(text: str, lines: int = 60) -> str:
    return "\n".join(text.splitlines()[-lines:])


def _run_script(args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    try:
        proc = subprocess.run(
            [*CONTROLPLANE, *args],
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"") + (exc.stderr or b"")
        text = out.decode(errors="replace") if isinstance(out, bytes) else str(out)
        raise ClusterError(
            f"cluster.sh controlplane {' '.join(args)} timed out after {timeout:.0f}s\n{_tail(text)}"
        ) from exc
    if proc.returncode != 0:
        raise ClusterError(
            f"cluster.sh controlplane {' '.join(args)} failed (exit {proc.returncode})\n"
            f"{_tail(proc.stdout + proc.stderr)}"
        )
    return proc


def controlplane_built() -> bool:
    """True when the control-plane binaries are already in the cache (no build would be needed)."""
    proc = subprocess.run([str(BUILD_SH), "--bin-dir"], cwd=REPO, capture_output=True, text=True, check=False)
    return proc.returncode == 0


@dataclass
class Cluster:
    """A running control plane. ``kubeconfig`` is an admin (system:masters) kubeconfig."""

    dir: Path
    kubeconfig: Path
    bin_dir: Path
    server: str
    etcd_url: str

    @property
    def kubectl(self) -> Path:
        return self.bin_dir / "kubectl"

    @property
    def helm(self) -> Path:
        return self.bin_dir / "helm"

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """A process environment with ``KUBECONFIG`` set and ``bin_dir`` first on ``PATH``."""
        env = dict(os.environ if base is None else base)
        env["KUBECONFIG"] = str(self.kubeconfig)
        env["PATH"] = f"{self.bin_dir}{os.pathsep}{env.get('PATH', '')}"
        return env

    def run_kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        """Run ``kubectl --kubeconfig KUBECONFIG ARGS...``, capturing text output.

        With ``check`` (default), a non-zero exit raises :class:`ClusterError` with stderr.
        """
        cmd = [str(self.kubectl), "--kubeconfig", str(self.kubeconfig), *args]
        proc = subprocess.run(
            cmd, input=input, capture_output=True, text=True, timeout=timeout, check=False, env=self.env()
        )
        if check and proc.returncode != 0:
            raise ClusterError(f"kubectl {' '.join(args)} failed (exit {proc.returncode}): {proc.stderr}")
        return proc

    def wait_established(self, crd: str, timeout: float = 60.0) -> None:
        """Waits until CustomResourceDefinition ``crd`` is Established. ``kubectl wait`` fails at once,
        instead of waiting, when it reads the definition before the API server gave it any condition
        (``.status.conditions accessor error``): that answer is asked again, within ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            left = max(1, int(deadline - time.monotonic()))
            proc = self.run_kubectl("wait", "--for=condition=Established", f"crd/{crd}", f"--timeout={left}s",
                                    check=False, timeout=left + 30)
            if proc.returncode == 0:
                return
            if "accessor error" not in proc.stderr or time.monotonic() > deadline:
                raise ClusterError(f"CRD {crd} not Established within {timeout:g} s: {proc.stderr}")
            time.sleep(0.2)

    def create_namespace(self, name: str) -> None:
        """Create a namespace if it does not exist (there is no controller manager to do it)."""
        manifest = f"apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {name}\n"
        self.run_kubectl("apply", "-f", "-", input=manifest)

    def is_up(self) -> bool:
        proc = subprocess.run(
            [*CONTROLPLANE, "status", str(self.dir)], cwd=REPO, capture_output=True, text=True, check=False
        )
        return proc.returncode == 0

    def stop(self) -> None:
        """Stop etcd and kube-apiserver (idempotent)."""
        _run_script(["down", str(self.dir)], DOWN_TIMEOUT)

    def __enter__(self) -> Cluster:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _read_env(path: Path) -> dict[str, str]:
    values: dict[str, str] = {}
    for line in path.read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip()] = value.strip()
    return values


def start_cluster(dir: Path, *, timeout: float = UP_TIMEOUT) -> Cluster:
    """Start (or reuse, if already up) the control plane whose state lives in ``dir``.

    Builds the binaries first if the cache is cold. Raises :class:`ClusterError` on failure.
    The returned :class:`Cluster` is also a context manager that stops the cluster on exit.
    """
    dir = Path(dir).resolve()
    _run_script(["up", str(dir)], timeout)
    values = _read_env(dir / "cluster.env")
    return Cluster(
        dir=dir,
        kubeconfig=dir / "kubeconfig",
        bin_dir=dir / "bin",
        server=values["SERVER"],
        etcd_url=values.get("ETCD_URL", ""),
    )
