"""Operator replicas at scale (issue 32, item 5): G ResourceGroups on 1 and on 3 replicas.

    python -m bench.scale_replicas --groups 3000 --replicas 1,3 [--namespaces 4] [--merge]

On the kind cluster (``make cluster-up``; run it through ``/work/cluster`` on the shared machine): the chart
as :class:`tests.support.replicascene.ReplicaScene` installs it (``examples/values-ha.yaml``, the operator's
identity, the operator group on the cluster's ensemble), serving ``--namespaces`` tenant namespaces
(``rbac.watchNamespaces``), with a larger memory limit than the chart's (``--memory-limit``). The Deployment
is scaled to 0 and the G groups are created while no replica runs (no workers, 2 resources each, spread
evenly over the namespaces, one server-side apply per namespace, in parallel). ``--liveness-timeout`` and
``--liveness-failures`` set the chart's ``liveness`` timing (at 3,000 groups on one replica the defaults of
then, 5 s and 3 probes 20 s apart, restarted the operator about every 2 minutes of its start). Then:

- **first start** (the first replica count): the Deployment scaled from 0 to N; the groups were never served;
- **restart** (each replica count): scaled to 0, every pod gone and the operator group empty (its members'
  sessions ended), every group's spec changed by one resource (so a Synced status of the earlier run does
  not count), scaled to N.

Measured from the scale on: the time until a list call shows every group's ``ResourcesSynced`` True for its
current generation (50 % and 90 % too); then, per replica, its operator process's CPU seconds since it
started and its peak RSS (``VmHWM``; /proc, read by the tools pod, which has the node's PID namespace), the
groups whose ``status.servedBy`` names it, its ZooKeeper sessions (``stat`` of each server: connections
from the pod's IP; and its ``rebalanser_operator_zookeeper_connections``); after a restart also the steady
state: CPU per second over ``--idle`` s, ``--settle`` s after all were synced. ``uptime`` at each run's start.

Everything it made goes at the end: the groups (deleted through the operator, which removes their znodes),
the release, the namespaces, the tools pod, and what is left under the path root and the operator group
(purged as the ensemble's administrator). Writes bench/scale-replicas.json; with ``--merge`` also
bench/results.json (``operator_replicas_scale``) and docs/benchmarks.md, rendered again by bench/report.py.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

from bench.scalestats import (
    METRICS,
    GroupState,
    first_seen,
    group_states,
    idle_rates,
    merged,
    parse_metrics,
    proc_totals,
    quantile_s,
    served_counts,
    sessions_per_pod,
)
from tests.support.failoverscene import ZK_CONNECT
from tests.support.kubectl import Kube, KubeError, wait_until
from tests.support.podcluster import REPO, NoCluster, pod_cluster
from tests.support.podtools import admin_identity
from tests.support.replicascene import (
    CHART,
    EXAMPLES,
    IDENTITY_PASSWORD,
    IDENTITY_SECRET,
    IDENTITY_USER,
    ZK_SERVERS,
    ReplicaScene,
    groups_manifest,
    values,
)

NAMESPACE = "rb-scale"
OUT = REPO / ".pod-scale-bench"
RESULT = REPO / "bench" / "scale-replicas.json"
LABEL_KEY, LABEL_VALUE = "rebalanser.io/bench", "scale-replicas"
RESOURCES = 2
METRICS_PORT = 8080
SYNC_TIMEOUT = 600.0
#: Seconds per group a start gets beyond :data:`SYNC_TIMEOUT` (1,000 groups took 246 s to a first start).
SYNC_PER_GROUP = 0.4
DELETE_TIMEOUT = 360.0
PURGE_TIMEOUT = 900.0

#: Run in the tools pod (the node's PID namespace): argv ``namespace pod-ips-json metrics-port zk-servers``.
#: Prints one JSON object: ``procs`` (pod -> its operator processes' CPU seconds, RSS and peak RSS, read
#: first), ``metrics`` (pod -> the lines of :data:`METRICS` in its /metrics) and ``stat`` (server -> ``stat``).
PROBE_SCRIPT = r"""
import json, os, socket, sys, urllib.request
ns, ips, port = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
servers = [s for s in sys.argv[4].split(",") if s]
wanted = tuple(sys.argv[5].split(","))
tick = os.sysconf("SC_CLK_TCK")
procs = {}
for entry in os.listdir("/proc"):
    if not entry.isdigit():
        continue
    try:
        argv = open(f"/proc/{entry}/cmdline", "rb").read().decode(errors="replace").split("\0")
        if not any(a.endswith("rebalanser-operator") for a in argv[:2]):
            continue
        env = open(f"/proc/{entry}/environ", "rb").read().split(b"\0")
        if f"POD_NAMESPACE={ns}".encode() not in env:
            continue
        pod = next(e[9:].decode() for e in env if e.startswith(b"POD_NAME="))
        stat = open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()
        status = dict(l.split(":", 1) for l in open(f"/proc/{entry}/status").read().splitlines() if ":" in l)
    except (OSError, StopIteration):
        continue
    procs.setdefault(pod, []).append({"pid": int(entry), "cpu_s": (int(stat[11]) + int(stat[12])) / tick,
                                      "rss_kb": int(status["VmRSS"].split()[0]),
                                      "hwm_kb": int(status["VmHWM"].split()[0])})
metrics = {}
for pod, ip in ips.items():
    try:
        text = urllib.request.urlopen(f"http://{ip}:{port}/metrics", timeout=20).read().decode()
        metrics[pod] = "\n".join(l for l in text.splitlines() if l.startswith(wanted))
    except Exception as exc:
        metrics[pod] = f"# error {exc}"
stats = {}
for server in servers:
    host, _, p = server.rpartition(":")
    try:
        with socket.create_connection((host, int(p)), timeout=10) as s:
            s.sendall(b"stat")
            chunks = []
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                chunks.append(chunk)
        stats[server] = b"".join(chunks).decode(errors="replace")
    except OSError as exc:
        stats[server] = f"# error {exc}"
print(json.dumps({"procs": procs, "metrics": metrics, "stat": stats}))
"""


#: argv ``connect user:password path``: the children of ``path`` (none when it does not exist), one per line.
MEMBERS_SCRIPT = """
import sys
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
zk = KazooClient(hosts=sys.argv[1], timeout=10, auth_data=[("digest", sys.argv[2])] if sys.argv[2] else [])
zk.start(timeout=30)
try:
    print("\\n".join(zk.get_children(sys.argv[3])))
except NoNodeError:
    pass
zk.stop()
"""

#: argv ``connect user:password path...``: those of the paths that exist, one per line.
EXISTS_SCRIPT = """
import sys
from kazoo.client import KazooClient
zk = KazooClient(hosts=sys.argv[1], timeout=10, auth_data=[("digest", sys.argv[2])] if sys.argv[2] else [])
zk.start(timeout=30)
print("\\n".join(p for p in sys.argv[3:] if zk.exists(p)))
zk.stop()
"""


def log(message: str) -> None:
    print(f"[scale {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def uptime() -> str:
    """``uptime``'s load averages, as it prints them."""
    out = subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout
    return out.rsplit("load average:", 1)[-1].strip() or " ".join(f"{x:.2f}" for x in os.getloadavg())


class ScaleScene:
    """The release (:class:`ReplicaScene`'s, serving ``tenants``) and the groups; :meth:`close` removes it all."""

    def __init__(self, kube: Kube, tenants: list[str], memory_limit: str, ns: str = NAMESPACE,
                 liveness: dict[str, int] | None = None) -> None:
        self.kube = kube
        self.tenants = tenants
        self.memory_limit = memory_limit
        self.liveness = liveness or {}
        self.replica = ReplicaScene(kube, OUT, ns=ns)
        self.ns = ns

    # ------------------------------------------------------------------------------------ lifecycle

    def setup(self, replicas: int) -> None:
        """Namespaces, the identity Secret, the tools pod, the znodes cleared, the release; then the
        Deployment at 0 replicas."""
        OUT.mkdir(parents=True, exist_ok=True)
        self.teardown()
        self.replica.tools.create()
        self.purge()
        for ns in [self.ns, *self.tenants]:
            self.replica.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}, namespaced=False)
        data = {"username": IDENTITY_USER, "password": IDENTITY_PASSWORD}
        self.replica.apply({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                            "metadata": {"name": IDENTITY_SECRET},
                            "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}})
        own = OUT / "values-scale.yaml"
        own.write_text(yaml.safe_dump(self.values(replicas)))
        self.kube.helm("upgrade", "--install", self.ns, str(CHART), "-n", self.ns, "-f", str(EXAMPLES / "values.yaml"),
                       "-f", str(EXAMPLES / "values-ha.yaml"), "-f", str(own), timeout=180)
        self.scale(0)

    def values(self, replicas: int) -> dict[str, Any]:
        """ReplicaScene's values, serving the tenant namespaces, with room for thousands of groups."""
        own = values(self.ns)
        own["replicas"] = replicas
        own["rbac"] = {"watchNamespaces": self.tenants}
        own["resources"] = {"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"memory": self.memory_limit}}
        if self.liveness:
            own["liveness"] = {**own.get("liveness", {}), **self.liveness}
        return own

    def purge(self) -> None:
        """The path root's top and the operator group, as the ensemble's administrator (one delete per znode:
        what 3,000 groups leave took more than the tools pod's usual 60 s)."""
        self.replica.tools.purge(ZK_CONNECT, f"/{self.ns}", self.replica.operator_group, timeout=PURGE_TIMEOUT)

    def teardown(self) -> float:
        """The groups (through the operator while it runs; their finalizers stripped where it cannot), the
        release, the namespaces. Returns the seconds the groups' deletion took."""
        started = time.monotonic()
        present = [ns for ns in self.tenants if self.kube.maybe_json("get", "namespace", ns) is not None]
        if present and self.kube.maybe_json("get", "deployment", f"{self.ns}-rebalanser-operator", "-n",
                                            self.ns) is not None:
            self.scale(max(1, self.replicas_configured()), wait=False)
            for ns in present:
                self.kube.kubectl("delete", "rg", "--all", "-n", ns, "--wait=false", check=False, timeout=300)
            try:
                wait_until(lambda: not self.listing().get("items"), DELETE_TIMEOUT,
                           lambda: f"ResourceGroups deleted by the operator: {len(self.listing()['items'])} left",
                           poll=5.0)
            except AssertionError as exc:
                log(f"  {exc}; stripping the finalizers of the rest")
        deleted_s = time.monotonic() - started
        self.strip_finalizers()
        self.kube.helm("uninstall", self.ns, "-n", self.ns, "--wait", "--timeout", "180s", check=False, timeout=240)
        for ns in [*self.tenants, self.ns]:
            self.kube.kubectl("delete", "namespace", ns, "--wait=false", "--ignore-not-found", check=False)
        for ns in [*self.tenants, self.ns]:
            wait_until(self.gone(ns), 300, f"namespace {ns} stays")
        return deleted_s

    def strip_finalizers(self) -> None:
        """The finalizers of every bench group left, in one ``kubectl replace`` of the list (one process)."""
        for _ in range(3):
            items = self.listing().get("items") or []
            if not items:
                return
            for item in items:
                item["metadata"]["finalizers"] = []
                item.pop("status", None)
            self.kube.kubectl("replace", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List",
                                                                      "items": items}), check=False, timeout=600)

    def gone(self, namespace: str) -> Callable[[], bool]:
        return lambda: self.kube.maybe_json("get", "namespace", namespace) is None

    def close(self) -> tuple[float, list[str]]:
        """Everything removed; the groups' deletion's seconds and the znodes still there after the purge."""
        try:
            deleted_s = self.teardown()
            self.purge()
            paths = [f"/{self.ns}", self.replica.operator_group]
            left = self.replica.tools.python(EXISTS_SCRIPT, ZK_CONNECT, admin_identity(self.kube), *paths).split()
        finally:
            self.replica.tools.delete()
        return deleted_s, left

    # ------------------------------------------------------------------------------------ acting

    def replicas_configured(self) -> int:
        dep = self.kube.json("get", self.replica.deployment, "-n", self.ns)
        return int(dep["spec"].get("replicas") or 0)

    def scale(self, replicas: int, wait: bool = True) -> float:
        """The Deployment scaled to ``replicas``; returns the wall-clock instant of the scale. With ``wait``
        and 0: until no pod is left and the operator group has no member (every replica's session ended)."""
        at = time.time()
        self.kube.kubectl("scale", self.replica.deployment, "-n", self.ns, f"--replicas={replicas}")
        if wait and replicas == 0:
            wait_until(lambda: not self.replica.pods(), 300, lambda: f"no operator pod: {self.replica.describe_pods()}",
                       poll=1.0)
            wait_until(lambda: not self.members(), 120, lambda: f"the operator group empty: {self.members()}", poll=1.0)
        return at

    def members(self) -> list[str]:
        """The operator group's live members (``G/clients``), read as the ensemble's administrator (the nodes
        are the operator identity's alone)."""
        out = self.replica.tools.python(MEMBERS_SCRIPT, ZK_CONNECT, admin_identity(self.kube),
                                        f"{self.replica.operator_group}/clients")
        return out.split()

    def create_groups(self, count: int, resources: int) -> float:
        """``count`` groups over the tenant namespaces (one server-side apply each, in parallel), or their
        specs changed to ``resources`` resources; returns the seconds it took."""
        started = time.monotonic()
        names = [f"g{i:05d}" for i in range(count)]
        shares = {ns: names[i::len(self.tenants)] for i, ns in enumerate(self.tenants)}
        with ThreadPoolExecutor(len(self.tenants)) as pool:
            list(pool.map(lambda item: self.apply_groups(item[0], item[1], resources), shares.items()))
        return time.monotonic() - started

    def apply_groups(self, ns: str, names: list[str], resources: int) -> None:
        doc = groups_manifest(names, resources)
        for item in doc["items"]:
            item["metadata"]["labels"] = {LABEL_KEY: LABEL_VALUE}
        self.kube.kubectl("apply", "--server-side", "--field-manager=bench-scale", "-n", ns, "-f", "-",
                          input=json.dumps(doc), timeout=900)

    # ------------------------------------------------------------------------------------ observing

    def listing(self) -> dict[str, Any]:
        """Every bench group in one list call (the raw answer: no per-object work in kubectl); none where the
        CRD is not installed yet (a fresh cluster)."""
        proc = self.kube.kubectl("get", "--raw", "/apis/rebalanser.io/v1alpha1/resourcegroups?labelSelector="
                                 f"{LABEL_KEY}%3D{LABEL_VALUE}", timeout=120, check=False)
        if proc.returncode != 0:
            if "NotFound" in proc.stderr or "could not find the requested resource" in proc.stderr:
                return {"items": []}
            raise KubeError(f"listing the ResourceGroups failed: {proc.stderr.strip()}")
        result: dict[str, Any] = json.loads(proc.stdout)
        return result

    def pod_ips(self) -> dict[str, str]:
        return {p["metadata"]["name"]: p["status"]["podIP"] for p in self.replica.pods()
                if not p["metadata"].get("deletionTimestamp") and (p.get("status") or {}).get("podIP")}

    def probe(self, full: bool = True) -> dict[str, Any]:
        """The tools pod's sample: /proc first, then (``full``) the metrics and ZooKeeper's ``stat``."""
        ips = self.pod_ips() if full else {}
        servers = ZK_SERVERS if full else ""
        out = self.replica.tools.python(PROBE_SCRIPT, self.ns, json.dumps(ips), str(METRICS_PORT), servers,
                                        ",".join(METRICS), timeout=120)
        answer: dict[str, Any] = json.loads(out)
        answer["ips"] = ips
        return answer

    def restarts(self) -> dict[str, int]:
        return {p["metadata"]["name"]: sum(int(c.get("restartCount") or 0)
                                           for c in (p.get("status") or {}).get("containerStatuses") or [])
                for p in self.replica.pods()}


def sync_timeout(groups: int) -> float:
    """The seconds a start gets to sync ``groups`` groups: :data:`SYNC_TIMEOUT`, or more for thousands."""
    return max(SYNC_TIMEOUT, SYNC_PER_GROUP * groups)


def measure(scene: ScaleScene, replicas: int, kind: str, groups: int, poll: float, settle: float,
            idle: float) -> dict[str, Any]:
    """Scales to ``replicas`` (from 0) and measures until every group is synced; then the steady state."""
    load = uptime()
    log(f"{kind} on {replicas} replicas, {groups:,} groups; load {load}")
    polls: list[tuple[float, list[str]]] = []
    started = scene.scale(replicas)
    states: list[GroupState] = []
    while True:
        listing = scene.listing()
        at = time.time() - started
        states = group_states(listing)
        done = [s.key for s in states if s.synced]
        polls.append((at, done))
        if len(states) == groups and len(done) == groups:
            break
        if at > sync_timeout(groups):
            raise AssertionError(f"{kind} on {replicas}: {len(done)} of {groups} synced after {at:.0f} s")
        if len(polls) % max(1, int(15 / poll)) == 0:
            log(f"  +{at:.0f} s: {len(done)} of {groups} synced")
        time.sleep(poll)
    synced_s = polls[-1][0]
    sample = scene.probe()
    log(f"  all synced at +{synced_s:.1f} s; load {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    seen = first_seen(polls)
    run: dict[str, Any] = {
        "kind": kind, "replicas": replicas, "groups": groups, "uptime_load": load,
        "synced_s": round(synced_s, 1), "synced_p50_s": round(quantile_s(seen.values(), 0.5) or 0, 1),
        "synced_p90_s": round(quantile_s(seen.values(), 0.9) or 0, 1),
        "first_synced_s": round(min(seen.values()), 1), "polls": len(polls),
        "loadavg_synced": [round(x, 2) for x in os.getloadavg()],
    }
    run["per_replica"] = per_replica(sample, states)
    run["restarts"] = scene.restarts()
    if settle + idle > 0:
        steady(scene, run, settle, idle)
    for r in run["per_replica"]:
        log(f"  {r['pod']}: {r.get('groups', 0)} groups, {r.get('cpu_s')} CPU-s, peak {r.get('peak_rss_mb')} MB, "
            f"sessions {r.get('sessions')} (metric {r.get('zk_connections_metric')}), idle {r.get('idle_cores')}")
    return run


def per_replica(sample: dict[str, Any], states: list[GroupState]) -> list[dict[str, Any]]:
    procs = proc_totals(sample["procs"])
    sessions = sessions_per_pod(sample["stat"], sample["ips"])
    served = served_counts(states)
    rows = []
    for pod in sorted(set(procs) | set(sample["ips"])):
        metrics = parse_metrics(sample["metrics"].get(pod, ""))
        row: dict[str, Any] = {"pod": pod, "groups": served.get(pod, 0), **procs.get(pod, {}),
                               "sessions": sessions.get(pod),
                               "zk_connections_metric": metrics.get("rebalanser_operator_zookeeper_connections"),
                               "replica_groups_metric": metrics.get("rebalanser_operator_replica_groups"),
                               "in_office": metrics.get("rebalanser_operator_replica_in_office")}
        rows.append(row)
    return rows


def steady(scene: ScaleScene, run: dict[str, Any], settle: float, idle: float) -> None:
    """CPU per second of each replica over ``idle`` s, ``settle`` s after the sync (nothing scraped in between)."""
    time.sleep(settle)  # timing: the steady state is defined as this long after the sync
    before, t0 = proc_totals(scene.probe(full=False)["procs"]), time.monotonic()
    time.sleep(idle)
    after_sample = scene.probe(full=False)
    after, t1 = proc_totals(after_sample["procs"]), time.monotonic()
    rates = idle_rates(before, after, t1 - t0)
    full = scene.probe()
    sessions = sessions_per_pod(full["stat"], full["ips"])
    for row in run["per_replica"]:
        row["idle_cores"] = rates.get(row["pod"])
        row["rss_idle_mb"] = after.get(row["pod"], {}).get("rss_mb")
        row["sessions_idle"] = sessions.get(row["pod"])
    run["idle_window_s"] = round(t1 - t0, 1)


def run(groups: int, counts: list[int], namespaces: int, poll: float, settle: float, idle: float,
        memory_limit: str, first_start: bool = True, stop_at: float = 0.0,
        liveness: dict[str, int] | None = None) -> dict[str, Any]:
    """The runs (``stop_at``: a wall-clock instant after which no further run starts; ``liveness``: the chart's
    ``liveness`` timing values, where not the chart's defaults)."""
    kube = pod_cluster()
    shutil.rmtree(OUT, ignore_errors=True)
    tenants = [f"{NAMESPACE}-t{i}" for i in range(namespaces)]
    scene = ScaleScene(kube, tenants, memory_limit, liveness=liveness)
    result: dict[str, Any] = {"groups": groups, "namespaces": namespaces, "resources_per_group": RESOURCES,
                              "replica_counts": counts, "poll_s": poll, "settle_s": settle, "idle_s": idle,
                              "memory_limit": memory_limit, "liveness": liveness or "the chart's",
                              "uptime_start": uptime(), "runs": []}
    started = time.monotonic()
    try:
        scene.setup(max(counts))
        result["create_s"] = round(scene.create_groups(groups, RESOURCES), 1)
        log(f"{groups:,} groups created in {result['create_s']} s")
        resources = RESOURCES
        if first_start:
            result["runs"].append(measure(scene, counts[0], "first start", groups, poll, 0, 0))
        for n in counts:
            if stop_at and time.time() > stop_at:
                result.setdefault("notes", []).append(f"the restart on {n} replicas was not measured: out of time")
                log(f"out of time: no restart on {n} replicas")
                continue
            scene.scale(0)
            resources += 1
            scene.create_groups(groups, resources)
            kind = "restart" if result["runs"] else "first start"  # never served before: no restart
            result["runs"].append(measure(scene, n, kind, groups, poll, settle, idle))
    finally:
        try:
            deleted_s, left = scene.close()
            result["delete_s"], result["znodes_left"] = round(deleted_s, 1), left
        except Exception as exc:  # reported, and the run's figures kept
            result["cleanup_error"] = str(exc)
            log(f"clean-up failed: {exc}")
    result["elapsed_s"] = round(time.monotonic() - started, 1)
    result["uptime_end"] = uptime()
    return result


def merge(result: dict[str, Any]) -> None:
    """``result`` into bench/results.json's ``operator_replicas_scale`` (in place of an earlier result of the same
    group count; the other counts kept); docs/benchmarks.md rendered again."""
    from bench import report

    out, md = REPO / "bench" / "results.json", REPO / "docs" / "benchmarks.md"
    results: dict[str, Any] = json.loads(out.read_text())
    results["operator_replicas_scale"] = merged(results.get("operator_replicas_scale"), result)
    results["targets"] = report.evaluate(results)
    out.write_text(json.dumps(results, indent=1, sort_keys=False) + "\n")
    md.write_text(report.markdown(results))
    log(f"wrote operator_replicas_scale into {out} and {md}")


def stop_instant(hhmm: str) -> float:
    """Today's ``HH:MM`` UTC as a wall-clock instant (0: none)."""
    if not hhmm:
        return 0.0
    hours, minutes = (int(x) for x in hhmm.split(":"))
    now = time.time()
    return now - now % 86400 + hours * 3600 + minutes * 60


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.scale_replicas", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--groups", type=int, default=3000)
    p.add_argument("--replicas", default="1,3", help="replica counts, in order (default 1,3)")
    p.add_argument("--namespaces", type=int, default=4, help="tenant namespaces the groups are spread over")
    p.add_argument("--poll", type=float, default=2.0, help="seconds between list calls while waiting for Synced")
    p.add_argument("--settle", type=float, default=60.0, help="seconds after the sync before the idle window")
    p.add_argument("--idle", type=float, default=60.0, help="the idle window, seconds")
    p.add_argument("--memory-limit", default="2Gi", help="the operator container's memory limit")
    p.add_argument("--liveness-timeout", type=int, default=0,
                   help="the liveness probe's timeoutSeconds (default: the chart's)")
    p.add_argument("--liveness-failures", type=int, default=0,
                   help="the liveness probe's failureThreshold (default: the chart's)")
    p.add_argument("--no-first-start", action="store_true", help="only the restarts")
    p.add_argument("--stop-at", default="", help="HH:MM (UTC): no further run starts after it")
    p.add_argument("--out", type=Path, default=RESULT)
    p.add_argument("--merge", action="store_true", help="also into bench/results.json and docs/benchmarks.md")
    args = p.parse_args(argv)
    # A SIGTERM (a timeout around the run) unwinds like an error: the clean-up in run() still happens.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    counts = [int(x) for x in args.replicas.split(",") if x]
    try:
        result = run(args.groups, counts, args.namespaces, args.poll, args.settle, args.idle, args.memory_limit,
                     first_start=not args.no_first_start, stop_at=stop_instant(args.stop_at),
                     liveness={k: v for k, v in (("timeoutSeconds", args.liveness_timeout),
                                                 ("failureThreshold", args.liveness_failures)) if v})
    except NoCluster as exc:
        log(f"skipped: no cluster: {exc}")
        return 0
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    log(f"wrote {args.out}")
    if args.merge:
        merge(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
