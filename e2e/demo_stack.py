"""The processes behind ``make demo``: ZooKeeper, the control plane, the chart, the operator, the workers.

Every process the demo starts is recorded in ``STATE/pids.json`` (pid and command line), so a later run
can stop what a killed run left behind, and tests can check that nothing is left. Workers and the
operator run in their own sessions: a Ctrl-C in the terminal reaches only the demo, which then stops
them in order.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from base64 import b64encode
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient

from e2e.lab.cluster import CONTROLPLANE, Cluster, ClusterError, start_cluster
from e2e.lab.zk import ZkCluster, free_port, make_cluster

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
CHART = REPO / "charts" / "rebalanser-operator"
RELEASE = "rebalanser-operator"  # the chart's full name, and its ServiceAccount's name
OPERATOR_NAMESPACE = "rebalanser-system"
NAMESPACE = "demo"
GROUP = "orders"
GROUP_PATH = f"/rebalanser/{NAMESPACE}/{GROUP}"
PREFIX = "orders-"

Say = Callable[[str], None]


class DemoError(RuntimeError):
    """A setup step failed in a way the demo cannot work around."""


@dataclass(frozen=True)
class Settings:
    state_dir: Path
    workers: int = 3
    resources: int = 12
    session_timeout: float = 4.0
    with_cluster: bool = True

    def member_ids(self) -> list[str]:
        return [f"worker-{i}" for i in range(1, self.workers + 1)]


# ------------------------------------------------------------------------------------------ processes


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def pid_alive(pid: int, cmdline: str | None = None) -> bool:
    """Running (not a zombie) and, when ``cmdline`` is given, still that command."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    if stat.rsplit(")", 1)[-1].split()[0] in ("Z", "X"):
        return False
    return cmdline is None or _cmdline(pid) == cmdline


@dataclass
class PidRegistry:
    """``STATE/pids.json``: every process started by a demo run, as ``{name, pid, cmdline}``."""

    path: Path
    entries: list[dict[str, Any]] = field(default_factory=list)

    def record(self, name: str, pid: int) -> None:
        cmdline = _cmdline(pid)
        for _ in range(20):  # a launcher that re-executes itself (java) briefly shows no command line
            if cmdline:
                break
            time.sleep(0.05)
            cmdline = _cmdline(pid)
        self.entries.append({"name": name, "pid": pid, "cmdline": cmdline})
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(self.entries, indent=1) + "\n")

    def load(self) -> None:
        try:
            self.entries = json.loads(self.path.read_text())
        except (OSError, ValueError):
            self.entries = []

    def alive(self) -> list[dict[str, Any]]:
        return [e for e in self.entries if pid_alive(int(e["pid"]), str(e["cmdline"]))]

    def kill_alive(self, timeout: float = 10.0) -> list[dict[str, Any]]:
        """SIGTERM, then SIGKILL, whatever recorded process still runs; returns what was found."""
        found = self.alive()
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for entry in self.alive():
                try:
                    os.kill(int(entry["pid"]), sig)
                except OSError:
                    pass
            deadline = time.monotonic() + timeout
            while self.alive() and time.monotonic() < deadline:
                time.sleep(0.1)
        return found


class Interrupted(BaseException):
    """SIGINT/SIGTERM/SIGHUP: leave whatever is running and clean up (BaseException: no handler swallows it)."""


HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_gate: dict[str, Any] = {"held": 0, "pending": None}


def on_signal(signum: int, frame: object) -> None:
    """The demo's handler for HANDLED: raises :class:`Interrupted`, or defers it inside ``signals_deferred``."""
    name = signal.Signals(signum).name
    if _gate["held"]:
        _gate["pending"] = name
        return
    raise Interrupted(name)


@contextmanager
def signals_deferred() -> Iterator[None]:
    """Defers :class:`Interrupted` while a child is started and recorded, so none goes untracked.

    (Blocking the signals instead would leave them blocked in the child: the mask survives exec.)
    """
    _gate["held"] += 1
    try:
        yield
    finally:
        _gate["held"] -= 1
        pending = _gate["pending"]
        if not _gate["held"] and pending:
            _gate["pending"] = None
            raise Interrupted(pending)


def stop_process(proc: subprocess.Popen[bytes], timeout: float) -> None:
    """SIGTERM, wait, SIGKILL."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def stream(cmd: list[str], say: Say, prefix: str = "  ") -> tuple[int, str]:
    """Runs ``cmd`` in its own session, echoing each output line as it comes; kills the group if interrupted.

    Returns the exit code and the last line.
    """
    proc = subprocess.Popen(
        cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        text=True, bufsize=1, start_new_session=True,
    )
    last = ""
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            last = line.rstrip()
            say(prefix + last)
        return proc.wait(), last
    except BaseException:
        _kill_group(proc)
        raise


def _kill_group(proc: subprocess.Popen[str]) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except OSError:
            return
        try:
            proc.wait(10)
            return
        except subprocess.TimeoutExpired:
            continue


def wait_until(predicate: Callable[[], bool], timeout: float, poll: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll)
    return True


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


# ------------------------------------------------------------------------------------------ the stack


@dataclass
class Stack:
    settings: Settings
    say: Say
    zk: ZkCluster | None = None
    cluster: Cluster | None = None
    operator: subprocess.Popen[bytes] | None = None
    operator_identity: str = ""
    workers: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    registry: PidRegistry = field(init=False)

    def __post_init__(self) -> None:
        self.registry = PidRegistry(self.settings.state_dir / "pids.json")

    @property
    def state(self) -> Path:
        return self.settings.state_dir

    @property
    def cluster_dir(self) -> Path:
        return self.state / "cluster"

    @property
    def hosts(self) -> str:
        assert self.zk is not None, "ZooKeeper is not started"
        return self.zk.hosts

    @property
    def kube(self) -> Cluster:
        assert self.cluster is not None, "the control plane is not started"
        return self.cluster

    # -------------------------------------------------------------------------------- leftovers

    def reap_stale(self) -> None:
        """Stops what an earlier run in the same state dir left behind (e.g. after ``kill -9``)."""
        self.registry.load()
        found = self.registry.kill_alive()
        if found:
            self.say(f"stopped {len(found)} processes left by an earlier run: "
                     + ", ".join(f"{e['name']} ({e['pid']})" for e in found))
        if (self.cluster_dir / "cluster.env").exists() or list(self.cluster_dir.glob("*.pid")):
            self._cluster_down()
        shutil.rmtree(self.state / "zk", ignore_errors=True)
        self.registry.entries = []
        self.state.mkdir(parents=True, exist_ok=True)
        self.registry.path.write_text("[]\n")

    # -------------------------------------------------------------------------------- ZooKeeper

    def start_zookeeper(self) -> None:
        self.say("resolving ZooKeeper's jars with scripts/install-zookeeper.sh (Maven fetches them the first time):")
        code, lib = stream([str(REPO / "scripts" / "install-zookeeper.sh")], self.say)
        if code != 0:
            raise DemoError(f"scripts/install-zookeeper.sh failed (exit {code}): it needs Java 17 and Maven")
        self.say("starting ZooKeeper (a real server)")
        self.zk = make_cluster(self.state / "zk", size=1, lib=Path(lib))
        server = self.zk.servers[0]
        with signals_deferred():
            server.start()
            assert server.proc is not None
            self.registry.record("zookeeper", server.proc.pid)
        self.zk.wait_serving()
        if not self.registry.entries[-1]["cmdline"]:
            self.registry.entries.pop()
            self.registry.record("zookeeper", server.proc.pid)
        self.say(f"ZooKeeper serving at {self.zk.hosts} (pid {server.proc.pid}, data in {server.data_dir})")

    def seed_resources(self) -> None:
        """Creates ``G/resources/orders-N`` directly, as an administrator may (the operator's job otherwise)."""
        zk = KazooClient(hosts=self.hosts, timeout=10)
        zk.start(timeout=15)
        try:
            for i in range(self.settings.resources):
                zk.ensure_path(f"{GROUP_PATH}/resources/{PREFIX}{i}")
        finally:
            zk.stop()
            zk.close()
        self.say(f"created {self.settings.resources} resource znodes under {GROUP_PATH}/resources")

    # -------------------------------------------------------------------------------- control plane

    def start_control_plane(self) -> None:
        self.say("starting the control plane (etcd + kube-apiserver) with scripts/cluster.sh controlplane up; "
                 "the first run builds it from Go modules (~9 min cold, a progress line every 30 s):")
        started = time.monotonic()
        code, _ = stream([*CONTROLPLANE, "up", str(self.cluster_dir)], self.say)
        if code != 0:
            raise DemoError(f"scripts/cluster.sh controlplane up failed (exit {code}); "
                            "without Go, run with --no-cluster")
        self.cluster = start_cluster(self.cluster_dir, timeout=120)
        for name in ("etcd", "kube-apiserver"):
            pid_file = self.cluster_dir / f"{name}.pid"
            if pid_file.exists():
                self.registry.record(name, int(pid_file.read_text().strip()))
        self.say(f"control plane up at {self.kube.server} in {time.monotonic() - started:.0f}s "
                 f"(kubeconfig {self.kube.kubeconfig})")

    def install_chart(self) -> None:
        kube = self.kube
        kube.create_namespace(NAMESPACE)
        self.say(f"helm install {RELEASE} charts/rebalanser-operator -n {OPERATOR_NAMESPACE} "
                 f"(CRD, ServiceAccount, RBAC for namespace {NAMESPACE}, Deployment, Service)")
        proc = subprocess.run(
            [str(kube.helm), "upgrade", "--install", RELEASE, str(CHART), "--namespace", OPERATOR_NAMESPACE,
             "--create-namespace", "--set", f"rbac.watchNamespaces={{{NAMESPACE}}}",
             "--kubeconfig", str(kube.kubeconfig)],
            capture_output=True, text=True, env=kube.env(), timeout=120, check=False, stdin=subprocess.DEVNULL,
        )
        if proc.returncode != 0:
            raise DemoError(f"helm install failed: {proc.stderr.strip()}")
        kube.wait_established("resourcegroups.rebalanser.io")
        self.say("chart installed; CRD resourcegroups.rebalanser.io established. No kubelet here, so the "
                 "chart's Deployment gets no Pod: the operator runs on this host instead")

    def operator_kubeconfig(self) -> Path:
        """A kubeconfig with the chart's ServiceAccount token, so the chart's RBAC is what the operator gets."""
        kube = self.kube
        try:
            token = kube.run_kubectl("create", "token", RELEASE, "-n", OPERATOR_NAMESPACE,
                                     "--duration=24h").stdout.strip()
        except ClusterError as exc:
            self.say(f"no ServiceAccount token ({exc}); the operator uses the admin kubeconfig")
            self.operator_identity = "admin"
            return kube.kubeconfig
        ca = b64encode((kube.dir / "pki" / "ca.crt").read_bytes()).decode()
        path = self.state / "operator.kubeconfig"
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "demo", "cluster": {"server": kube.server, "certificate-authority-data": ca}}],
            "users": [{"name": "operator", "user": {"token": token}}],
            "contexts": [{"name": "operator", "context": {"cluster": "demo", "user": "operator"}}],
            "current-context": "operator",
        }))
        path.chmod(0o600)
        self.operator_identity = f"ServiceAccount {OPERATOR_NAMESPACE}/{RELEASE}"
        return path

    def start_operator(self) -> None:
        kubeconfig = self.operator_kubeconfig()
        metrics, liveness = free_port(), free_port()
        log = self.state / "operator.log"
        cmd = [str(BIN / "rebalanser-operator"), "--namespace", NAMESPACE, "--standalone",
               "--metrics-port", str(metrics), "--liveness", f"http://127.0.0.1:{liveness}/healthz",
               "--log-format", "plain"]
        with open(log, "ab") as out, signals_deferred():
            self.operator = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                env={**self.kube.env(), "KUBECONFIG": str(kubeconfig),
                     "REBALANSER_ALLOWED_ENSEMBLES": self.hosts},  # the demo's own ZooKeeper, nothing else
            )
            self.registry.record("operator", self.operator.pid)
        if not wait_until(lambda: self._operator_live(liveness), 90, poll=0.3):
            raise DemoError(f"the operator did not become live; last lines of {log}:\n{_tail(log)}")
        self.say(f"operator running (pid {self.operator.pid}, as {self.operator_identity}, "
                 f"metrics http://127.0.0.1:{metrics}/metrics, log {log})")

    def _operator_live(self, port: int) -> bool:
        assert self.operator is not None
        if self.operator.poll() is not None:
            raise DemoError(f"the operator exited ({self.operator.returncode}):\n{_tail(self.state / 'operator.log')}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def resource_group(self) -> dict[str, Any]:
        return {
            "apiVersion": "rebalanser.io/v1alpha1", "kind": "ResourceGroup",
            "metadata": {"name": GROUP, "namespace": NAMESPACE},
            "spec": {
                "zookeeper": {"connect": self.hosts},
                "resourceSets": [{"prefix": PREFIX, "count": self.settings.resources}],
                "algorithm": "ResourceBarrier",
                "rebalance": {"minIntervalSeconds": 1, "maxIntervalSeconds": 10, "adaptive": True},
            },
        }

    def apply_resource_group(self) -> None:
        manifest = json.dumps(self.resource_group())
        (self.state / "resourcegroup.json").write_text(manifest + "\n")
        self.kube.run_kubectl("apply", "-f", "-", input=manifest)
        self.say(f"applied ResourceGroup {NAMESPACE}/{GROUP}: resourceSets [{{prefix: {PREFIX}, "
                 f"count: {self.settings.resources}}}], ResourceBarrier, minIntervalSeconds 1 "
                 f"(manifest in {self.state / 'resourcegroup.json'})")

    def wait_for_group(self, timeout: float = 120.0) -> None:
        """Waits until the operator has created the group: a worker refuses a group that does not exist."""
        zk = KazooClient(hosts=self.hosts, timeout=10)
        zk.start(timeout=15)
        try:
            appeared = threading.Event()
            if zk.exists(f"{GROUP_PATH}/resources", watch=lambda _event: appeared.set()) is None:
                deadline = time.monotonic() + timeout
                while zk.exists(f"{GROUP_PATH}/resources", watch=lambda _event: appeared.set()) is None:
                    if not appeared.wait(max(0.0, deadline - time.monotonic())):
                        raise RuntimeError(f"the operator did not create {GROUP_PATH} within {timeout:.0f} s")
                    appeared.clear()
        finally:
            zk.stop()
            zk.close()
        self.say(f"the operator created {GROUP_PATH} in ZooKeeper")

    # -------------------------------------------------------------------------------- workers

    def start_worker(self, member_id: str) -> int:
        log_dir = self.state / "workers"
        log_dir.mkdir(parents=True, exist_ok=True)
        cmd = [str(BIN / "rebalanser"), "worker", "--zk", self.hosts, "--group", GROUP_PATH, "--id", member_id,
               "--json", "--session-timeout", str(self.settings.session_timeout), "--min-interval", "1",
               "--tick", "1", "--stop-timeout", "10"]
        with open(log_dir / f"{member_id}.log", "ab") as out, signals_deferred():
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
            self.workers[member_id] = proc
            self.registry.record(member_id, proc.pid)
        return proc.pid

    def kill_worker(self, member_id: str) -> int:
        proc = self.workers.pop(member_id)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        return proc.pid

    def worker_pid(self, member_id: str) -> int | None:
        proc = self.workers.get(member_id)
        return proc.pid if proc is not None and proc.poll() is None else None

    def worker_exit(self, member_id: str) -> int | None:
        """The exit code of a worker that ended by itself (None while it runs or when the demo killed it)."""
        proc = self.workers.get(member_id)
        return proc.poll() if proc is not None else None

    def operator_alive(self) -> bool:
        return self.operator is not None and self.operator.poll() is None

    # -------------------------------------------------------------------------------- cleanup

    def cleanup(self) -> None:
        steps: list[tuple[str, Callable[[], None]]] = [
            ("workers", self._stop_workers), ("operator", self._stop_operator),
            ("control plane", self._cluster_down), ("ZooKeeper", self._stop_zookeeper),
        ]
        for name, step in steps:
            try:
                step()
            except Exception as exc:  # keep going: the remaining steps still matter
                self.say(f"cleanup of the {name} failed: {exc}")
        left = self.registry.kill_alive()
        if left:
            self.say("killed leftovers: " + ", ".join(f"{e['name']} ({e['pid']})" for e in left))
        pids = ", ".join(f"{e['name']} {e['pid']}" for e in self.registry.entries)
        self.say(f"clean: no demo process left ({pids or 'none started'}); logs in {self.state}")

    def _stop_workers(self) -> None:
        if not self.workers:
            return
        self.say(f"stopping workers {', '.join(sorted(self.workers))} (SIGTERM: they stop their resources and leave)")
        for proc in self.workers.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.workers.values():
            stop_process(proc, 20)
        self.workers.clear()

    def _stop_operator(self) -> None:
        if self.operator is None:
            return
        self.say(f"stopping the operator (pid {self.operator.pid})")
        stop_process(self.operator, 20)
        self.operator = None

    def _cluster_down(self) -> None:
        if not self.cluster_dir.exists():
            return
        self.say("stopping the control plane "
                 "(scripts/cluster.sh controlplane down: etcd data, PKI and kubeconfig removed)")
        subprocess.run([*CONTROLPLANE, "down", str(self.cluster_dir)], cwd=REPO, capture_output=True,
                       stdin=subprocess.DEVNULL, timeout=120, check=False, start_new_session=True)
        self.cluster = None

    def _stop_zookeeper(self) -> None:
        if self.zk is None:
            return
        self.say("stopping ZooKeeper")
        self.zk.stop()
        self.zk = None
