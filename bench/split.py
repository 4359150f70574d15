"""Where a join's and a leave's time goes: the library's path and the harness's share (issue 30, item 3).

    python -m bench.split [--members 50] [--resources 10000] [--repeats 5] [--packs 25,1] [--dump DIR]

One Resource Barrier group per process layout (``--packs``: members per bench process; 1 = every
member a process of its own), all set up on one server, then their joins and leaves alternately
(the layout going first alternating by repeat) so that load drift hits both. The workers run with
``--trace`` (:mod:`bench.multiworker`): every write they send, every read of an assignment, state,
member or barrier path, and every watch notification they receive is an event with its member and
its CLOCK_MONOTONIC instant, beside the usual ``assigned``/``ticks``/``stopped`` events. From those
events only, per fault (ms after the fault; the fault's instant as in bench/scenarios.py):

* **leaver** (leave): the leaver's last write (its assignment delete) and its ``stopped`` event;
* **coordinator notified**: the coordinator's first notification about the members after the fault;
* **plan**: from that notification to the coordinator's first assignment write (what it computed);
* **write**: from its first to its last write of the rebalance (assignment and state);
* **gainers** (members told of new resources): the notification of its assignment, its ``assigned``
  event (the library has read, waited for releases and claimed: ``on_assigned`` ran), its ``ticks``
  event (the bench's work loop has worked on them). p50 and max over the gainers of each span:
  *notified* (after the fault; a joiner: its first read of its assignment), *read + release + claim*
  (notified to assigned), *harness* (assigned to worked);
* **library path**: the fault to the last gainer's ``assigned`` event, the instant the library has
  handed every resource over; **harness share**: from there to the end (every resource worked on);
* **CPU**: user + system CPU seconds of the processes that existed before the fault, from its start
  to settled (bench/scenarios.py).

Requests are timed when sent (the bench counts them in kazoo's submit), notifications when read.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient

from bench.scenarios import Cell, CellRun, Sample, percentile
from bench.zkserver import start_standalone

WRITES = {"create", "delete", "set", "check", "multi"}


def _first(events: list[dict[str, Any]], after: int, **match: Any) -> int | None:
    for e in events:
        if e["ts"] >= after and all(e.get(k) == v for k, v in match.items()):
            return int(e["ts"])
    return None


def _ms(ns: int | None, since: int | None) -> float | None:
    return None if ns is None or since is None else round((ns - since) / 1e6, 1)


def _spans(values: list[float]) -> dict[str, float | None]:
    return {"p50": percentile(values, 50), "max": max(values) if values else None}


def analyse(events: list[dict[str, Any]], sample: Sample) -> dict[str, Any]:
    """The split of one fault (see the module doc) from the events of its window, in time order."""
    start = sample.fault_ns
    end = start + int(sample.window_s * 1e9)
    window = sorted((e for e in events if start <= int(e.get("ts", 0)) <= end), key=lambda e: int(e["ts"]))
    by: dict[str, list[dict[str, Any]]] = {}
    for e in window:
        by.setdefault(e.get("id", ""), []).append(e)
    chief = by.get(sample.coordinator, [])
    notified = _first(chief, start, event="notified", kind="members")
    writes = [int(e["ts"]) for e in chief if e.get("event") == "zk" and e.get("op") in WRITES
              and e.get("kind") in ("assignment", "state")]
    first_write, last_write = (min(writes), max(writes)) if writes else (None, None)
    out: dict[str, Any] = {
        "fault": sample.fault, "repeat": sample.repeat, "latency_ms": sample.latency_ms,
        "coordinator_notified_ms": _ms(notified, start), "plan_ms": _ms(first_write, notified),
        "write_ms": _ms(last_write, first_write), "coordinator_done_ms": _ms(last_write, start),
        "cpu_s": sample.client.get("cpu_s"),
    }
    if sample.fault == "leave":
        mine = by.get(sample.member, [])
        leaver_writes = [int(e["ts"]) for e in mine if e.get("event") == "zk" and e.get("op") in WRITES]
        out["leaver_last_write_ms"] = _ms(max(leaver_writes) if leaver_writes else None, start)
        out["leaver_stopped_ms"] = _ms(_first(mine, start, event="stopped"), start)
    told, claimed, harness, assigned_at, ticked_at = [], [], [], [], []
    for member, mine in by.items():
        assigned = [e for e in mine if e.get("event") == "assigned"]
        if not assigned or (member == sample.member and sample.fault != "join"):
            continue
        got = int(assigned[-1]["ts"])
        wanted = {r for e in assigned for r in e["resources"]}
        ticks = [int(e["ts"]) for e in mine if e.get("event") == "ticks" and wanted & set(e["resources"])]
        heard = _first(mine, first_write or start, event="notified", kind="assignment")
        if heard is None and member == sample.member:  # the joiner reads its assignment after its join
            heard = _first(mine, first_write or start, event="zk", kind="assignment")
        if heard is not None:
            told.append((heard - start) / 1e6)
            claimed.append((got - heard) / 1e6)
        assigned_at.append(got)
        if ticks:
            harness.append((max(ticks) - got) / 1e6)
            ticked_at.append(max(ticks))
    out["gainers"] = len(assigned_at)
    out["gainer_notified_ms"] = _spans([round(x, 1) for x in told])
    out["gainer_read_release_claim_ms"] = _spans([round(x, 1) for x in claimed])
    out["gainer_harness_ms"] = _spans([round(x, 1) for x in harness])
    library = max(assigned_at) if assigned_at else None
    out["library_path_ms"] = _ms(library, start)
    out["harness_share_ms"] = (round(sample.latency_ms - out["library_path_ms"], 1)
                               if sample.latency_ms is not None and out["library_path_ms"] is not None else None)
    return out


# -------------------------------------------------------------------------------------------- runs


FAULTS = ("join", "leave")


def _dump(path: Path, events: list[dict[str, Any]], sample: Sample) -> None:
    """One fault's events from its instant on, with who left or joined and who coordinated (--dump)."""
    path.write_text(json.dumps({"fault": sample.fault, "fault_ns": sample.fault_ns, "member": sample.member,
                                "coordinator": sample.coordinator,
                                "events": [e for e in events if int(e.get("ts", 0)) >= sample.fault_ns]}))


def measure(cluster: Any, admin: KazooClient, workdir: Path, members: int, resources: int, repeats: int,
            packs: tuple[int, ...], log: Any = print, dump: Path | None = None) -> dict[str, Any]:
    """Both layouts' groups set up, then their faults alternately; each fault's split."""
    started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    runs: dict[int, CellRun] = {}
    rows: dict[int, list[dict[str, Any]]] = {p: [] for p in packs}
    try:
        for pack in packs:
            cell = Cell("rebalanser", "resource-barrier", members, resources, repeats=repeats, faults=FAULTS,
                        max_per_process=pack)
            run = CellRun(cell, cluster, admin, workdir / f"pack{pack}", log)
            run.fleet.config.trace = True
            runs[pack] = run
            log(f"split {cell.name}: {pack} member(s) per process, setting up")
            if not run.setup():
                raise RuntimeError(f"{pack} per process: {run.result.get('error')}")
            run.result["processes"] = len(run.fleet.live())
        for repeat in range(repeats):
            for fault in FAULTS:
                for pack in packs if repeat % 2 == 0 else packs[::-1]:
                    run = runs[pack]
                    sample = run.fault(fault, repeat)
                    with run.fleet.lock:
                        events = list(run.fleet.events)
                    if dump is not None:
                        _dump(dump / f"{pack}-{fault}-{repeat}.json", events, sample)
                    row = analyse(events, sample) if sample.ok else {"fault": fault, "repeat": repeat,
                                                                     "error": sample.note}
                    row["load1"] = round(os.getloadavg()[0], 2)
                    rows[pack].append(row)
                    log(f"    {pack:2d}/process {fault:5s} #{repeat}: " + describe(row))
    finally:
        for run in runs.values():
            run.fleet.stop_all()
    return {"started": started, "members": members, "resources": resources, "repeats": repeats,
            "layouts": [{"per_process": p, "processes": runs[p].result.get("processes") if p in runs else None,
                         "faults": rows[p], "summary": summary(rows[p])} for p in packs]}


def describe(row: dict[str, Any]) -> str:
    if "error" in row:
        return f"FAILED {row['error']}"
    return (f"{row['latency_ms']:.0f} ms = library {row['library_path_ms']} + harness {row['harness_share_ms']}; "
            f"coordinator notified {row['coordinator_notified_ms']}, plan {row['plan_ms']}, write {row['write_ms']}; "
            f"{row['gainers']} gainers: notified {row['gainer_notified_ms']['max']}, claim "
            f"{row['gainer_read_release_claim_ms']['max']}, harness {row['gainer_harness_ms']['max']} (max)")


KEYS = ("latency_ms", "library_path_ms", "harness_share_ms", "leaver_stopped_ms", "coordinator_notified_ms",
        "plan_ms", "write_ms", "coordinator_done_ms", "cpu_s")
GAINER_KEYS = ("gainer_notified_ms", "gainer_read_release_claim_ms", "gainer_harness_ms")


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """p50 over the repeats of every figure, per fault."""
    out: dict[str, Any] = {}
    for fault in FAULTS:
        mine = [r for r in rows if r.get("fault") == fault and "error" not in r]
        fig: dict[str, Any] = {"n": len(mine), "load1": [r["load1"] for r in mine]}
        for key in KEYS:
            fig[key] = percentile([r[key] for r in mine if r.get(key) is not None], 50)
        for key in GAINER_KEYS:
            fig[key] = {k: percentile([r[key][k] for r in mine if r[key][k] is not None], 50) for k in ("p50", "max")}
        out[fault] = fig
    return out


def markdown_lines(result: dict[str, Any] | None) -> list[str]:
    """The split's section of docs/benchmarks.md."""
    if not result:
        return []
    size = f"N = {result['members']}, R = {result['resources']:,}"
    lines = ["", f"## Where a join's and a leave's time goes ({size})", ""]
    if result.get("error"):
        return [*lines, f"- not measured: {result['error']}", ""]
    lines += [
        "`python -m bench.split` (bench/split.py has the definitions): Resource Barrier, the same group size "
        "with two process layouts set up on one server, their joins and leaves alternating. Every figure comes "
        "from the workers' own event streams (`--trace`: the requests they send and the notifications they "
        "read, with their instants), p50 over the repeats, ms after the fault. **library path**: until the last "
        "gainer's `on_assigned` (read, release wait and claim done); **harness share**: from there until "
        "every resource is worked on by the bench's work loop. **plan**: the coordinator's notification to its first "
        "write; **write**: its first to its last write (assignment, state). Gainer columns: p50 / max over the "
        "gainers of one fault (*notified*: after the fault), then p50 over the repeats. **CPU-s**: the worker "
        "processes' CPU from the fault until settled. **load**: one-minute load average after each fault. Tracing "
        "writes a JSON line per traced request and notification, so these end-to-end figures run a little slower "
        f"than the untraced grid's above. Measured {result['started']}.", "",
        "| fault | members per process (processes) | end to end | library path | harness share | leaver stopped "
        "| coordinator notified | plan | write | gainers notified | read + release + claim | gainers' harness "
        "| CPU-s | load |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for fault in FAULTS:
        for layout in result["layouts"]:
            s = layout["summary"].get(fault)
            if not s or not s["n"]:
                continue
            gain = [f"{_v(s[k]['p50'])} / {_v(s[k]['max'])}" for k in GAINER_KEYS]
            loads = s["load1"]
            lines.append(
                f"| {fault} | {layout['per_process']} ({layout['processes']}) | {_v(s['latency_ms'])} "
                f"| {_v(s['library_path_ms'])} | {_v(s['harness_share_ms'])} | {_v(s['leaver_stopped_ms'])} "
                f"| {_v(s['coordinator_notified_ms'])} | {_v(s['plan_ms'])} | {_v(s['write_ms'])} | "
                + " | ".join(gain) + f" | {_v(s['cpu_s'])} | {min(loads):.1f}-{max(loads):.1f} |")
    return [*lines, ""]


def _v(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.split", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--members", type=int, default=50)
    p.add_argument("--resources", type=int, default=10_000)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--packs", default="25,1", help="members per process of each layout, comma-separated")
    p.add_argument("--out", type=Path, help="write the result as JSON here")
    p.add_argument("--dump", type=Path, help="write each fault's traced events here (a directory), to read "
                   "one member's or one process's timeline")
    args = p.parse_args(argv)
    if args.dump is not None:
        args.dump.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="rebalanser-split-"))
    cluster = start_standalone(work / "zk")
    admin = KazooClient(hosts=cluster.hosts, timeout=30)
    try:
        admin.start(timeout=30)
        result = measure(cluster, admin, work / "logs", args.members, args.resources, args.repeats,
                         tuple(int(x) for x in args.packs.split(",")), dump=args.dump)
    finally:
        admin.stop()
        admin.close()
        cluster.stop()
    text = json.dumps(result, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    print("\n".join(markdown_lines(result)))
    return 0 if all("error" not in r for layout in result["layouts"] for r in layout["faults"]) else 1


if __name__ == "__main__":
    sys.exit(main())
