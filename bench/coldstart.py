"""Cold start at scale: N workers start together on a fresh group that already has R resources.

    python -m bench.coldstart [--members 50] [--resources 100000] [--per-process 5] [--runs 1]

A fresh group is what the operator leaves before any worker runs: ``G/resources`` with R children,
no member, no assignment, no claim. Every worker process (:mod:`bench.multiworker`, ``--per-process``
members each, every member its own ZooKeeper session) is spawned at once; each starts its members
concurrently. Measured from the workers' JSON events only:

* **joined**: a member's first ``role`` event (its member node exists and it has run the election);
  ``last joined`` is the latest of them.
* **settled**: every resource worked on by exactly one member, balanced, and no ``assigned`` or
  ``revoked`` event for ``quiet`` seconds; the settle instant is the later of the last assignment
  change and the first unit of work of the last resource started. ``settle after last join`` is
  that instant minus ``last joined``.
* **claims created**: distinct (resource, token) pairs over every ``assigned`` event: each claim
  carries its own token (its creation zxid), so two claims of one resource never share one.
  ``claims / R`` is the target's ratio (1.0 = every resource claimed once).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient
from kazoo.protocol.states import ZnodeStat
from rebalanser import wire

from bench.cpu import cpu_bound_s, process_cpu_s, server_pid
from bench.fleet import Fleet, FleetConfig
from bench.scenarios import create_resources
from bench.zkserver import start_standalone


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def count_claims(log_dir: Path, until_ns: int) -> dict[str, int]:
    """From the raw event lines: claims created (distinct resource/token pairs), and resources
    assigned and revoked summed over events, up to ``until_ns`` (the stop at the end is not counted)."""
    pairs: set[tuple[str, int]] = set()
    assigned = revoked = 0
    for path in log_dir.glob("*.jsonl"):
        with path.open() as lines:
            for line in lines:
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                kind = event.get("event")
                if int(event.get("ts", 0)) > until_ns:
                    continue
                if kind == "assigned":
                    token = int(event["token"])
                    assigned += len(event["resources"])
                    pairs.update((r, token) for r in event["resources"])
                elif kind == "revoked":
                    revoked += len(event["resources"])
    return {"claims": len(pairs), "assigned": assigned, "revoked": revoked}


@dataclass(frozen=True)
class ColdStart:
    members: int = 50
    resources: int = 100_000
    per_process: int = 5
    stagger: float = 0.0  # members start evenly over this many seconds (0: all at once)
    initial_quiet: float | None = None  # the library's start-up window; None: its default
    session_timeout: float = 10.0
    min_interval: float = 2.0
    quiet: float = 1.0  # settled: no assignment change for this long


def cold_start(hosts: str, admin: KazooClient, log_dir: Path, cell: ColdStart) -> dict[str, Any]:
    """One cold start; returns its measurements (``error`` set when it did not settle)."""
    members, resources, per_process, stagger = cell.members, cell.resources, cell.per_process, cell.stagger
    group = f"/bench/cold-n{members}-r{resources}-{uuid.uuid4().hex[:6]}"
    log_dir.mkdir(parents=True, exist_ok=True)
    created = time.monotonic()
    create_resources(admin, group, resources)
    out: dict[str, Any] = {"create_resources_s": round(time.monotonic() - created, 2)}
    rebalances: list[dict[str, Any]] = []

    def on_state(data: bytes | None, stat: ZnodeStat | None, *_: Any) -> None:
        if data:
            record = wire.decode_rebalance(data)
            rebalances.append({"at_ns": time.monotonic_ns(), "generation": record.generation,
                               "members": record.members, "duration_ms": record.duration_ms, "moved": record.moved})

    admin.DataWatch(f"{group}/state", on_state)
    fleet = Fleet(FleetConfig(impl="rebalanser", hosts=hosts, group=group, session_timeout=cell.session_timeout,
                              min_interval=cell.min_interval, log_dir=log_dir, keep_events=True,
                              initial_quiet=cell.initial_quiet))
    ids = [f"m{i:03d}" for i in range(members)]
    # Every process loads first; then all start their members at one instant (the go file), member i
    # i x stagger / (N - 1) after it, members of one process interleaved with the others'.
    go = log_dir / "go"
    go.unlink(missing_ok=True)
    offsets = {m: stagger * i / max(1, members - 1) for i, m in enumerate(ids)}
    processes = math.ceil(members / per_process)
    procs = []
    for p in range(processes):
        mine = ids[p::processes]
        procs.append(fleet.spawn(mine, label=f"p{p:02d}", go=go, start_at=[offsets[m] for m in mine]))
    for proc in procs:
        if not proc.loaded.wait(300):
            fleet.stop_all()
            raise RuntimeError(f"{proc.label} did not load")
    out["load_before"] = loadavg()
    server = server_pid(hosts)
    server_before, harness_before = process_cpu_s(server), process_cpu_s(os.getpid())
    go.write_text(f"{time.time():.3f}")
    spawned_ns = settled_ns = time.monotonic_ns()
    try:
        timeout = 120 + resources / 500
        ok = fleet.wait_settled(resources, set(ids), timeout, quiet=cell.quiet)
        server_after, harness_after = process_cpu_s(server), process_cpu_s(os.getpid())
        ledger = fleet.ledger
        with ledger.lock:
            roles = dict(ledger.roles)
            worked = [e.worked_ns or 0 for e in ledger.current.values()]
            last_change = ledger.last_change_ns
        joined = [ts for _, _, ts in roles.values()]
        out["load_after"] = loadavg()
        if not ok or len(joined) < members:
            out["error"] = f"did not settle within {timeout:.0f} s ({len(joined)}/{members} joined)"
        else:
            first_join, last_join = min(joined), max(joined)
            settled_ns = max(last_change, max(worked))
            after = fleet.snapshot(timeout=10)
            out["worker_cpu_s"] = round(sum(float(after[p.label]["cpu"]) - p.loaded_cpu
                                            for p in procs if p.label in after), 2)
            if harness_before is not None and harness_after is not None:  # reading every worker's events
                out["harness_cpu_s"] = round(harness_after - harness_before, 2)
            if server_before is not None and server_after is not None:
                out["server_cpu_s"] = round(server_after - server_before, 2)
                out["cpu_bound_s"] = cpu_bound_s(out["worker_cpu_s"], out["server_cpu_s"], out.get("harness_cpu_s"))
            out.update({
                "join_spread_s": round((last_join - first_join) / 1e9, 2),
                "first_join_after_go_s": round((first_join - spawned_ns) / 1e9, 2),
                "settle_after_last_join_s": round((settled_ns - last_join) / 1e9, 2),
                "rebalances": [{"after_last_join_s": round((r["at_ns"] - last_join) / 1e9, 2),
                                **{k: v for k, v in r.items() if k != "at_ns"}} for r in rebalances],
            })
    finally:
        fleet.stop_all()
    counts = count_claims(log_dir, settled_ns)
    out.update(counts)
    out["claims_per_resource"] = round(counts["claims"] / resources, 3)
    return out


def run(cell: ColdStart, runs: int, workdir: Path | None = None, hosts: str | None = None,
        admin: KazooClient | None = None, log: Any = print) -> dict[str, Any]:
    """``runs`` cold starts, each on a fresh group (on the given server, or on one of its own)."""
    work = workdir or Path(tempfile.mkdtemp(prefix="rebalanser-cold-"))
    cluster = start_standalone(work / "zk") if hosts is None else None
    hosts = cluster.hosts if cluster is not None else hosts
    assert hosts is not None
    client = admin or KazooClient(hosts=hosts, timeout=30)
    if admin is None:
        client.start(timeout=30)
    samples: list[dict[str, Any]] = []
    try:
        for i in range(runs):
            sample = cold_start(hosts, client, work / "logs" / f"cold{i}", cell)
            log(f"    cold start #{i}: " + ", ".join(f"{k} {v}" for k, v in sample.items()))
            samples.append(sample)
    finally:
        if admin is None:
            client.stop()
            client.close()
        if cluster is not None:
            cluster.stop()
        if workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    good = [s for s in samples if "error" not in s]
    settle = sorted(s["settle_after_last_join_s"] for s in good)
    ratio = sorted(s["claims_per_resource"] for s in samples)
    return {
        **asdict(cell), "processes": math.ceil(cell.members / cell.per_process), "samples": samples,
        "settle_p50_s": settle[(len(settle) - 1) // 2] if settle else None,
        "settle_max_s": settle[-1] if settle else None,
        "claims_per_resource_max": ratio[-1] if ratio else None,
    }


TARGET_SETTLE_S = 3.0
TARGET_CLAIMS_PER_RESOURCE = 1.05


def targets(result: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The cold-start target of ``bench.report`` (none when it did not run)."""
    if not result or result.get("error") or not result.get("runs"):
        return []
    runs = result["runs"]
    # at once, and the widest spread measured with the library's defaults (a rollout's pace)
    spread = [r for r in runs[1:] if r.get("stagger") and r.get("initial_quiet") is None and r["members"] > 1]
    return [_target(run) for run in [runs[0], *sorted(spread, key=lambda r: r["stagger"])[-1:]]]


def _target(main: dict[str, Any]) -> dict[str, Any]:
    if main.get("settle_p50_s") is None:
        return {"target": _name(main), "met": False, "value": "did not settle",
                "detail": "; ".join(s.get("error", "") for s in main["samples"])}
    loads = [s["load_before"][0] for s in main["samples"] if s.get("load_before")]
    met = main["settle_max_s"] <= TARGET_SETTLE_S and main["claims_per_resource_max"] <= TARGET_CLAIMS_PER_RESOURCE
    return {"target": _name(main), "met": met,
            "value": f"settled {main['settle_p50_s']} s p50, {main['settle_max_s']} s max after the last join; "
                     f"claims {main['claims_per_resource_max']} x R at most",
            "detail": f"{len(main['samples'])} runs, load average {min(loads, default=0):.1f}-"
                      f"{max(loads, default=0):.1f} at the start (2 shared cores)"}


def _name(run: dict[str, Any]) -> str:
    joins = f", joins spread over {run['stagger']:g} s" if run.get("stagger") else ""
    return (f"cold start N={run['members']} R={run['resources']:,}{joins}: settled ≤ {TARGET_SETTLE_S:g} s "
            f"after the last join, ≤ {TARGET_CLAIMS_PER_RESOURCE:g} x R claims")


def markdown_lines(result: dict[str, Any] | None) -> list[str]:
    """The section of docs/benchmarks.md (``bench.report`` appends it when ``make bench`` measured it)."""
    if not result:
        return []
    lines = ["", "## Cold start: N workers starting together on a fresh group", ""]
    if result.get("error"):
        return [*lines, f"- not measured: {result['error']}"]
    lines += [
        "A fresh group (R resources, no member, nothing assigned); N members in processes of "
        f"{result['runs'][0]['per_process']} (`python -m bench.coldstart`, `bench/multiworker.py`; each member its "
        "own ZooKeeper session). Every process loads first, then all start their members at one instant "
        "(`stagger` 0) or evenly over `stagger` seconds. **settle**: from the last member's join (its first "
        "`role` event) until every resource is worked on by exactly one member, balanced, with no "
        "assignment change for 1 s. **worker CPU**: user + system CPU seconds of every worker process from the "
        "start to the end of the settle window (interpreter start-up excluded). **server CPU**: the ZooKeeper "
        "server's, over the same window (its process on this machine); **CPU bound**: those and the harness's own "
        "(reading every worker's events) divided by the machine's cores, the least wall time that work can take "
        "here. **R creates by one client**: how "
        "long the harness's one kazoo client took to create the R resource znodes just before (multis of 1,000, "
        "four in flight): a gauge of the machine's speed at that moment. **claims**: distinct (resource, token) "
        "pairs over every `assigned` event (each claim has its own token). **x floor**: the settle time divided by "
        "the fastest creation of R ephemeral znodes measured in the same run by one plain client and by N "
        "(bench/floor.py, the section ZooKeeper's floor). `initial_quiet` is the start-up window "
        "(docs/protocol.md, \"Cold start\"); 0 assigns at once (with 0 the member-side guard, a claim round "
        "abandoned when a newer assignment arrives, still applies). Measured " + result.get("started", "") + ".",
        "",
        "| N | R | stagger | initial_quiet | run | load (1 min) | join spread | rebalances (members) "
        "| settle after last join "
        "| x floor (1 client / N clients) | claims / R | worker CPU | server CPU (CPU bound) "
        "| R creates by one client |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in result["runs"]:
        quiet = "default (0.5 s)" if run["initial_quiet"] is None else f"{run['initial_quiet']:g} s"
        for i, s in enumerate(run["samples"]):
            load = f"{s['load_before'][0]:.1f}" if s.get("load_before") else "-"
            if s.get("error"):
                lines.append(f"| {run['members']} | {run['resources']:,} | {run['stagger']:g} s | {quiet} | {i} | "
                             f"{load} | - | - | {s['error']} | - | {s.get('claims_per_resource', '-')} | - | - | "
                             f"{s['create_resources_s']} s |")
                continue
            rebalances = ", ".join(str(r["members"]) for r in s.get("rebalances", []))
            lines.append(f"| {run['members']} | {run['resources']:,} | {run['stagger']:g} s | {quiet} | {i} | {load} "
                         f"| {s['join_spread_s']} s | {len(s.get('rebalances', []))} ({rebalances}) "
                         f"| {s['settle_after_last_join_s']} s | {_x_floor(s)} | {s['claims_per_resource']} "
                         f"| {s.get('worker_cpu_s', '-')} s | {_server_cpu(s)} | {s['create_resources_s']} s |")
    lines += ["", *(f"- {note}" for note in result.get("notes", []))]
    lines += [f"- {note}" for note in breakdown(result["runs"][0])]
    lines += ["- On this machine the settle time follows the load: the coordinator's rebalance of 100,000 resources "
              "and the members' 100,000 claims are CPU work in Python processes that share 2 cores with whatever "
              "else runs; the claims ratio does not depend on it.", ""]
    return lines


def _server_cpu(sample: dict[str, Any]) -> str:
    """The server's CPU seconds, and the least wall time the workers', the server's and the harness's CPU
    needs on this machine's cores (\"-\": a server elsewhere, not measured)."""
    if sample.get("server_cpu_s") is None:
        return "-"
    return f"{sample['server_cpu_s']} s ({sample['cpu_bound_s']} s)"


def _x_floor(sample: dict[str, Any]) -> str:
    ratios = sample.get("x_floor") or {}
    one, many, over = ratios.get("one_client"), ratios.get("members_clients"), ratios.get("over_members_floor_s")
    text = f"{one if one is not None else '-'} / {many if many is not None else '-'}"
    return text + (f" (N clients' floor + {over:g} s)" if over is not None else "")


def breakdown(run: dict[str, Any]) -> list[str]:
    """Where the time of each settled run of ``run`` went, from its G/state records and events."""
    notes = []
    for i, s in enumerate(run["samples"]):
        rebalances = s.get("rebalances") or []
        if s.get("error") or not rebalances:
            continue
        first, settle = rebalances[0], s["settle_after_last_join_s"]
        written = first["after_last_join_s"]
        notes.append(
            f"Run {i} (load {s['load_before'][0]:.0f}): the first assignment was written {written} s after the last "
            f"join (its rebalance took {(first['duration_ms'] or 0) / 1000:.2f} s, after the start-up window), then "
            f"{settle - written:.2f} s went by until every member had claimed and started its share; the worker "
            f"processes used {s.get('worker_cpu_s', '-')} CPU-s in all, on 2 cores shared with other work.")
    return notes


def measure(hosts: str, admin: KazooClient, workdir: Path, log: Any = print, runs: int = 2) -> dict[str, Any]:
    """What ``make bench`` runs: the target's cell with the library's defaults, then a staggered start
    with the start-up window and without it, side by side."""
    started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    alone = ColdStart(members=1, resources=1_000, per_process=1)
    cells = [(ColdStart(), runs), (ColdStart(stagger=2.0), 1), (ColdStart(stagger=5.0), 1),
             (ColdStart(stagger=2.0, initial_quiet=0.0), 1), (alone, 3), (replace(alone, initial_quiet=0.0), 3)]
    out = []
    for i, (cell, repeats) in enumerate(cells):
        log(f"cold start N={cell.members} R={cell.resources} stagger {cell.stagger:g} s "
            f"initial_quiet {cell.initial_quiet}")
        out.append(run(cell, repeats, workdir=workdir / f"cell{i}", hosts=hosts, admin=admin, log=log))
    return {"started": started, "runs": out, "notes": [
        "A worker starting alone (N=1, R=1,000): settled "
        f"{out[-2]['settle_p50_s']} s p50 after joining with the start-up window, {out[-1]['settle_p50_s']} s "
        "without it (initial_quiet 0): the window costs a lone worker initial_quiet once."]}


def measure_quick(hosts: str, admin: KazooClient, workdir: Path, log: Any = print) -> dict[str, Any]:
    """``make bench --quick``'s cold start: one run of three members, R = 300."""
    started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    cell = ColdStart(members=3, resources=300, per_process=3, session_timeout=2.0, min_interval=1.0)
    log(f"cold start N={cell.members} R={cell.resources} (quick)")
    return {"started": started, "runs": [run(cell, 1, workdir=workdir / "cell0", hosts=hosts, admin=admin, log=log)],
            "notes": []}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.coldstart", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--members", type=int, default=50)
    p.add_argument("--resources", type=int, default=100_000)
    p.add_argument("--per-process", type=int, default=5)
    p.add_argument("--stagger", type=float, default=0.0, help="members start evenly over this many seconds")
    p.add_argument("--initial-quiet", type=float, help="the start-up window (default: the library's)")
    p.add_argument("--session-timeout", type=float, default=10.0)
    p.add_argument("--min-interval", type=float, default=2.0)
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--workdir", type=Path)
    args = p.parse_args(argv)
    cell = ColdStart(args.members, args.resources, args.per_process, args.stagger, args.initial_quiet,
                     args.session_timeout, args.min_interval)
    result = run(cell, args.runs, workdir=args.workdir)
    print(json.dumps({k: v for k, v in result.items() if k != "samples"}))
    return 0 if result["settle_p50_s"] is not None else 1


if __name__ == "__main__":
    sys.exit(main())
