"""``make bench-compare REF=<git ref>``: this tree's library and REF's side by side, in one run.

    python -m bench.compare REF [--quick] [--repeats K] [--out FILE.json] [--md FILE.md]

REF's library is installed into a throwaway virtualenv of its own (a git worktree of REF, ``pip
install`` at constraints.txt's versions); this tree's is the one this interpreter runs. The harness
(bench/, this tree's) is the same for both: only the worker processes differ, REF's running under
REF's interpreter. Both sides run against one ZooKeeper server, alternately, so that the machine's
load drift hits both:

* **faults**: for each size (N = 10, R = 1,000 and N = 50, R = 10,000; ``--quick``: N = 3, R = 30 and
  N = 6, R = 120) both groups are set up, then every repeat runs join, leave and kill -9 on one side
  and the same fault on the other at once after, the side that goes first alternating by repeat;
* **the claim book**: claim, re-take and release of R claims by one session (bench/claimbook.py,
  R = 5,000; ``--quick``: 500), a process per run, the sides alternating the same way.

Every measurement carries the one-minute load average at its start. The table gives each side's
p50, the difference, and the load during the cell, with a warning when it reached 2 or more (the
issue's targets ask for load < 2). Results: a JSON file and a markdown table (default
``bench/before-after/compare-<REF>-<HEAD>.{json,md}``; ``--quick``: a temporary directory).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient

from bench import floor
from bench.scenarios import Cell, CellRun, percentile
from bench.zkserver import start_standalone

REPO = Path(__file__).resolve().parents[1]
FAULTS = ("join", "leave", "kill")
SIZES = ((10, 1_000), (50, 10_000))
QUICK_SIZES = ((3, 30), (6, 120))
CLAIMS, QUICK_CLAIMS = 5_000, 500
REPEATS, QUICK_REPEATS = 5, 2
LOAD_WARNING = 2.0
QUIET_BOUND_S = 240.0


def log(message: str) -> None:
    print(message, flush=True)


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, check=True, capture_output=True, text=True).stdout.strip()


# -------------------------------------------------------------------------------- REF's library


@dataclass
class Side:
    """One library under test: its label (``ref`` or ``head``), commit and interpreter."""

    label: str
    commit: str
    python: str
    library: str = ""  # where the workers import rebalanser from (checked, not assumed)


def head_side() -> Side:
    commit = git("rev-parse", "--short=9", "HEAD")
    dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    return Side("head", commit + ("+changes" if dirty else ""), sys.executable)


def install_ref(ref: str, work: Path) -> Side:
    """A git worktree of ``ref`` and a virtualenv with its library (its dependencies at this tree's
    constraints.txt versions)."""
    commit = git("rev-parse", "--short=9", f"{ref}^{{commit}}")
    source, venv = work / "ref-src", work / "ref-venv"
    git("worktree", "add", "--detach", str(source), commit)
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, "-c", str(REPO / "constraints.txt"), str(source)], check=True)
    log(f"REF {ref} = {commit}: installed into {venv} in {time.monotonic() - started:.0f} s")
    return Side("ref", commit, str(venv / "bin" / "python"))


def remove_ref(work: Path) -> None:
    source = work / "ref-src"
    if source.exists():
        subprocess.run(["git", "worktree", "remove", "--force", str(source)], cwd=REPO, check=False)


def check_library(side: Side) -> None:
    """Which rebalanser the side's workers import, run exactly as the workers are (cwd = this tree)."""
    side.library = subprocess.run(
        [side.python, "-c", "import rebalanser; print(rebalanser.__file__)"], cwd=REPO, check=True,
        capture_output=True, text=True).stdout.strip()
    log(f"{side.label} ({side.commit}): rebalanser from {side.library}")


# ---------------------------------------------------------------------------------- measurements


def load1() -> float:
    return round(os.getloadavg()[0], 2)


def quiet_load(below: float, bound_s: float = QUIET_BOUND_S) -> float:
    """The one-minute load average once it is under ``below`` (0: at once), waiting at most ``bound_s``:
    the bench's own set-up and faults raise it, and a figure counts only when taken at load < 2. A
    measurement that had to start at a higher load says so through the load it carries."""
    deadline = time.monotonic() + bound_s
    load = load1()
    if below > 0 and load >= below:
        log(f"    (waiting for the load average {load} to fall under {below})")
        while load >= below and time.monotonic() < deadline:
            time.sleep(2.0)  # the load average is sampled by the kernel every 5 s: nothing to await
            load = load1()
    return load


def fault_cells(sides: list[Side], sizes: tuple[tuple[int, int], ...], repeats: int, cluster: Any,
                admin: KazooClient, workdir: Path, quiet: float = 0.0) -> list[dict[str, Any]]:
    """For each size, both sides' groups up at once, then their faults alternately."""
    rows = []
    for members, resources in sizes:
        cell = Cell("rebalanser", "resource-barrier", members, resources, repeats=repeats, faults=FAULTS)
        log(f"{cell.name}: setting up both groups")
        runs: dict[str, CellRun] = {}
        samples: dict[str, list[dict[str, Any]]] = {s.label: [] for s in sides}
        try:
            for side in sides:
                run = CellRun(cell, cluster, admin, workdir / f"{side.label}-{members}", log)
                run.fleet.config.python = side.python
                runs[side.label] = run
                if not run.setup():
                    raise RuntimeError(f"{side.label}: {run.result.get('error')}")
            for repeat in range(repeats):
                order = sides if repeat % 2 == 0 else sides[::-1]
                for fault in FAULTS:
                    last = repeat == repeats - 1 and fault == FAULTS[-1]
                    for side in order:
                        load = quiet_load(quiet)
                        sample = runs[side.label].fault(fault, repeat, last=last)
                        samples[side.label].append({"fault": fault, "repeat": repeat, "ok": sample.ok,
                                                    "latency_ms": sample.latency_ms, "load1": load,
                                                    "moved": sample.moved, "min_moved": sample.min_moved,
                                                    "note": sample.note})
                        log(f"    {side.label:4s} {fault:5s} #{repeat}: "
                            + (f"{sample.latency_ms:.0f} ms" if sample.ok else f"FAILED {sample.note}")
                            + f"  (load {load})")
        finally:
            for run in runs.values():
                run.fleet.stop_all()
        for fault in FAULTS:
            rows.append(row(f"{cell.name} {fault}", {s.label: [x for x in samples[s.label] if x["fault"] == fault]
                                                     for s in sides}, "latency_ms"))
    return rows


def claimbook_cells(sides: list[Side], claims: int, repeats: int, hosts: str,
                    quiet: float = 0.0) -> list[dict[str, Any]]:
    """The claim book, a process per run (each side's interpreter), the sides alternating."""
    samples: dict[str, list[dict[str, Any]]] = {s.label: [] for s in sides}
    log(f"claim book R={claims:,}")
    for repeat in range(repeats):
        for side in sides if repeat % 2 == 0 else sides[::-1]:
            load = quiet_load(quiet)
            out = subprocess.run([side.python, "-m", "bench.claimbook", "--hosts", hosts, "--claims", str(claims),
                                  "--runs", "1"], cwd=REPO, check=True, capture_output=True, text=True).stdout
            run = json.loads(out.splitlines()[0])
            samples[side.label].append({"repeat": repeat, "ok": True, "load1": load,
                                        **{k.removesuffix("_s") + "_ms": round(1000 * v, 2) for k, v in run.items()}})
            log(f"    {side.label:4s} #{repeat}: claim {1000 * run['claim_s']:.0f} ms, re-take "
                f"{1000 * run['retake_s']:.1f} ms, release {1000 * run['release_s']:.0f} ms  (load {load})")
    rows = [row(f"claim book R={claims} {step}", samples, f"{step}_ms") for step in ("claim", "retake", "release")]
    zk_floor = floor.measure(hosts, claims, 1, repeats=3)  # one plain client's creates and deletes, same server
    log(f"    floor: {claims:,} ephemeral znodes created in {zk_floor.create_best_ms:.0f} ms, deleted in "
        f"{zk_floor.delete_best_ms:.0f} ms by one client (best of 3)")
    for r, best in ((rows[0], zk_floor.create_best_ms), (rows[2], zk_floor.delete_best_ms)):
        r["floor_ms"] = best
        for side in sides:
            r[f"{side.label}_x_floor"] = floor.ratio(r.get(f"{side.label}_p50_ms"), best)
    return rows


def row(name: str, samples: dict[str, list[dict[str, Any]]], key: str) -> dict[str, Any]:
    """One line of the table: each side's p50 of ``key`` over its good samples, and the loads seen."""
    out: dict[str, Any] = {"cell": name, "samples": samples}
    loads = [s["load1"] for side in samples.values() for s in side]
    for label, mine in samples.items():
        values = [float(s[key]) for s in mine if s.get("ok") and s.get(key) is not None]
        out[f"{label}_p50_ms"] = percentile(values, 50)
        out[f"{label}_failed"] = sum(1 for s in mine if not s.get("ok"))
    out["load_min"], out["load_max"] = min(loads, default=0.0), max(loads, default=0.0)
    out["load_warning"] = out["load_max"] >= LOAD_WARNING
    ref, head = out.get("ref_p50_ms"), out.get("head_p50_ms")
    out["change_pct"] = round(100 * (head - ref) / ref, 1) if ref and head is not None else None
    return out


# ------------------------------------------------------------------------------------------ report


def markdown(result: dict[str, Any]) -> str:
    ref, head = result["ref"], result["head"]
    lines = [
        f"# {ref['commit']} (REF) against {head['commit']} (HEAD), side by side",
        "",
        f"`python -m bench.compare {result['ref_arg']}`{' --quick' if result['quick'] else ''}, "
        f"{result['started']}, {result['elapsed_s']:.0f} s. Each side's workers import rebalanser from: "
        f"REF `{ref['library']}`, HEAD `{head['library']}`. One ZooKeeper server; the sides alternate "
        f"fault by fault ({result['repeats']} repeats, the side going first alternating), the claim book "
        "run by run. Faults: the time until every resource is worked on by its new owner (bench/scenarios.py); "
        "the claim book: one session, each step's wall clock. p50 of the repeats. **floor**: one plain client "
        "creating (claim) or deleting (release) as many ephemeral znodes on the same server, pipelined "
        "(bench/floor.py), and each side's p50 divided by it. **load**: the one-minute load average at the start "
        "of each measurement of the cell (2 cores).",
        "",
        "| cell | REF p50 | HEAD p50 | change | floor (REF x, HEAD x) | load (1 min) | |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        warn = f"**load >= {LOAD_WARNING:g}: noisy**" if r["load_warning"] else ""
        failed = "".join(f" {r[f'{s}_failed']} {s} failed" for s in ("ref", "head") if r.get(f"{s}_failed"))
        change = "-" if r["change_pct"] is None else f"{r['change_pct']:+.1f} %"
        zk_floor = (f"{_ms(r['floor_ms'])} ({r['ref_x_floor']} x, {r['head_x_floor']} x)" if r.get("floor_ms")
                    else "-")
        lines.append(f"| {r['cell']} | {_ms(r.get('ref_p50_ms'))} | {_ms(r.get('head_p50_ms'))} | {change} "
                     f"| {zk_floor} | {r['load_min']:.1f}-{r['load_max']:.1f} | {warn}{failed} |")
    warned = [r["cell"] for r in result["rows"] if r["load_warning"]]
    if warned:
        lines += ["", f"Warning: the load average reached {LOAD_WARNING:g} or more during {len(warned)} of "
                  f"{len(result['rows'])} cells; compare those on a quieter machine before concluding."]
    return "\n".join(lines) + "\n"


def _ms(value: float | None) -> str:
    return "-" if value is None else (f"{value:.1f} ms" if value < 10 else f"{value:.0f} ms")


# -------------------------------------------------------------------------------------------- main


def run(ref: str, quick: bool, repeats: int, workdir: Path, only: Callable[[str], bool],
        quiet: float = 0.0) -> dict[str, Any]:
    started = time.monotonic()
    head = head_side()
    refside = install_ref(ref, workdir)
    sides = [refside, head]
    for side in sides:
        check_library(side)
    result: dict[str, Any] = {"ref_arg": ref, "quick": quick, "repeats": repeats,
                              "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "quiet_below": quiet,
                              "ref": vars(refside), "head": vars(head), "rows": []}
    cluster = start_standalone(workdir / "zk")
    admin = KazooClient(hosts=cluster.hosts, timeout=30)
    try:
        admin.start(timeout=30)
        sizes = tuple(s for s in (QUICK_SIZES if quick else SIZES) if only(f"N={s[0]} "))
        result["rows"] += fault_cells(sides, sizes, repeats, cluster, admin, workdir / "logs", quiet)
        if only("claim book"):
            result["rows"] += claimbook_cells(sides, QUICK_CLAIMS if quick else CLAIMS, repeats, cluster.hosts,
                                              quiet)
    finally:
        admin.stop()
        admin.close()
        cluster.stop()
    result["elapsed_s"] = round(time.monotonic() - started, 1)
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.compare", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("ref", help="a git ref of this repository: the library to compare this tree's with")
    p.add_argument("--quick", action="store_true", help="small cells, 2 repeats (a few minutes)")
    p.add_argument("--repeats", type=int, default=0, help=f"default {REPEATS} ({QUICK_REPEATS} with --quick)")
    p.add_argument("--only", default="", help="cells whose name contains one of these comma-separated texts "
                   "('N=10 ', 'claim book')")
    p.add_argument("--out", type=Path)
    p.add_argument("--md", type=Path)
    p.add_argument("--keep", action="store_true", help="keep the work directory (REF's venv, logs)")
    p.add_argument("--quiet-below", type=float, default=0.0, metavar="LOAD",
                   help=f"before each measurement, wait (up to {QUIET_BOUND_S:.0f} s) until the one-minute load "
                   "average is under LOAD (e.g. 2; default 0: measure at once)")
    args = p.parse_args(argv)
    repeats = args.repeats or (QUICK_REPEATS if args.quick else REPEATS)
    workdir = Path(tempfile.mkdtemp(prefix="rebalanser-compare-"))
    try:
        parts = [part for part in args.only.split(",") if part] or [""]
        result = run(args.ref, args.quick, repeats, workdir, lambda name: any(part in name for part in parts),
                     args.quiet_below)
    finally:
        remove_ref(workdir)
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    stem = f"compare-{result['ref']['commit']}-{result['head']['commit']}"
    base = Path(tempfile.mkdtemp(prefix="rebalanser-compare-out-")) if args.quick else REPO / "bench" / "before-after"
    out, md = args.out or base / f"{stem}.json", args.md or base / f"{stem}.md"
    for path, text in ((out, json.dumps(result, indent=1) + "\n"), (md, markdown(result))):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    print()
    print(markdown(result))
    print(f"wrote {out} and {md}")
    return 0 if not any(r.get("ref_failed") or r.get("head_failed") for r in result["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main())
