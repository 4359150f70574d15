"""The operator at scale: many ResourceGroups on one operator (a host process against a real API server).

    python -m bench.operator_idle --groups 100 1000 [--resources 20] [--idle 60] [--probes 3]
                                  [--out FILE] [--merge]

Starts a local control plane (``scripts/cluster.sh``), one ZooKeeper server and ``rebalanser-operator``
as a host process (admin kubeconfig, one namespace). For each group count, in increasing order:

* **synced**: applies the missing ResourceGroups (``resourceSets`` of ``--resources`` names, no workers)
  in one ``kubectl apply`` and measures how long until every status shows all its resources;
* **idle CPU and RSS**: lets the operator settle, then samples its CPU time (user + system, every
  thread) and RSS over ``--idle`` seconds in which nothing changes;
* **membership → status**: ``--probes`` times, a real worker (``rebalanser worker``) joins one group
  and then leaves it, while every other group stays idle. The change is timed where ZooKeeper delivers
  it (a watch on the group's ``G/clients`` in this process) and the status where the API server delivers
  it (``kubectl get rg NAME -o json -w``), both on arrival in this process.

Prints one line per count; writes the rows as JSON (``--out``). With ``--merge`` the rows also go into
``bench/results.json`` (key ``operator_scale``) and ``docs/benchmarks.md`` is rendered again from it.
``make bench`` runs :func:`run` with 1,000 groups; the test suite runs the same code with 100
(tests/e2e/test_operator_scale.py).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient

from tests.support.cluster import REPO, Cluster, start_cluster
from tests.support.kubectl import Kube
from tests.support.zk import admin_client, free_port, serving_cluster

NS = "rb-idle"
BIN = Path(sys.executable).parent
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
SYNC_TIMEOUT = 900.0
PROBE_TIMEOUT = 60.0

Log = Callable[[str], None]


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def group_name(i: int) -> str:
    return f"g{i:04d}"


def manifests(hosts: str, first: int, last: int, resources: int) -> str:
    items = [
        {"apiVersion": "rebalanser.io/v1alpha1", "kind": "ResourceGroup",
         "metadata": {"name": group_name(i), "namespace": NS},
         "spec": {"zookeeper": {"connect": hosts}, "resourceSets": [{"prefix": "r-", "count": resources}]}}
        for i in range(first, last)
    ]
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": items})


def synced(cluster: Cluster, count: int, resources: int) -> int:
    proc = cluster.run_kubectl("get", "rg", "-n", NS, "-o", "json", timeout=120)
    items = json.loads(proc.stdout)["items"]
    return sum(1 for rg in items[:count] if (rg.get("status") or {}).get("resources") == resources)


@dataclass
class Scene:
    """The control plane, ZooKeeper and the operator process of one run."""

    cluster: Cluster
    hosts: str
    operator: subprocess.Popen[bytes]
    work: Path
    have: int = 0
    log: Log = print

    @property
    def pid(self) -> int:
        return self.operator.pid

    def operator_log(self) -> str:
        return (self.work / "operator.log").read_text(errors="replace")

    def alive(self) -> None:
        assert self.operator.poll() is None, \
            f"the operator exited ({self.operator.returncode}):\n{self.operator_log()[-3000:]}"

    def apply(self, count: int, resources: int, timeout: float = SYNC_TIMEOUT) -> float:
        """Applies groups up to ``count`` in one ``kubectl apply``; seconds until every one is synced."""
        started = time.monotonic()
        self.cluster.run_kubectl("apply", "-f", "-", input=manifests(self.hosts, self.have, count, resources),
                                 timeout=300)
        self.have = count
        deadline = started + timeout
        done = 0
        while (done := synced(self.cluster, count, resources)) < count:
            self.alive()
            if time.monotonic() > deadline:
                raise AssertionError(f"{done} of {count} groups synced after {timeout:.0f} s (load {load()})")
            time.sleep(1.0)
        return time.monotonic() - started

    def idle(self, seconds: float, settle: float) -> tuple[float, float]:
        """(cores, RSS MB) over ``seconds`` in which nothing changes, after ``settle`` seconds."""
        time.sleep(settle)  # the last status patches of the bulk apply
        self.alive()
        cpu0, t0 = cpu_seconds(self.pid), time.monotonic()
        time.sleep(seconds)
        cores = (cpu_seconds(self.pid) - cpu0) / (time.monotonic() - t0)
        return cores, rss_mb(self.pid)

    def probe(self, admin: KazooClient, name: str) -> tuple[float, float]:
        """A worker joins group ``name`` and leaves it: (join, leave) seconds from the change reaching a
        ZooKeeper watcher here to the status showing it reaching a ``kubectl -w`` here."""
        kube = Kube(self.cluster.kubeconfig, self.cluster.bin_dir)
        with kube.watch_json("get", "rg", name, "-n", NS) as stream, \
                MembershipChanges(admin, f"/rebalanser/{NS}/{name}/clients") as changes:
            status_arrival(stream, lambda st: st.get("members", 0) == 0, 0, PROBE_TIMEOUT, name)
            first = len(stream.snapshot())
            since = time.monotonic()
            with worker(self.hosts, f"/rebalanser/{NS}/{name}", self.work / f"probe-{name}.log"):
                joined = changes.wait(1, since, PROBE_TIMEOUT)
                shown = status_arrival(stream, lambda st: st.get("members") == 1, first, PROBE_TIMEOUT, name)
                first = len(stream.snapshot())
                since = time.monotonic()
            left = changes.wait(0, since, PROBE_TIMEOUT)
            gone = status_arrival(stream, lambda st: st.get("members", 0) == 0, first, PROBE_TIMEOUT, name)
        return shown - joined, gone - left


class MembershipChanges:
    """When this process's watch on ``G/clients`` saw each number of members (monotonic arrival)."""

    def __init__(self, zk: KazooClient, path: str) -> None:
        self.zk, self.path = zk, path
        self.seen: list[tuple[float, int]] = []
        self.cond = threading.Condition()
        self.active = False

    def __enter__(self) -> MembershipChanges:
        self.active = True
        self._arm()
        return self

    def __exit__(self, *_: object) -> None:
        self.active = False

    def _arm(self, _event: object = None) -> None:
        if not self.active:
            return
        children = self.zk.get_children(self.path, watch=lambda event: threading.Thread(
            target=self._arm, args=(event,), daemon=True).start())
        with self.cond:
            self.seen.append((time.monotonic(), len(children)))
            self.cond.notify_all()

    def wait(self, count: int, since: float, timeout: float) -> float:
        """The first arrival at or after ``since`` of a view with ``count`` members (bounded)."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                at = next((t for t, n in self.seen if t >= since and n == count), None)
                if at is not None:
                    return at
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(f"{self.path}: never saw {count} members in {timeout:.0f} s: {self.seen}")
                self.cond.wait(remaining)


def status_arrival(
    stream: Any, predicate: Callable[[dict[str, Any]], bool], first: int, timeout: float, name: str
) -> float:
    """Arrival time (monotonic) of the first version from index ``first`` on whose status satisfies
    ``predicate`` (bounded)."""
    deadline = time.monotonic() + timeout
    while True:
        versions = stream.snapshot()
        for version in versions[first:]:
            if predicate(version.obj.get("status") or {}):
                return float(version.at)
        if time.monotonic() > deadline:
            last = versions[-1].obj.get("status") if versions else None
            raise AssertionError(f"status of {name} did not change as expected in {timeout:.0f} s; last: {last}")
        time.sleep(0.05)


@contextmanager
def worker(hosts: str, group: str, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [str(BIN / "rebalanser"), "worker", "--zk", hosts, "--group", group, "--id", "probe",
             "--session-timeout", "6", "--json"],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )
    try:
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@contextmanager
def scene(work: Path, log: Log = print) -> Iterator[Scene]:
    with start_cluster(work / "kube") as cluster, serving_cluster(work / "zk", size=1) as zk:
        cluster.create_namespace(NS)
        cluster.run_kubectl("apply", "--server-side", "-f", str(REPO / "crds"))
        cluster.wait_established("resourcegroups.rebalanser.io")
        with open(work / "operator.log", "wb") as out:
            operator = subprocess.Popen(
                [str(BIN / "rebalanser-operator"), "--namespace", NS, "--metrics-port", str(free_port()),
                 "--liveness", f"http://127.0.0.1:{free_port()}/healthz", "--allowed-ensemble", zk.hosts],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=cluster.env(),
            )
        try:
            yield Scene(cluster, zk.hosts, operator, work, log=log)
        finally:
            operator.send_signal(signal.SIGTERM)
            try:
                operator.wait(60)
            except subprocess.TimeoutExpired:
                operator.kill()
                operator.wait(10)


@dataclass
class Row:
    groups: int
    resources_per_group: int
    synced_s: float
    idle_cores: float
    rss_mb: float
    idle_window_s: float
    join_s: list[float] = field(default_factory=list)
    leave_s: list[float] = field(default_factory=list)
    load: str = ""

    def to_dict(self) -> dict[str, Any]:
        changes = self.join_s + self.leave_s
        return {
            "groups": self.groups, "resources_per_group": self.resources_per_group,
            "synced_s": round(self.synced_s, 1), "idle_cores": round(self.idle_cores, 3),
            "rss_mb": round(self.rss_mb, 1), "idle_window_s": self.idle_window_s,
            "membership_join_s": [round(x, 2) for x in self.join_s],
            "membership_leave_s": [round(x, 2) for x in self.leave_s],
            "membership_max_s": round(max(changes), 2) if changes else None,
            "loadavg": self.load,
        }


def measure(s: Scene, count: int, resources: int, idle: float, probes: int, settle: float = 15.0) -> Row:
    load_before = load()
    sync_s = s.apply(count, resources)
    cores, rss = s.idle(idle, settle)
    row = Row(count, resources, sync_s, cores, rss, idle, load=f"{load_before} / {load()}")
    with admin_client(s.hosts) as admin:
        for i in range(probes):
            join, leave = s.probe(admin, group_name((i * 7919) % count))
            row.join_s.append(join)
            row.leave_s.append(leave)
    s.alive()
    row.load += f" / {load()}"
    return row


def run(counts: list[int], resources: int = 20, idle: float = 60.0, probes: int = 3, log: Log = print) -> list[Any]:
    rows: list[Any] = []
    with tempfile.TemporaryDirectory(prefix="rb-idle-") as tmp, scene(Path(tmp), log) as s:
        for count in sorted(counts):
            row = measure(s, count, resources, idle, probes).to_dict()
            log(json.dumps(row))
            rows.append(row)
    return rows


def merge(rows: list[Any]) -> None:
    """Puts ``rows`` into bench/results.json and renders docs/benchmarks.md from it again."""
    from bench import report

    out = REPO / "bench" / "results.json"
    results = json.loads(out.read_text())
    results["operator_scale"] = rows
    results["targets"] = report.evaluate(results)
    out.write_text(json.dumps(results, indent=1, sort_keys=False) + "\n")
    (REPO / "docs" / "benchmarks.md").write_text(report.markdown(results))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--groups", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--resources", type=int, default=20)
    parser.add_argument("--idle", type=float, default=60.0)
    parser.add_argument("--probes", type=int, default=3)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "operator_idle.json")
    parser.add_argument("--merge", action="store_true", help="also into bench/results.json and docs/benchmarks.md")
    args = parser.parse_args(argv)
    rows = run(args.groups, args.resources, args.idle, args.probes, log=lambda m: print(m, flush=True))
    args.out.write_text(json.dumps({"operator_idle": rows}, indent=1) + "\n")
    if args.merge:
        merge(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
