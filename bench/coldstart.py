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
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient
from kazoo.protocol.states import ZnodeStat
from rebalanser import wire

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
    go.write_text(f"{time.time():.3f}")
    spawned_ns = settled_ns = time.monotonic_ns()
    try:
        timeout = 120 + resources / 500
        ok = fleet.wait_settled(resources, set(ids), timeout, quiet=cell.quiet)
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
