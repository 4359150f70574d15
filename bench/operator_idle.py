"""The operator's idle cost with many ResourceGroups (a host process against a real API server).

    python -m bench.operator_idle --groups 100 300 [--resources 20] [--idle 60] [--out FILE]

Starts a local control plane (``scripts/cluster.sh``), one ZooKeeper server and ``rebalanser-operator``
as a host process (admin kubeconfig, one namespace). For each group count, in increasing order, it
applies the missing ResourceGroups (``resourceSets`` of ``--resources`` names, no workers) in one
``kubectl apply``, measures how long until every status shows all its resources, lets the operator
settle, then samples its CPU time (user + system, every thread) and RSS over ``--idle`` seconds in
which nothing changes. Prints one line per count and writes the figures as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.support.cluster import REPO, Cluster, start_cluster
from tests.support.zk import free_port, serving_cluster

NS = "rb-idle"
BIN = Path(sys.executable).parent
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def manifests(hosts: str, first: int, last: int, resources: int) -> str:
    items = [
        {"apiVersion": "rebalanser.io/v1alpha1", "kind": "ResourceGroup",
         "metadata": {"name": f"g{i:04d}", "namespace": NS},
         "spec": {"zookeeper": {"connect": hosts}, "resourceSets": [{"prefix": "r-", "count": resources}]}}
        for i in range(first, last)
    ]
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": items})


def synced(cluster: Cluster, count: int, resources: int) -> int:
    proc = cluster.run_kubectl("get", "rg", "-n", NS, "-o", "json", timeout=120)
    items = json.loads(proc.stdout)["items"]
    return sum(1 for rg in items[:count] if (rg.get("status") or {}).get("resources") == resources)


def measure(cluster: Cluster, hosts: str, pid: int, counts: list[int], resources: int, idle: float) -> list[Any]:
    rows: list[dict[str, Any]] = []
    have = 0
    for count in counts:
        started = time.monotonic()
        cluster.run_kubectl("apply", "-f", "-", input=manifests(hosts, have, count, resources), timeout=300)
        have = count
        deadline = started + 600
        while synced(cluster, count, resources) < count:
            if time.monotonic() > deadline:
                raise SystemExit(f"{count} groups not synced after 600 s")
            time.sleep(1.0)
        sync_s = time.monotonic() - started
        time.sleep(15.0)  # settle: the last status patches, the first periodic refreshes
        cpu0, t0 = cpu_seconds(pid), time.monotonic()
        time.sleep(idle)
        cores = (cpu_seconds(pid) - cpu0) / (time.monotonic() - t0)
        row = {"groups": count, "resources_per_group": resources, "synced_s": round(sync_s, 1),
               "idle_cores": round(cores, 3), "rss_mb": round(rss_mb(pid), 1), "idle_window_s": idle}
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", type=int, nargs="+", default=[100, 300])
    parser.add_argument("--resources", type=int, default=20)
    parser.add_argument("--idle", type=float, default=60.0)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "operator_idle.json")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="rb-idle-") as tmp:
        work = Path(tmp)
        with start_cluster(work / "kube") as cluster, serving_cluster(work / "zk", size=1) as zk:
            cluster.create_namespace(NS)
            cluster.run_kubectl("apply", "--server-side", "-f", str(REPO / "crds"))
            cluster.run_kubectl("wait", "--for=condition=Established", "crd/resourcegroups.rebalanser.io",
                                "--timeout=60s")
            with open(work / "operator.log", "wb") as log:
                operator = subprocess.Popen(
                    [str(BIN / "rebalanser-operator"), "--namespace", NS, "--metrics-port", str(free_port()),
                     "--liveness", f"http://127.0.0.1:{free_port()}/healthz"],
                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=cluster.env(),
                )
                try:
                    rows = measure(cluster, zk.hosts, operator.pid, sorted(args.groups), args.resources, args.idle)
                finally:
                    operator.send_signal(signal.SIGTERM)
                    try:
                        operator.wait(60)
                    except subprocess.TimeoutExpired:
                        operator.kill()
                        operator.wait(10)
    args.out.write_text(json.dumps({"operator_idle": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
