"""Kubelet-confirmed failover on the real cluster: an operator release, groups of worker pods, a tools pod
that signals processes, and the measurements, for ``tests/pods/test_failover_pods.py`` (small) and
``bench/failover.py`` (side by side with session-expiry failover, many kills).

    scene = FailoverScene(kube, out=Path(".pod-failover")).setup()
    scene.deploy("confirmed", "KubeletConfirmed", replicas=3, resources=6)
    scene.stable("confirmed", 3)
    kill = scene.signal("confirmed-worker-…", "KILL")       # the instant (CLOCK_MONOTONIC ns) of the kill
    seconds = scene.reworked("confirmed", victim, instance, resources, kill.ts)
    scene.violations("confirmed")                            # overlaps and token regressions, from the logs

Evidence is the worker pods' own JSON logs (:class:`tests.support.podlogs.PodLogs`). The tools pod
shares the node's PID namespace and the node's kernel, so the instant it prints right before sending a
signal is on the same CLOCK_MONOTONIC as the workers' ``ts``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.support.invariants import Event, first_full_coverage, overlaps, token_regressions
from tests.support.kubectl import Kube, wait_until
from tests.support.podcluster import CLUSTER_DIR, IMAGE, IMAGE_REPOSITORY, IMAGE_TAG, REPO
from tests.support.podlogs import PodLogs
from tests.support.podtools import Tools

NS = "rb-failover"  # the default namespace (and release name); the tools pod goes to <namespace>-tools
#: The cluster's ensemble; REBALANSER_FAILOVER_ZK points a run at another one (e.g. a copy of
#: e2e/cluster/zookeeper.yaml in a namespace of its own, to measure a ZooKeeper setting).
ZK_CONNECT = os.environ.get("REBALANSER_FAILOVER_ZK", "zk.zookeeper.svc.cluster.local:2181")
CHART = REPO / "charts" / "rebalanser-operator"
EXAMPLES = REPO / "examples"
WORKER_LABEL = "rebalanser.io/failover-scene"

#: Sends a signal to every process whose argv has ``--id=<id>`` (a worker) or, for ``operator``, runs
#: ``rebalanser-operator``; prints the CLOCK_MONOTONIC instant taken right before the first signal, then
#: the pids.
SIGNAL_SCRIPT = """
import os, signal, sys, time
sig, target = getattr(signal, "SIG" + sys.argv[1]), sys.argv[2]
then = sys.argv[3:]  # optional: a delay in seconds and a second target (same signal)
def find(target):
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = open(f"/proc/{entry}/cmdline", "rb").read().decode(errors="replace").split("\\0")
        except OSError:
            continue
        if target == "operator":
            if any(a.endswith("rebalanser-operator") for a in argv[:2]):
                found.append(int(entry))
        elif "worker" in argv and "--id=" + target in argv:
            found.append(int(entry))
    return found
pids = find(target)
later = find(then[1]) if then else []
ts = time.monotonic_ns()
for pid in pids:
    os.kill(pid, sig)
if then:
    time.sleep(float(then[0]))
    for pid in later:
        os.kill(pid, sig)
print(ts, *pids, "/", *later)
"""


@dataclass(frozen=True)
class Signalled:
    ts: int  # CLOCK_MONOTONIC ns, right before the signal
    pids: list[int]
    later: list[int] = field(default_factory=list)


def group_manifest(name: str, failover: str, resources: int, *, min_interval: int = 1,
                   adaptive: bool = False, workload: bool = False) -> dict[str, Any]:
    """The ResourceGroup ``name``; ``adaptive`` with ``workload`` is how a user runs it (examples/): the
    interval rises while the workers' Deployment rolls out or churns, up to 30 s."""
    spec: dict[str, Any] = {
        "zookeeper": {"connect": ZK_CONNECT, "sessionTimeoutSeconds": 10},
        "resourceSets": [{"prefix": f"{name}-", "count": resources}],
        "rebalance": {"minIntervalSeconds": min_interval, "maxIntervalSeconds": 30, "adaptive": adaptive},
        "failover": failover,
        "podSelector": {"matchLabels": {"app.kubernetes.io/name": f"{name}-worker"}},
    }
    if workload:
        spec["workloadRef"] = {"apiVersion": "apps/v1", "kind": "Deployment", "name": f"{name}-worker"}
    return {"apiVersion": "rebalanser.io/v1alpha1", "kind": "ResourceGroup", "metadata": {"name": name}, "spec": spec}


def workers_manifest(group: str, replicas: int, *, session_timeout: float = 10.0, tick: float = 0.1) -> dict[str, Any]:
    """examples/workers.yaml for ``group``: T = ``session_timeout``, the instance nonce in the container's
    termination-message file, a fine tick (the failover is measured from the ticks)."""
    doc: dict[str, Any] = yaml.safe_load((EXAMPLES / "workers.yaml").read_text())
    app = f"{group}-worker"
    doc["metadata"] = {"name": app, "labels": {"app.kubernetes.io/name": app, WORKER_LABEL: group}}
    doc["spec"]["replicas"] = replicas
    doc["spec"]["selector"] = {"matchLabels": {"app.kubernetes.io/name": app}}
    doc["spec"]["template"]["metadata"]["labels"] = {"app.kubernetes.io/name": app}
    container = doc["spec"]["template"]["spec"]["containers"][0]
    container["image"] = IMAGE
    container.pop("envFrom", None)  # the group's own ConfigMap would do; the explicit arguments say it here
    assert {"POD_NAMESPACE", "POD_UID", "REBALANSER_CONTAINER"} <= {e["name"] for e in container["env"]}
    container["args"] = [
        f"--zk={ZK_CONNECT}", f"--group=/rebalanser/$(POD_NAMESPACE)/{group}", "--id=$(POD_NAME)",
        f"--session-timeout={session_timeout:g}", "--stop-timeout=10", f"--tick={tick:g}", "--metrics-port=9100",
        "--termination-log=/dev/termination-log", "--simulate-oom", "--json",
        "--log-level=INFO",  # the coordinator's rebalance lines on stderr: where a failover's time went
    ]
    return doc


def node_container() -> str:
    """The kind node's container (``<cluster>-control-plane``), from .cluster/kind.env."""
    values = dict(line.split("=", 1) for line in (CLUSTER_DIR / "kind.env").read_text().splitlines()
                  if "=" in line)
    return f"{values.get('CLUSTER') or os.environ.get('REBALANSER_KIND_CLUSTER', 'rebalanser')}-control-plane"


def host_worker_pids(pod: str, namespace: str) -> list[int]:
    """The host pids of the worker processes with ``--id=<pod>`` whose environment says ``POD_NAMESPACE``
    is ``namespace`` (none where the node's processes are not visible here)."""
    wanted, ns = "--id=" + pod, f"POD_NAMESPACE={namespace}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace").split("\0")
            if "worker" not in argv or wanted not in argv:
                continue
            if ns in Path(f"/proc/{entry}/environ").read_bytes().split(b"\0"):
                found.append(int(entry))
        except OSError:
            continue
    return found


@dataclass
class FailoverScene:
    kube: Kube
    out: Path
    ns: str = NS  # the namespace of the operator release (named alike), the groups and their workers
    logs: dict[str, PodLogs] = field(default_factory=dict)
    operator_log: PodLogs | None = None

    @property
    def tools(self) -> Tools:
        return Tools(self.kube, f"{self.ns}-tools", IMAGE)

    @property
    def operator_selector(self) -> str:
        return f"app.kubernetes.io/name=rebalanser-operator,app.kubernetes.io/instance={self.ns}"

    # ------------------------------------------------------------------------------------ lifecycle

    def setup(self) -> FailoverScene:
        self.out.mkdir(parents=True, exist_ok=True)
        self.teardown_namespace()
        self.tools.create()
        self.tools.purge(ZK_CONNECT, f"/rebalanser/{self.ns}")
        meta = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.ns}}
        self.kube.kubectl("apply", "-f", "-", input=json.dumps(meta))
        self.kube.helm("upgrade", "--install", self.ns, str(CHART), "-n", self.ns, "-f", str(EXAMPLES / "values.yaml"),
                       "--set", f"image.repository={IMAGE_REPOSITORY}", "--set", f"image.tag={IMAGE_TAG}",
                       "--set", "failover.enabled=true", "--set", f"operator.allowedEnsembles={{{ZK_CONNECT}}}",
                       "--wait", "--timeout", "240s", timeout=300)
        self.operator_log = PodLogs(self.kube, namespace=self.ns, selector=self.operator_selector,
                                    dir=self.out / "logs" / "operator", container="operator").start()
        return self

    def teardown_namespace(self) -> None:
        if self.kube.maybe_json("get", "namespace", self.ns) is None:
            return
        # The workers first (the operator releases a group only after its members left), then the groups
        # while the operator still runs, then the operator.
        self.kube.kubectl("delete", "deployment", "-l", f"{WORKER_LABEL}", "-n", self.ns, "--wait=true", check=False,
                          timeout=120)
        self.kube.kubectl("delete", "rg", "--all", "-n", self.ns, "--wait=true", check=False, timeout=120)
        for rg in self.kube.json("get", "rg", "-n", self.ns)["items"]:
            self.kube.kubectl("patch", "rg", rg["metadata"]["name"], "-n", self.ns, "--type=merge",
                              "-p", '{"metadata":{"finalizers":null}}', check=False)
        self.kube.helm("uninstall", self.ns, "-n", self.ns, "--wait", "--timeout", "120s", check=False)
        self.kube.kubectl("delete", "namespace", self.ns, "--wait=false", check=False)
        wait_until(lambda: self.kube.maybe_json("get", "namespace", self.ns) is None, 180, f"namespace {self.ns} stays")

    def close(self) -> None:
        for logs in [*self.logs.values(), *([self.operator_log] if self.operator_log else [])]:
            logs.stop()
        try:
            self.teardown_namespace()
            self.tools.purge(ZK_CONNECT, f"/rebalanser/{self.ns}")
        finally:
            self.tools.delete()

    def deploy(self, group: str, failover: str, *, replicas: int, resources: int, session_timeout: float = 10.0,
               min_interval: int = 1, adaptive: bool = False, workload: bool = False) -> None:
        """The ResourceGroup, then (once the operator has made its group in ZooKeeper: a worker joins only
        a group that exists) its workers."""
        manifest = group_manifest(group, failover, resources, min_interval=min_interval, adaptive=adaptive,
                                  workload=workload)
        self.kube.kubectl("apply", "-n", self.ns, "-f", "-", input=json.dumps(manifest))
        self.synced(group)
        self.kube.kubectl("apply", "-n", self.ns, "-f", "-",
                          input=json.dumps(workers_manifest(group, replicas, session_timeout=session_timeout)))
        self.logs[group] = PodLogs(self.kube, namespace=self.ns, selector=f"app.kubernetes.io/name={group}-worker",
                                   dir=self.out / "logs" / group).start()

    def remove(self, group: str) -> None:
        """Deletes ``group``'s workers (they leave gracefully), then the ResourceGroup; keeps the logs."""
        logs = self.logs.pop(group, None)
        self.kube.kubectl("delete", "deployment", f"{group}-worker", "-n", self.ns, "--wait=true",
                          "--ignore-not-found", check=False, timeout=150)
        if logs is not None:
            logs.stop()
        self.kube.kubectl("delete", "rg", group, "-n", self.ns, "--wait=true", "--ignore-not-found", check=False,
                          timeout=150)

    # ------------------------------------------------------------------------------------ observing

    def synced(self, group: str, timeout: float = 120.0) -> None:
        """Waits for ``ResourcesSynced=True``: the operator has made the group's znodes and resources."""
        def check() -> bool:
            conditions = self.status(group).get("conditions") or []
            return any(c.get("type") == "ResourcesSynced" and c.get("status") == "True" for c in conditions)

        wait_until(check, timeout, lambda: f"{group}: ResourcesSynced never True: {self.status(group)}", poll=0.5)

    def status(self, group: str) -> dict[str, Any]:
        return dict(self.kube.json("get", "rg", group, "-n", self.ns).get("status") or {})

    def stable(self, group: str, members: int, timeout: float = 240.0) -> dict[str, str]:
        """Waits for Stable with ``members`` members, each working; returns resource -> owner pod."""
        last: dict[str, Any] = {}

        def check() -> dict[str, str] | None:
            nonlocal last
            last = self.status(group)
            assignments = {m: rs for m, rs in (last.get("assignments") or {}).items() if rs}
            ok = (last.get("phase") == "Stable" and last.get("members") == members and last.get("resources")
                  and last.get("assigned") == last.get("resources") and len(assignments) == members)
            return {r: m for m, rs in assignments.items() for r in rs} if ok else None

        owners: dict[str, str] = wait_until(check, timeout, lambda: f"{group} not Stable with {members} members: "
                                            f"{json.dumps({k: last.get(k) for k in ('phase', 'members', 'assigned')})}",
                                            poll=1.0)
        return owners

    def effective_interval(self, group: str) -> float | None:
        """The interval the operator last published for ``group`` (its status), in seconds."""
        value = self.status(group).get("effectiveIntervalSeconds")
        return None if value is None else float(value)

    def worker_pods(self, group: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.kube.json(
            "get", "pods", "-n", self.ns, "-l", f"app.kubernetes.io/name={group}-worker")["items"]
        return items

    def held(self, group: str, pod: str, instance: int, at: int) -> set[str]:
        """What the container instance ``instance`` of ``pod`` was working on at ``at`` (CLOCK_MONOTONIC ns),
        by its own events: the resources it was assigned and had not revoked by then."""
        held: set[str] = set()
        for e in self.events(group):
            if (e["id"], e["_pid"]) != (pod, instance) or int(e["ts"]) > at:
                continue
            if e["event"] == "assigned":
                held |= set(e["resources"])
            elif e["event"] == "revoked":
                held -= set(e["resources"])
        return held

    def instance(self, pod: str) -> int:
        (container,) = self.kube.json("get", "pod", pod, "-n", self.ns)["status"]["containerStatuses"]
        return int(container["restartCount"])

    def events(self, group: str) -> list[Event]:
        return self.logs[group].events()

    def violations(self, group: str) -> tuple[list[str], list[str]]:
        events = self.events(group)
        assert events, f"no worker events collected for {group}"
        return overlaps(events), token_regressions(events)

    def operator_lines(self, text: str) -> list[str]:
        """The operator's log lines containing ``text`` (every operator container instance), each once."""
        assert self.operator_log is not None
        lines: dict[str, None] = {}  # each line once (a follower and a --previous fetch may both have it)
        for path in sorted(self.operator_log.dir.glob("*.log")):
            lines.update((line, None) for line in path.read_text(errors="replace").splitlines() if text in line)
        return list(lines)

    # ------------------------------------------------------------------------------------ acting

    def signal(self, target: str, sig: str, *, then: tuple[float, str] | None = None) -> Signalled:
        """``sig`` (KILL, STOP, CONT; USR1 makes a worker exhaust its memory limit) to the worker whose id
        is ``target`` (or ``operator``), and, after ``then[0]`` seconds, to ``then[1]`` too."""
        extra = [f"{then[0]:g}", then[1]] if then else []
        out = self.tools.python(SIGNAL_SCRIPT, sig, target, *extra, timeout=180).split()  # a loaded node is slow
        slash = out.index("/")
        signalled = Signalled(int(out[0]), [int(p) for p in out[1:slash]], [int(p) for p in out[slash + 1:]])
        assert signalled.pids, f"no process found for {target}"
        return signalled

    def kill_from_host(self, target: str) -> Signalled:
        """SIGKILL the worker process of pod ``target`` in this scene's namespace from the host, the way an
        operator would with ``kill -9`` on the node: the node's processes are the host's (one kernel, one
        CLOCK_MONOTONIC). Falls back to the tools pod where the host cannot see them."""
        pids = host_worker_pids(target, self.ns)
        if not pids:
            return self.signal(target, "KILL")
        ts = time.monotonic_ns()
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        return Signalled(ts, pids)

    def cut(self, target: str, *, heal: bool = False) -> int:
        """Drops the ZooKeeper traffic (port 2181, both directions) inside the network namespace of the worker
        whose id is ``target`` (iptables in its pod's namespace, entered from the node); ``heal`` removes
        the rules. Returns the CLOCK_MONOTONIC instant (ns) right before the rules changed."""
        pids = self.signal(target, "CONT").pids  # SIGCONT to a running process changes nothing: it finds it
        docker = "/usr/bin/docker" if Path("/usr/bin/docker").exists() else "docker"
        action = "-D" if heal else "-I"
        ts = time.monotonic_ns()
        for rule in (["INPUT", "-p", "tcp", "--sport", "2181", "-j", "DROP"],
                     ["OUTPUT", "-p", "tcp", "--dport", "2181", "-j", "DROP"]):
            subprocess.run([docker, "exec", node_container(), "nsenter", "-t", str(pids[0]), "-n", "iptables",
                            action, *rule], check=True, capture_output=True, text=True, timeout=30)
        return ts

    def reworked(self, group: str, victim: str, instance: int, resources: set[str], after: int,
                 timeout: float = 120.0) -> float:
        """Seconds from ``after`` until every one of ``resources`` was worked on again by a live instance
        (another pod, or the victim's restarted container)."""
        def covered() -> int | None:
            events = [e for e in self.events(group) if (e["id"], e["_pid"]) != (victim, instance)]
            return first_full_coverage(events, resources, after)

        done = wait_until(covered, timeout, f"{group}: {sorted(resources)} not worked on again within {timeout:.0f}s",
                          poll=0.5)
        return (int(done) - after) / 1e9

    def wait_restarted(self, pod: str, instance: int, timeout: float = 120.0) -> dict[str, Any]:
        def restarted() -> dict[str, Any] | None:
            (cs,) = self.kube.json("get", "pod", pod, "-n", self.ns)["status"]["containerStatuses"]
            return cs if cs["restartCount"] > instance and "running" in cs["state"] else None

        status: dict[str, Any] = wait_until(restarted, timeout, f"the kubelet did not restart {pod}'s container")
        self.logs_of_pod_previous(pod)
        return status

    def logs_of_pod_previous(self, pod: str) -> None:
        for logs in self.logs.values():
            if any(path.name.startswith(pod + ".") for path in logs.dir.glob("*.log")):
                logs.fetch_previous(pod)

    def settle(self, seconds: float) -> None:
        """Lets the group run (evidence accumulates) for ``seconds``; not a synchronisation."""
        time.sleep(seconds)
