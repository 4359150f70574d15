"""Operator replicas on the real cluster, installed as users install them: the chart with
``examples/values.yaml`` and ``examples/values-ha.yaml`` (3 replicas, the operator group on the cluster's
ZooKeeper ensemble), the operator's ZooKeeper identity from a Secret, ``failover.enabled``; for
``tests/pods/test_replicas_pods.py`` and ``bench/failover.py``'s replica cells.

    scene = ReplicaScene(kube, out=Path(".pod-replicas"), ns="rb-ha").setup(groups=30, worker_group="fo")
    scene.workers.stable("fo", 2)                       # the worker group's status (FailoverScene's checks)
    spans = check_one_at_a_time(scene.lines())          # the replicas' own log lines (tests.support.replicalines)
    replica, worker = scene.signal(("operator", pod), ("worker", worker_pod), sig="KILL")
    scene.close()                                       # the cluster as it was

The release is its own: named like its namespace, serving that namespace alone (the chart's default), with
a path root of its own (``/<ns>/{namespace}``: an operator with an identity closes the nodes above its
groups, which must never be the other pod tests' ``/rebalanser``). Its operator group is the chart's
default, ``/rebalanser-operator/<ns>``. Every cluster-scoped object it installs (the fence's admission
policy and binding, the ClusterRoles) goes with ``helm uninstall``; :meth:`close` also deletes its znodes
(with the identity: nobody else may).

Faults come from a small script that finds a process by its pod (``POD_NAME`` and ``POD_NAMESPACE`` in its
environment) and signals it, printing the CLOCK_MONOTONIC and wall-clock instants taken right before:
run on this host, which shares the kind node's kernel (one clock; the node's processes are this host's),
or, where this host cannot see them, in a tools pod with the node's PID namespace.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.support.failoverscene import ZK_CONNECT, FailoverScene, group_manifest, workers_manifest
from tests.support.kubectl import Kube, wait_until
from tests.support.podcluster import IMAGE, IMAGE_REPOSITORY, IMAGE_TAG, REPO
from tests.support.podlogs import PodLogs
from tests.support.podtools import Tools
from tests.support.replicalines import (
    Handover,
    Line,
    check_one_at_a_time,
    closed_session,
    handovers,
    intervals,
    parse,
    serving_now,
    taken_after,
)
from tests.support.workergaps import tick_gaps_after, victim_logged

CHART = REPO / "charts" / "rebalanser-operator"
EXAMPLES = REPO / "examples"
#: The cluster's three ZooKeeper servers (e2e/cluster/zookeeper.yaml), as examples/values-ha.yaml names an ensemble.
ZK_SERVERS = ",".join(f"zk-{i}.zk-hs.zookeeper.svc.cluster.local:2181" for i in range(3))
IDENTITY_SECRET = "rebalanser-zk-identity"
IDENTITY_USER, IDENTITY_PASSWORD = "rebalanser-operator", "replicas-operator-password-3f6a9c1e7b2d4058"
REPLICAS = 3
T = 10.0  # the replicas' and the workers' session timeout

#: Signals processes found by pod: argv ``SIG kind:namespace:pod ...`` (kind ``operator`` or ``worker``),
#: in that order, as fast as it can; prints ``<monotonic ns>,<wall s>,<pid>+<pid>`` per target (each
#: instant taken right before that target's signal), or exits 3 naming the targets it did not find.
SIGNAL_SCRIPT = r"""
import os, signal, sys, time
sig = getattr(signal, "SIG" + sys.argv[1])
targets = [t.split(":", 2) for t in sys.argv[2:]]
def find(kind, namespace, pod):
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = open(f"/proc/{entry}/cmdline", "rb").read().decode(errors="replace").split("\0")
            if kind == "operator":
                if not any(a.endswith("rebalanser-operator") for a in argv[:2]):
                    continue
            elif not ("worker" in argv and any(a.endswith("/rebalanser") or a == "rebalanser" for a in argv[:2])):
                continue
            env = open(f"/proc/{entry}/environ", "rb").read().split(b"\0")
        except OSError:
            continue
        if f"POD_NAME={pod}".encode() in env and f"POD_NAMESPACE={namespace}".encode() in env:
            found.append(int(entry))
    return found
pids = [find(*t) for t in targets]
missing = [":".join(t) for t, p in zip(targets, pids) if not p]
if missing:
    print("missing", *missing)
    sys.exit(3)
out = []
for found in pids:
    wall, ts = time.time(), time.monotonic_ns()
    for pid in found:
        os.kill(pid, sig)
    out.append(f"{ts},{wall:.6f}," + "+".join(map(str, found)))
print(*out)
"""

#: With the operator's identity: deletes each path given (recursively), then each parent given once empty.
PURGE_SCRIPT = """
import sys
from kazoo.client import KazooClient
from kazoo.exceptions import NotEmptyError, NoNodeError
zk = KazooClient(hosts=sys.argv[1], timeout=10, auth_data=[("digest", sys.argv[2])])
zk.start(timeout=30)
for path in sys.argv[3:]:
    try:
        if path.startswith("?"):
            zk.delete(path[1:])
        elif zk.exists(path):
            zk.delete(path, recursive=True)
    except (NotEmptyError, NoNodeError):
        pass
zk.stop()
"""


@dataclass(frozen=True)
class Fault:
    """One signalled process: the instants right before its signal (CLOCK_MONOTONIC ns, wall-clock s)."""

    ts: int
    wall: float
    pids: tuple[int, ...]


@dataclass(frozen=True)
class KillOutcome:
    """A replica SIGKILLed, then a worker of a group it served: what the logs show."""

    server: str  # the killed replica instance (``<pod>#<instance>``)
    taken: dict[str, float]  # each group it served -> seconds from its kill to another replica's serve line
    victim: str  # the worker pod
    held: int  # the resources the worker instance held at its kill
    worked_again_s: float  # from the worker's kill until all of them were worked on again
    gaps: dict[str, float]  # resource -> the victim's last tick of it -> the next tick by another instance
    ended: list[str]  # the replicas' lines saying they ended the killed replica's membership
    caught: list[str]  # the replicas' lines saying they closed the worker's session (failed it over)
    load1: float


def parse_faults(out: str) -> list[Fault]:
    faults = []
    for item in out.split():
        ts, wall, pids = item.split(",")
        faults.append(Fault(int(ts), float(wall), tuple(int(p) for p in pids.split("+"))))
    return faults


def values(ns: str) -> dict[str, Any]:
    """The test's own values, over examples/values.yaml and examples/values-ha.yaml: the image under test,
    the cluster's ensemble for the operator group, the identity, a path root of its own, failover."""
    return {
        "image": {"repository": IMAGE_REPOSITORY, "tag": IMAGE_TAG},
        "replicaGroup": {"zookeeper": ZK_SERVERS, "sessionTimeoutSeconds": int(T)},
        "zookeeperIdentity": {"secretName": IDENTITY_SECRET},
        "operator": {"pathRoot": f"/{ns}/{{namespace}}", "allowedEnsembles": [ZK_CONNECT]},
        "failover": {"enabled": True},
        "uninstallCheck": {"enabled": False},  # close() deletes the groups first; the hook's Job would only wait
    }


def groups_manifest(names: list[str], resources: int = 2) -> dict[str, Any]:
    """ResourceGroups without workers: each one is a resource of the operator group, served, mirrored."""
    items = [{"apiVersion": "rebalanser.io/v1alpha1", "kind": "ResourceGroup", "metadata": {"name": name},
              "spec": {"zookeeper": {"connect": ZK_CONNECT, "sessionTimeoutSeconds": int(T)},
                       "resourceSets": [{"prefix": "r-", "count": resources}],
                       "rebalance": {"minIntervalSeconds": 1}}} for name in names]
    return {"apiVersion": "v1", "kind": "List", "items": items}


@dataclass
class ReplicaScene:
    kube: Kube
    out: Path
    ns: str = "rb-ha"
    operator_log: PodLogs | None = None
    #: member (``<pod>#<instance>``) -> the wall-clock instant it was killed or frozen (replicalines' ``cut``)
    cut: dict[str, float] = field(default_factory=dict)
    workers: FailoverScene = field(init=False)

    def __post_init__(self) -> None:
        # The worker groups' checks and evidence (stable, held, reworked, violations) are FailoverScene's,
        # on this release's namespace.
        self.workers = FailoverScene(self.kube, self.out, ns=self.ns)

    @property
    def tools(self) -> Tools:
        return Tools(self.kube, f"{self.ns}-tools", IMAGE)

    @property
    def selector(self) -> str:
        return f"app.kubernetes.io/name=rebalanser-operator,app.kubernetes.io/instance={self.ns}"

    @property
    def deployment(self) -> str:
        return f"deployment/{self.ns}-rebalanser-operator"

    @property
    def operator_group(self) -> str:
        return f"/rebalanser-operator/{self.ns}"

    # ------------------------------------------------------------------------------------ lifecycle

    def setup(self, groups: list[str], worker_group: str | None = None) -> ReplicaScene:
        """Namespace, identity Secret, the groups (and ``worker_group``, KubeletConfirmed, without its
        workers yet), then the release; returns once ``REPLICAS`` replicas are Ready (each a member of the
        operator group: the readiness probe says so)."""
        self.out.mkdir(parents=True, exist_ok=True)
        self.workers.teardown_namespace()
        self.tools.create()
        self.purge()
        self.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.ns}}, namespaced=False)
        data = {"username": IDENTITY_USER, "password": IDENTITY_PASSWORD}
        self.apply({"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": {"name": IDENTITY_SECRET},
                    "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}})
        self.apply(groups_manifest(groups))
        if worker_group is not None:
            self.apply(group_manifest(worker_group, "KubeletConfirmed", 6))
        own = self.out / "values-test.yaml"
        own.write_text(yaml.safe_dump(values(self.ns)))
        self.kube.helm("upgrade", "--install", self.ns, str(CHART), "-n", self.ns, "-f", str(EXAMPLES / "values.yaml"),
                       "-f", str(EXAMPLES / "values-ha.yaml"), "-f", str(own), timeout=120)
        self.operator_log = PodLogs(self.kube, namespace=self.ns, selector=self.selector,
                                    dir=self.out / "logs" / "operator", container="operator").start()
        self.workers.operator_log = self.operator_log
        self.wait_ready(REPLICAS)
        return self

    def deploy_workers(self, group: str, replicas: int) -> None:
        """The group's worker pods (examples/workers.yaml, T = 10 s, a 0.1 s tick), once the group is synced."""
        self.workers.synced(group)
        doc = workers_manifest(group, replicas, session_timeout=T)
        container = doc["spec"]["template"]["spec"]["containers"][0]
        container["args"] = [f"--group=/{self.ns}/$(POD_NAMESPACE)/{group}" if a.startswith("--group=") else a
                             for a in container["args"]]
        self.apply(doc)
        self.workers.logs[group] = PodLogs(self.kube, namespace=self.ns,
                                           selector=f"app.kubernetes.io/name={group}-worker",
                                           dir=self.out / "logs" / group).start()

    def apply(self, obj: dict[str, Any], namespaced: bool = True) -> None:
        args = ["-n", self.ns] if namespaced else []
        self.kube.kubectl("apply", *args, "-f", "-", input=json.dumps(obj), timeout=120)

    def purge(self) -> None:
        """This release's znodes: its path root's top and its operator group (and the operator group's
        parent once empty), with the identity."""
        self.tools.purge(ZK_CONNECT, f"/{self.ns}", self.operator_group, "?/rebalanser-operator",
                         identity=f"{IDENTITY_USER}:{IDENTITY_PASSWORD}")

    def close(self) -> None:
        """Workers, groups (served to their deletion by the replicas), the release, the namespace, the znodes,
        the tools pod: the cluster as it was."""
        for logs in self.workers.logs.values():
            logs.stop()
        self.workers.logs.clear()
        try:
            self.workers.teardown_namespace()
            self.purge()
        finally:
            if self.operator_log is not None:
                self.operator_log.stop()
            self.tools.delete()

    # ------------------------------------------------------------------------------------ observing

    def pods(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.kube.json("get", "pods", "-n", self.ns, "-l", self.selector)["items"]
        return items

    def ready(self) -> list[str]:
        """The replicas' pods that are Ready and not terminating."""
        return sorted(p["metadata"]["name"] for p in self.pods()
                      if not p["metadata"].get("deletionTimestamp") and _ready(p))

    def wait_ready(self, count: int, timeout: float = 180.0) -> list[str]:
        """Until exactly ``count`` replicas are Ready (none terminating); their pods' names."""
        def check() -> list[str] | None:
            names = self.ready()
            return names if len(names) == count else None

        found: list[str] = wait_until(check, timeout, lambda: f"{count} operator replicas Ready: "
                                      f"{self.describe_pods()}", poll=1.0)
        return found

    def describe_pods(self) -> str:
        return ", ".join(f"{p['metadata']['name']} ready={_ready(p)} restarts="
                         f"{[c.get('restartCount') for c in p.get('status', {}).get('containerStatuses', [])]}"
                         for p in self.pods())

    def lines(self) -> list[Line]:
        """Every replica line of every operator container instance (member ``<pod>#<instance>``), by time."""
        assert self.operator_log is not None
        found: set[Line] = set()
        for path in sorted(self.operator_log.dir.glob("*.log")):
            pod, instance = path.name.removesuffix(".log").removesuffix(".previous").rsplit(".", 1)
            found.update(parse(path.read_text(errors="replace"), member=f"{pod}#{instance}"))
        return sorted(found, key=lambda line: (line.at, line.kind != "stop"))

    def operator_text(self) -> str:
        assert self.operator_log is not None
        return "\n".join(p.read_text(errors="replace") for p in sorted(self.operator_log.dir.glob("*.log")))

    def statuses(self) -> dict[str, dict[str, Any]]:
        items = self.kube.json("get", "rg", "-n", self.ns)["items"]
        return {f"{self.ns}/{rg['metadata']['name']}": dict(rg.get("status") or {}) for rg in items}

    def instance(self, pod: str) -> int:
        """The restart count of ``pod``'s operator container (its current instance)."""
        status = self.kube.json("get", "pod", pod, "-n", self.ns)["status"]
        return next(int(c["restartCount"]) for c in status["containerStatuses"] if c["name"] == "operator")

    # ------------------------------------------------------------------------------------ acting

    def signal(self, *targets: tuple[str, str], sig: str = "KILL") -> list[Fault]:
        """``sig`` to each target, ``("operator", pod)`` or ``("worker", pod)`` of this namespace, in order,
        back to back; from this host, else from the tools pod."""
        args = [sig, *(f"{kind}:{self.ns}:{pod}" for kind, pod in targets)]
        host = subprocess.run([sys.executable, "-c", SIGNAL_SCRIPT, *args], capture_output=True, text=True,
                              timeout=60, check=False)
        if host.returncode == 0:
            return parse_faults(host.stdout)
        out = self.tools.python(SIGNAL_SCRIPT, *args, timeout=120)
        return parse_faults(out)

    def settled(self, groups: set[str], want: Callable[[dict[str, str]], bool] = lambda _: True,
                timeout: float = 90.0) -> dict[str, str]:
        """Waits until each of ``groups`` (``ns/name``) has one server by the logs, checked one at a time
        (:func:`check_one_at_a_time` with :attr:`cut`), and ``want`` holds of group -> member; returns that.
        A check that fails meanwhile (a stop line not followed yet) is tried again, and reported on a timeout."""
        last: list[str] = []

        def check() -> dict[str, str] | None:
            try:
                now = serving_now(check_one_at_a_time(self.lines(), self.cut))
            except AssertionError as exc:
                last[:] = [str(exc)]
                return None
            last[:] = [f"served: {len(set(now) & groups)} of {len(groups)}: {now}"]
            return now if set(now) >= groups and want(now) else None

        owners: dict[str, str] = wait_until(check, timeout, lambda: f"one server per group (load {load()}): {last}",
                                            poll=1.0)
        return owners

    def kill_server_and_worker(self, groups: set[str], group: str, workers: int, rotate: int = 0,
                               timeout: float = T + 30) -> KillOutcome:
        """SIGKILLs the replica serving ``group`` (KubeletConfirmed, ``workers`` worker pods) and, right
        after, one of the group's workers; waits until the replica's groups are served elsewhere and the
        worker's resources worked on again, and says how long each took (the logs' evidence)."""
        owners = self.settled(groups)
        fo_owners = self.workers.stable(group, workers)
        server = owners[f"{self.ns}/{group}"]
        moved = {g for g, m in owners.items() if m == server}
        victim = sorted(set(fo_owners.values()))[rotate % workers]
        instance = self.workers.instance(victim)
        pod = server.split("#")[0]
        load1 = round(os.getloadavg()[0], 2)
        replica, worker = self.signal(("operator", pod), ("worker", victim), sig="KILL")
        self.cut[server] = replica.wall

        def taken_over() -> dict[str, float] | None:
            lines = self.lines()
            now = serving_now(intervals(lines, self.cut))
            if any(now.get(g) in (None, server) for g in moved):
                return None
            return taken_after(lines, moved, replica.wall) or None

        taken: dict[str, float] = wait_until(
            taken_over, timeout, lambda: f"the groups of {server} served elsewhere (load {load()}): "
            f"{serving_now(intervals(self.lines(), self.cut))}", poll=0.5)
        victim_logged(self.workers, group, victim, instance, worker.ts)
        held = self.workers.held(group, victim, instance, worker.ts) or {r for r, m in fo_owners.items() if m == victim}
        seconds = self.workers.reworked(group, victim, instance, held, worker.ts, timeout=timeout)
        gaps = tick_gaps_after(self.workers.events(group), victim, instance, held, worker.ts)

        def logged() -> tuple[list[str], list[str]]:
            text = self.operator_text().splitlines()
            return ([line for line in text if "replica-ended member=" in line and f"pod={pod} " in line],
                    [line for line in text if closed_session(line, victim)])

        # The replicas' lines reach their files through `kubectl logs -f` followers, behind the replicas' own
        # writes and independently of the workers' logs that showed the failover: awaited (bounded, 30 s).
        deadline = time.monotonic() + 30
        while not all(found := logged()) and time.monotonic() < deadline:
            time.sleep(0.5)
        ended, caught = found
        return KillOutcome(server, taken, victim, len(held), seconds, gaps, ended, caught, load1)

    def rollout(self, groups: set[str], timeout: float = 300.0) -> tuple[list[Handover], set[str]]:
        """``kubectl rollout restart`` of the operator; once complete and every group served by a new
        replica, every handover of a group since the restart (from the logs) and the new pods."""
        old = {p["metadata"]["name"] for p in self.pods()}
        self.settled(groups)
        started = self.rollout_restart(timeout)
        new = set(self.wait_ready(REPLICAS))
        assert not new & old, f"the rollout left old replicas: {sorted(new & old)}"
        self.settled(groups, lambda now: all(now[g].split("#")[0] in new for g in groups), timeout=60)
        return handovers(check_one_at_a_time(self.lines(), self.cut), since=started), new

    def rollout_restart(self, timeout: float = 300.0) -> float:
        """``kubectl rollout restart`` of the operator's Deployment; returns its wall-clock start once the
        rollout is complete (every replica replaced, Ready)."""
        started = time.time()
        self.kube.kubectl("rollout", "restart", self.deployment, "-n", self.ns)
        self.kube.kubectl("rollout", "status", self.deployment, "-n", self.ns, f"--timeout={timeout:.0f}s",
                          timeout=timeout + 30)
        return started


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def _ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod.get("status", {}).get("conditions", []))
