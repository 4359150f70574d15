"""``make bench``: rebalanser vs kazoo's SetPartitioner, same ZooKeeper, same run; operator figures.

    python -m bench.run                 # the full grid (< 15 minutes), writes bench/results.json and
                                        # docs/benchmarks.md, prints the tables
    python -m bench.run --quick         # a tiny grid (< 60 s) into a temporary directory
    python -m bench.run --only "N=50 "  # cells whose name contains the text
    python -m bench.run --only "global-barrier N=50 " --merge   # re-measure cells into the existing report
    python -m bench.run --kafka --only "N=10 R=1000 ,N=50 R=1000 " --merge   # make bench-kafka: Kafka
                                        # consumer groups (three protocols at N=10, KIP-848 at N=50) beside
                                        # rebalanser and kazoo, from one run
    python -m bench.run --split-only    # where a join's and a leave's time goes at N=50, R=10,000
                                        # (bench/split.py), into the existing report

Every claim and cold-start figure is divided by ZooKeeper's floor, measured in the same run
(bench/floor.py). ``make bench-compare REF=<ref>`` (bench/compare.py) runs REF's library beside this one.

Cells run in order of importance; one that would start after ``--budget`` seconds is skipped and
listed as skipped (so the whole run stays inside its time limit on a loaded machine).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient

from bench import assignment_bytes, claimbook, coldstart, failover, floor, kafka_broker, operator_idle, report, split
from bench.adapters.kafka_worker import PROTOCOLS
from bench.kafka_cell import KafkaCellRun
from bench.operator_bench import bench_reconcile, bench_status_lag
from bench.scenarios import Cell, CellRun
from bench.zkmon import machine
from bench.zkserver import HEAP, start_standalone

REPO = Path(__file__).resolve().parents[1]
RB, GB = "resource-barrier", "global-barrier"
KILLS = ("join", "leave", "kill")

#: The full grid, most important first. (cell, rough seconds it takes here: for the budget check.)
FULL: list[tuple[Cell, float]] = [
    (Cell("rebalanser", RB, 50, 10_000, repeats=5), 150),
    (Cell("kazoo", RB, 50, 10_000, repeats=1, faults=KILLS), 170),
    (Cell("rebalanser", GB, 50, 10_000, repeats=3), 100),
    (Cell("rebalanser", RB, 200, 100_000, repeats=2, session_timeout=10.0), 170),
    (Cell("rebalanser", RB, 10, 1_000, repeats=2), 40),
    (Cell("kazoo", RB, 10, 1_000, repeats=1, faults=KILLS), 45),
    (Cell("rebalanser", GB, 10, 1_000, repeats=2), 40),
    (Cell("rebalanser", RB, 2, 10, repeats=2), 30),
    (Cell("kazoo", RB, 2, 10, repeats=1, faults=KILLS), 20),
    (Cell("rebalanser", GB, 2, 10, repeats=2), 30),
    (Cell("rebalanser", GB, 200, 100_000, repeats=1, faults=KILLS, session_timeout=10.0), 100),
]

QUICK: list[tuple[Cell, float]] = [
    (Cell("rebalanser", RB, 3, 30, repeats=1, faults=("join", "leave", "kill", "kill-coordinator")), 15),
    (Cell("kazoo", RB, 3, 30, repeats=1, faults=("join", "leave")), 10),
]

SKIPPED = [
    "R = 10 with N = 50 or 200 (more members than resources: most members idle, nothing to measure that "
    "N = 2/10 does not show), and the other off-diagonal cells of the 4 x 4 x 2 cross product (32 cells "
    "x 2 implementations would take hours at 20-30 s per kazoo rebalance): the diagonal N = 2/10/50/200 x "
    "R = 10/1,000/10,000/100,000 shows the scaling in both dimensions at once.",
    "kazoo at N = 200, R = 100,000: measured here, kazoo needs ~26 s and ~34 CPU-seconds per rebalance at "
    "N = 50, R = 10,000 (every member releases and re-acquires one lock per resource, several round trips "
    "each, one after another); at 10x the resources and 4x the members that is minutes per rebalance, "
    "and its initial assignment of 200 members joining would not finish inside the 15-minute budget.",
    "kazoo has no coordinator, so it has no 'kill -9 coordinator' row; its 'kill -9 member' row is the "
    "comparison (the ÷ column uses it).",
    "N = 200, R = 100,000 runs with a 10 s session timeout (the library default) instead of 2 s: with 200 "
    "sessions on 2 shared cores, a 2 s timeout (pings every 0.67 s, 1.33 s read timeout) dropped "
    "connections under load (load average 30+ from parallel test runs) and expired sessions during the "
    "initial assignment, which measures the machine, not the library.",
]


KAFKA_MAX_MEMBERS, KAFKA_MAX_RESOURCES = 10, 1_000  # one broker on 2 shared cores
#: KIP-848 alone goes further (issue 30, item 5): the consumer protocol is the one to compare with at N = 50.
KIP848, KIP848_MAX_MEMBERS = "kafka-consumer", 50
#: With --kafka: rebalanser at Kafka's larger size, which the grid does not have (R = 1,000, as at N = 10: one
#: broker holds 1,000 partitions easily, 10,000 would measure its disk layout).
KAFKA_EXTRA: list[tuple[Cell, float]] = [(Cell("rebalanser", RB, 50, 1_000, repeats=3, faults=KILLS), 60)]


def kafka_cells(grid: list[tuple[Cell, float]]) -> list[tuple[Cell, float]]:
    """``--kafka``: a cell per Kafka protocol at each size the grid's rebalanser cells run, up to N = 10,
    R = 1,000, and KIP-848 alone up to N = 50; the same T, faults (join, leave, kill -9) and repeats."""
    sizes = sorted({(c.members, c.resources, c.repeats, c.session_timeout) for c, _ in grid if c.impl == "rebalanser"
                    and c.members <= KIP848_MAX_MEMBERS and c.resources <= KAFKA_MAX_RESOURCES})
    return [(Cell("kafka", protocol, n, r, repeats=k, faults=KILLS, session_timeout=t), 40 + 20 * k)
            for n, r, k, t in sizes for protocol in PROTOCOLS
            if n <= KAFKA_MAX_MEMBERS or protocol == KIP848]


def selected(grid: list[tuple[Cell, float]], only: str) -> list[tuple[Cell, float]]:
    """``--only``: the cells whose name followed by a space contains one of the comma-separated texts
    ("N=50 R=1000 " is that size alone, not N=50 R=10000)."""
    parts = [part for part in only.split(",") if part]
    return [(c, t) for c, t in grid if not parts or any(part in c.name + " " for part in parts)]


def kafka_versions(broker: kafka_broker.Broker) -> dict[str, Any]:
    import confluent_kafka

    client = confluent_kafka.version()
    client = client[0] if isinstance(client, tuple) else client
    return {"broker": f"Kafka {kafka_broker.VERSION} (KRaft, one combined broker and controller, -Xmx512m)",
            "client": f"confluent-kafka {client}, librdkafka {confluent_kafka.libversion()[0]}",
            "broker_settings": {k: v for k, v in broker.settings().items() if k.startswith("group.")}}


def log(message: str) -> None:
    print(message, flush=True)


def run(args: argparse.Namespace) -> dict[str, Any]:
    started = time.monotonic()
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="rebalanser-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    grid = QUICK if args.quick else FULL
    if args.kafka and not args.quick:
        names = {(c.impl, c.name) for c, _ in grid}
        grid = grid + [(c, t) for c, t in KAFKA_EXTRA if (c.impl, c.name) not in names]
    grid = selected(grid, args.only)
    if args.repeats:
        grid = [(replace(c, repeats=args.repeats), t) for c, t in grid]
    if args.max_per_process:
        grid = [(replace(c, max_per_process=args.max_per_process), t) for c, t in grid]
    if args.faults:
        grid = [(replace(c, faults=tuple(args.faults.split(","))), t) for c, t in grid]
    if args.kafka:
        grid = grid + kafka_cells(grid)
    results: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "quick": args.quick,
        "config": {"zk_heap": HEAP, "budget_s": args.budget}, "cells": [], "operator": {},
        "skipped": [] if args.quick else list(SKIPPED), "findings": list(FINDINGS) if not args.quick else [],
    }
    log(f"ZooKeeper and workers under {workdir}")
    cluster = start_standalone(workdir / "zk")
    admin = KazooClient(hosts=cluster.hosts, timeout=30)
    broker: kafka_broker.Broker | None = None
    try:
        admin.start(timeout=30)
        results["machine"] = machine(cluster)
        log(f"machine: {results['machine']['nproc']} cores, {results['machine']['cpu_model']}, load "
            f"{' '.join(results['machine']['loadavg'])}; ZooKeeper {results['machine']['zookeeper']}")
        if not args.skip_operator:
            results["operator"] = run_operator(args, cluster, admin, workdir)
        for cell, estimate in grid:
            elapsed = time.monotonic() - started
            if elapsed + estimate > args.budget:
                note = f"{cell.name} ({cell.impl}): skipped in this run, the time budget ({args.budget:.0f} s) " \
                       f"was used up after {elapsed:.0f} s"
                results["skipped"].append(note)
                log(note)
                continue
            log(f"{cell.impl:10s} {cell.name} (repeats {cell.repeats})")
            cell_started, load_before, clock = time.monotonic(), os.getloadavg(), time.strftime("%H:%M %Z")
            logs = workdir / "logs" / cell.name.replace(" ", "_")
            if cell.impl == "kafka":
                if broker is None:
                    log("starting a Kafka broker")
                    broker = kafka_broker.Broker(workdir / "kafka", int(cell.session_timeout * 1000),
                                                 int(cell.session_timeout * 1000 / 3)).start()
                    results["kafka"] = kafka_versions(broker)
                runner: CellRun = KafkaCellRun(cell, cluster, admin, logs, log, broker)
            else:
                runner = CellRun(cell, cluster, admin, logs, log)
            result = runner.run(deadline=started + args.budget)
            result["elapsed_s"] = round(time.monotonic() - cell_started, 1)
            result["loadavg"] = {"start": [round(x, 2) for x in load_before],
                                 "end": [round(x, 2) for x in os.getloadavg()], "at": clock}
            log(f"    ({result['elapsed_s']:.0f} s)")
            results["cells"].append(result)
        if not args.skip_split:
            results["split"] = run_split(cluster, admin, workdir, args.quick)
        if not args.skip_coldstart:
            results["coldstart"] = run_coldstart(cluster.hosts, admin, workdir, args.quick)
        if not args.merge:
            results["claimbook"] = run_claimbook(cluster.hosts, args.quick)
            results["assignment_bytes"] = run_assignment_bytes(args, cluster.hosts)
        results["floor"] = run_floors(cluster.hosts, results, args.quick)
    finally:
        if broker is not None:
            broker.stop()
        admin.stop()
        admin.close()
        cluster.stop()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    if not args.quick and not args.skip_operator:
        results["operator_scale"] = run_operator_scale()
    if not args.quick and not args.skip_failover:
        results["failover"] = run_failover()
    results["elapsed_s"] = round(time.monotonic() - started, 1)
    results["targets"] = report.evaluate(results)
    return results


CLAIMBOOK_CLAIMS, CLAIMBOOK_RUNS = 5_000, 5
QUICK_CLAIMBOOK_CLAIMS, QUICK_CLAIMBOOK_RUNS = 500, 1
FLOOR_REPEATS, QUICK_FLOOR_REPEATS = 3, 1


def run_claimbook(hosts: str, quick: bool) -> dict[str, Any]:
    """The claim book alone (bench/claimbook.py): claim, re-take and release of R claims by one session."""
    claims, runs = (QUICK_CLAIMBOOK_CLAIMS, QUICK_CLAIMBOOK_RUNS) if quick else (CLAIMBOOK_CLAIMS, CLAIMBOOK_RUNS)
    log(f"claim book: {claims:,} claims, {runs} runs")
    try:
        result = claimbook.measure(hosts, claims, runs)
    except Exception as exc:
        log(f"    error: {type(exc).__name__}: {exc}")
        return {"claims": claims, "error": f"{type(exc).__name__}: {exc}"}
    log(f"    claim {result['claim_p50_ms']} ms, re-take {result['retake_p50_ms']} ms, release "
        f"{result['release_p50_ms']} ms (p50)")
    return result


SPLIT = {"members": 50, "resources": 10_000, "repeats": 5, "packs": (25, 1)}
QUICK_SPLIT = {"members": 6, "resources": 120, "repeats": 1, "packs": (3, 1)}


def run_split(cluster: Any, admin: KazooClient, workdir: Path, quick: bool) -> dict[str, Any]:
    """Where a join's and a leave's time goes (bench/split.py), two process layouts side by side; after the
    grid and outside its time budget (~4 min)."""
    try:
        return split.measure(cluster, admin, workdir / "split", log=log, **(QUICK_SPLIT if quick else SPLIT))
    except Exception as exc:
        log(f"    error: {type(exc).__name__}: {exc}")
        return {"error": f"{type(exc).__name__}: {exc}"}


def run_floors(hosts: str, results: dict[str, Any], quick: bool) -> list[dict[str, Any]]:
    """ZooKeeper's floor (bench/floor.py) for every claim and cold-start figure of ``results``, each
    figure's ratio to it written beside it."""
    pairs = floor.pairs_of(results)
    if not pairs:
        return list(results.get("floor") or [])
    log(f"ZooKeeper's floor: {len(pairs)} (R, clients) pairs")
    results["floor"] = floor.merged(results.get("floor"), floor.measure_all(
        hosts, pairs, QUICK_FLOOR_REPEATS if quick else FLOOR_REPEATS, log))
    floor.attach_ratios(results)
    return list(results["floor"])


def run_coldstart(hosts: str, admin: KazooClient, workdir: Path, quick: bool = False) -> dict[str, Any]:
    """Cold start at scale (bench/coldstart.py), after the grid and outside its time budget (~5 min);
    ``quick``: one small cold start (N=3, R=300)."""
    try:
        if quick:
            return coldstart.measure_quick(hosts, admin, workdir / "cold", log)
        return coldstart.measure(hosts, admin, workdir / "cold", log)
    except Exception as exc:
        log(f"    error: {type(exc).__name__}: {exc}")
        return {"error": f"{type(exc).__name__}: {exc}"}


def merged(out: Path, fresh: dict[str, Any]) -> dict[str, Any]:
    """``fresh`` (a run of a few cells, ``--only``) put into the existing results: its cells replace
    those of the same implementation and name, every other section keeps the run it came from; the
    findings are the current ones."""
    results: dict[str, Any] = json.loads(out.read_text())
    key = lambda c: (c["cell"]["impl"], c["name"])  # noqa: E731
    replaced = {key(c) for c in fresh["cells"]}
    results["cells"] = [c for c in results["cells"] if key(c) not in replaced] + fresh["cells"]
    if "kafka" in fresh:
        results["kafka"] = fresh["kafka"]
    for section in ("kafka_n50", "split"):
        if section in fresh:
            results[section] = fresh[section]
    results["findings"] = list(FINDINGS)
    results["targets"] = report.evaluate(results)
    return results


def coldstart_only(out: Path, workdir: Path | None) -> dict[str, Any]:
    """Measures the cold start alone on a server of its own and puts it into the existing results
    (the other sections keep the run they came from)."""
    results: dict[str, Any] = json.loads(out.read_text())
    work = workdir or Path(tempfile.mkdtemp(prefix="rebalanser-bench-cold-"))
    cluster = start_standalone(work / "zk")
    admin = KazooClient(hosts=cluster.hosts, timeout=30)
    try:
        admin.start(timeout=30)
        results["coldstart"] = run_coldstart(cluster.hosts, admin, work)
        results["floor"] = run_floors(cluster.hosts, results, quick=False)
        results["findings"] = list(FINDINGS)  # the code's own text, current with it
    finally:
        admin.stop()
        admin.close()
        cluster.stop()
        if workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    results["targets"] = report.evaluate(results)
    return results


def split_only(out: Path, quick: bool) -> dict[str, Any]:
    """Measures the split alone on a server of its own and puts it into the existing results."""
    results: dict[str, Any] = json.loads(out.read_text()) if out.exists() else {"cells": [], "quick": quick}
    work = Path(tempfile.mkdtemp(prefix="rebalanser-bench-split-"))
    cluster = start_standalone(work / "zk")
    admin = KazooClient(hosts=cluster.hosts, timeout=30)
    try:
        admin.start(timeout=30)
        results["split"] = run_split(cluster, admin, work, quick)
    finally:
        admin.stop()
        admin.close()
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)
    results["elapsed_s"] = results.get("elapsed_s", 0.0)
    results["targets"] = report.evaluate(results)
    return results


def run_failover() -> dict[str, Any]:
    """Kubelet-confirmed vs session-expiry failover on the real cluster (bench/failover.py); without the
    cluster (make cluster-up) the result says why."""
    log("failover on the real cluster (KubeletConfirmed vs SessionExpiry)")
    try:
        return failover.run(kills=6, workers=3, resources=12)
    except failover.NoCluster as exc:
        return {"skipped": f"no cluster: {exc}"}
    except Exception as exc:
        log(f"    error: {type(exc).__name__}: {exc}")
        return {"error": f"{type(exc).__name__}: {exc}"}


def run_assignment_bytes(args: argparse.Namespace, hosts: str) -> dict[str, Any]:
    """Bytes per rebalance, chunked vs whole lists (bench/assignment_bytes.py)."""
    log("bytes written per rebalance (chunked vs whole lists)")
    try:
        if args.quick:
            return assignment_bytes.run(members=3, resources=1_500, log=log, hosts=hosts)
        return assignment_bytes.run(members=10, resources=50_000, log=log, hosts=hosts)
    except Exception as exc:
        log(f"    error: {type(exc).__name__}: {exc}")
        return {"error": f"{type(exc).__name__}: {exc}"}
def run_operator_scale() -> Any:
    """1,000 ResourceGroups on one operator (bench/operator_idle.py): synced, idle CPU, RSS, membership
    changes; an error is recorded, never fatal to the rest of the report."""
    log("operator at scale: 1,000 ResourceGroups")
    try:
        return operator_idle.run([1000], resources=20, idle=60.0, probes=3, log=lambda m: log(f"    {m}"))
    except Exception as exc:
        log(f"    error: {type(exc).__name__}: {exc}")
        return [{"error": f"{type(exc).__name__}: {exc}"}]


def run_operator(args: argparse.Namespace, cluster: Any, admin: KazooClient, workdir: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    log("operator")
    try:
        out["reconcile"] = bench_reconcile(admin, 1_000 if args.quick else 10_000, 1 if args.quick else 3, log)
        if not args.quick:
            out["status_lag"] = bench_status_lag(cluster, admin, workdir / "logs" / "operator", 3, log)
    except ImportError as exc:
        out["error"] = f"TODO: the operator package is not importable ({exc})"
    except Exception as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
        log(f"    error: {out['error']}")
    return out


FINDINGS_FILE = Path(__file__).with_name("findings.md")


def load_findings(path: Path = FINDINGS_FILE) -> list[str]:
    """The profiling findings: ``bench/findings.md``, one bullet (``- ``) per finding; lines that
    continue a bullet are joined to it, anything before the first bullet is the file's preamble."""
    items: list[str] = []
    for line in path.read_text().splitlines():
        if line.startswith("- "):
            items.append(line[2:].strip())
        elif line.strip() and items:
            items[-1] += " " + line.strip()
    return items


FINDINGS = load_findings()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.run", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="a tiny grid (< 60 s), output into the work directory")
    p.add_argument("--only", default="", help="run only cells whose name (and a space) contains one of these "
                   "comma-separated texts")
    p.add_argument("--repeats", type=int, default=0, help="override every cell's repeats")
    p.add_argument("--max-per-process", type=int, default=0,
                   help="override how many members share a bench process (1: every member a process of its own)")
    p.add_argument("--faults", default="",
                   help="comma-separated faults to run in every cell (join,leave,kill,kill-coordinator)")
    p.add_argument("--budget", type=float, default=0.0, help="seconds; cells that would start later are skipped")
    p.add_argument("--kafka", action="store_true",
                   help="also run Kafka consumer groups (eager, cooperative-sticky, KIP-848) at the grid's sizes up "
                   "to N=10, R=1,000, KIP-848 alone up to N=50, and rebalanser at N=50, R=1,000 (needs Java and "
                   "Maven; make bench-kafka)")
    p.add_argument("--skip-operator", action="store_true")
    p.add_argument("--skip-failover", action="store_true", help="skip the real-cluster failover comparison")
    p.add_argument("--skip-coldstart", action="store_true", help="skip the cold start at scale")
    p.add_argument("--skip-split", action="store_true",
                   help="skip the split of a join's and a leave's time (library path, harness share)")
    p.add_argument("--split-only", action="store_true",
                   help="measure only the split and put it into the existing results and report")
    p.add_argument("--coldstart-only", action="store_true",
                   help="measure only the cold start and put it into the existing results and report")
    p.add_argument("--merge", action="store_true",
                   help="with --only: put the cells measured into the existing results and report, in place of "
                   "those of the same name (implies --skip-operator, --skip-failover, --skip-coldstart)")
    p.add_argument("--out", type=Path, help="results JSON (default bench/results.json; --quick: work dir)")
    p.add_argument("--md", type=Path, help="markdown report (default docs/benchmarks.md; --quick: work dir)")
    p.add_argument("--workdir", help="where ZooKeeper data and worker logs go (default: a temp dir)")
    p.add_argument("--keep", action="store_true", help="keep the work directory")
    args = p.parse_args(argv)
    if not args.budget:
        args.budget = 55.0 if args.quick else 810.0
    if args.quick and (args.out is None or args.md is None):
        scratch = Path(tempfile.mkdtemp(prefix="rebalanser-bench-quick-"))
        args.out = args.out or scratch / "results.json"
        args.md = args.md or scratch / "benchmarks.md"
    out = args.out or REPO / "bench" / "results.json"
    md = args.md or REPO / "docs" / "benchmarks.md"
    if args.merge:
        args.skip_operator = args.skip_failover = args.skip_coldstart = args.skip_split = True
        results = merged(out, run(args))
    elif args.coldstart_only:
        results = coldstart_only(out, Path(args.workdir) if args.workdir else None)
    elif args.split_only:
        results = split_only(out, args.quick)
    else:
        results = run(args)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1, sort_keys=False) + "\n")
    text = report.markdown(results)
    md.parent.mkdir(parents=True, exist_ok=True)
    md.write_text(text)
    from bench.figures import render_bench  # matplotlib: only once there are results to draw

    figures = render_bench(results, md.parent / "figures")
    print()
    print(text)
    print(f"wrote {out}, {md} and {len(figures)} figures in {figures[0].parent} ({results['elapsed_s']:.0f} s)")
    failed = [c["name"] for c in results["cells"] if c.get("error")]
    if failed:
        print(f"cells with errors: {', '.join(failed)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
