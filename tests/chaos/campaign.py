"""The long randomised chaos campaign: ``python -m tests.chaos.campaign --minutes 30`` (``make chaos``).

For every target (``resource-barrier``, ``global-barrier``, and the kazoo ``SetPartitioner`` baseline) it
runs a fleet of real worker processes on a real standalone ZooKeeper server, then on a real 3-node
ensemble (half of the time each), and injects randomised fault steps until the time is up. Every step
is checked (see :mod:`tests.chaos.faults`); the report goes to ``docs/chaos-report.{json,md}``.

The seed is printed; ``--seed S`` replays the same sequence of choices (timings still vary: processes
and ZooKeeper are real). Per-step records and every worker's logs stay in ``--workdir``.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tests.chaos.faults import STEP_KINDS, applicable, base_kind, respawn_crashed, run_step
from tests.chaos.fleet import TARGETS, Fleet, Settings
from tests.chaos.report import summarise, write_report
from tests.chaos.step import StepResult
from tests.support.partition import PartitionableEnsemble, make_partitionable_ensemble
from tests.support.zk import TICK_MS, make_cluster

REPO = Path(__file__).resolve().parents[2]

WEIGHTS = {
    "kill-follower": 8, "kill-coordinator": 6, "pause-follower": 7, "pause-coordinator": 6, "pause-short": 4,
    "partition-follower": 7, "partition-coordinator": 6, "partition-short": 4, "partition-oneway": 5,
    "conn-cut": 4,
    "expiry-storm": 7, "zk-restart": 3, "zk-leader-kill": 5, "zk-follower-kill": 5, "resource-churn": 5,
    "compound": 10, "rolling-restart": 3, "connloss-mid-write": 8, "stop-slow": 3, "stop-fail": 3, "stop-hang": 3,
    # The new classes (an administrator's hands, reconnects, duplicate ids, server-to-server partitions) make
    # one fault per step, the others 2.3 on average (measured): these weights give the new ones 25-30 % of
    # all faults.
    "reconnect-tamper": 14, "tamper-group": 9, "tamper-resources": 9, "tamper-epoch": 9, "tamper-garbage": 17,
    "tamper-stale": 14, "fake-member": 8, "fake-claim": 8, "duplicate-id": 5, "zk-follower-isolate": 8,
    # Someone other than a claim's session deletes it under a live member (an administrator, the failover, or
    # anyone while the member is away on a reconnection): three variants, each as often as the two were.
    "outside-deleter": 12,
}
assert set(WEIGHTS) == set(STEP_KINDS)

NOTES = {
    "kazoo": [
        "kazoo's SetPartitioner through `bench.adapters.kazoo_worker` (same CLI and JSON events).",
        "No fencing token (always 0): the token check is skipped.",
        "No coordinator: *-coordinator faults hit a random member.",
        "No stop-callback simulation in the adapter: stop-slow/fail/hang steps are skipped.",
        "The administrator's faults (tamper-*, fake-*, reconnect-tamper, duplicate-id) target Rebalanser's "
        "layout and CLI: skipped.",
        "Leak check adapted to its layout: party members = live workers, lock nodes held by party sessions.",
    ],
}


class Interrupted(Exception):
    """SIGTERM (or Ctrl-C): stop after healing, write what was completed."""


def _stop(*_: Any) -> None:
    raise Interrupted


def run_phase(
    target: str, phase: str, size: int, deadline: float, seed: int, settings: Settings, workdir: Path,
    kinds: list[str] | None, max_steps: int | None, out: Any, steps: list[dict[str, Any]], notes: list[str],
) -> None:
    """Steps until the deadline. If a fleet cannot be brought back even by a reset (that is recorded as
    the step's violation), the rest of the phase goes on with a fresh ZooKeeper and a fresh fleet."""
    index, attempt = 0, 0
    chooser = random.Random(f"{seed}:{target}:{phase}")
    while time.monotonic() < deadline and (max_steps is None or index < max_steps):
        try:
            index = _run_fleet(target, phase, size, deadline, seed, settings, workdir / f"run{attempt}", kinds,
                               max_steps, out, steps, chooser, index)
        except RuntimeError as exc:
            notes.append(f"{phase}: {exc}; went on with a fresh ZooKeeper and fleet")
            print(f"    {exc}; going on with a fresh ZooKeeper and fleet", flush=True)
            attempt += 1
            if attempt > 5:
                raise


def _run_fleet(
    target: str, phase: str, size: int, deadline: float, seed: int, settings: Settings, workdir: Path,
    kinds: list[str] | None, max_steps: int | None, out: Any, steps: list[dict[str, Any]],
    chooser: random.Random, index: int,
) -> int:
    partition: PartitionableEnsemble | None = None
    if size == 1:
        cluster = make_cluster(workdir / "zk", size)
        cluster.start()
    else:  # server-to-server links through relays, so that a follower can be cut off from the quorum
        partition = make_partitionable_ensemble(workdir / "zk", size, tick_ms=TICK_MS, sync_limit=8, init_limit=40)
        partition.start()
        cluster = partition.cluster
    fleet = Fleet(cluster, settings, workdir / "logs", random.Random(f"{seed}:{target}:{phase}:fleet:{index}"),
                  partition)
    try:
        first = fleet.start()
        if not first.ok:
            raise RuntimeError(f"the fleet never settled at start: {first.problems}")
        while time.monotonic() < deadline and (max_steps is None or index < max_steps):
            candidates = [k for k in (kinds or STEP_KINDS) if applicable(k, fleet)]
            if not candidates:
                time.sleep(1)  # e.g. only server faults asked for, and the last one is too recent
                continue
            kind = chooser.choices(candidates, weights=[WEIGHTS[base_kind(k)[0]] for k in candidates])[0]
            replaced = fleet.replace_hung()
            if replaced:
                print(f"    replaced workers hung on standby: {', '.join(replaced)}", flush=True)
            step_seed = f"{seed}:{target}:{phase}:{index}"
            result = _guarded_step(fleet, kind, index, phase, step_seed)
            record = result.to_dict()
            steps.append(record)
            out.write(json.dumps(record) + "\n")
            out.flush()
            _print_step(target, result)
            index += 1
            if not result.recovered:
                print(f"    resetting the fleet after an unrecovered step ({fleet.log_dir})", flush=True)
                again = fleet.reset()
                if not again.ok:
                    raise RuntimeError(f"the fleet did not recover even after a reset: {again.problems}")
    finally:
        fleet.close()
        for server in cluster.servers:
            server.resume()
        if partition is not None:
            partition.stop()
        else:
            cluster.stop()
    return index


def _guarded_step(fleet: Fleet, kind: str, index: int, phase: str, seed: str) -> StepResult:
    pre = StepResult(index, phase, kind, seed)
    respawn_crashed(fleet, pre)  # a worker that died between steps
    fleet.cluster.wait_serving(timeout=90)
    result = run_step(fleet, kind, index, phase, seed)
    result.violations = pre.violations + result.violations
    return result


def _print_step(target: str, r: StepResult) -> None:
    faults = ", ".join(f"{f.kind}:{f.target}" for f in r.faults) or "no fault"
    ttr = f"ttr {r.ttr_fault:.1f}s (+{r.ttr_heal:.1f}s after heal)" if r.ttr_heal is not None else "ttr -"
    status = "ok" if not r.violations else f"{len(r.violations)} VIOLATIONS"
    print(f"[{target} {r.phase} #{r.index}] {r.kind}: {faults} | {ttr} | {r.duration:.1f}s | {status}", flush=True)
    for category, message in r.violations[:5]:
        print(f"    {category}: {message[:400]}", flush=True)


def run_target(
    target: str, minutes: float, seed: int, base: Settings, workdir: Path, topologies: list[str],
    kinds: list[str] | None, max_steps: int | None,
) -> dict[str, Any]:
    settings = Settings(**{**asdict(base), "target": target})
    started = time.monotonic()
    steps: list[dict[str, Any]] = []
    target_dir = workdir / target
    target_dir.mkdir(parents=True, exist_ok=True)
    print(f"== {target}: {minutes:g} minutes, seed {seed}, bound {settings.bound:.1f}s, logs in {target_dir}",
          flush=True)
    notes = list(NOTES.get(target, []))
    interrupted = False
    with open(target_dir / "steps.jsonl", "a") as out:
        for i, phase in enumerate(topologies):
            share = (minutes * 60) * (i + 1) / len(topologies)
            deadline = started + share
            size = 1 if phase == "single" else 3
            try:
                run_phase(target, phase, size, deadline, seed, settings, target_dir / phase, kinds, max_steps,
                          out, steps, notes)
            except (KeyboardInterrupt, Interrupted):
                interrupted = True
                notes.append(f"interrupted during the {phase} phase")
                break
            except RuntimeError as exc:
                notes.append(f"{phase} phase aborted: {exc}")
                print(f"    {phase} phase aborted: {exc}", flush=True)
    meta = {
        "seed": seed, "minutes": minutes, "duration_s": round(time.monotonic() - started, 1),
        "settings": {**asdict(settings), "bound_s": settings.bound, "window_s": settings.window},
        "notes": notes,
    }
    if interrupted:
        raise Interrupted(summarise(target, steps, meta))
    return summarise(target, steps, meta)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.chaos.campaign", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, default=30.0, help="minutes per target (default 30)")
    p.add_argument("--targets", default=",".join(TARGETS),
                   help="comma-separated: resource-barrier, global-barrier, kazoo (default: all three)")
    p.add_argument("--algorithm", choices=["resource-barrier", "global-barrier"],
                   help="only this algorithm (plus the baseline unless --no-baseline)")
    p.add_argument("--no-baseline", action="store_true", help="skip the kazoo baseline")
    p.add_argument("--baseline-minutes", type=float, help="minutes for the kazoo baseline (default: --minutes)")
    p.add_argument("--seed", type=int, help="replay a campaign (default: random, printed)")
    p.add_argument("--topology", choices=["both", "single", "ensemble"], default="both")
    p.add_argument("--kinds", help=f"comma-separated step kinds (default all): {', '.join(STEP_KINDS)}")
    p.add_argument("--steps", type=int, help="at most this many steps per topology")
    p.add_argument("--workers", type=int, default=5)
    p.add_argument("--resources", type=int, default=20)
    p.add_argument("--session-timeout", type=float, default=2.0)
    p.add_argument("--interval", type=float, default=0.5)
    p.add_argument("--api", choices=["threads", "asyncio"], default="threads",
                   help="the client the workers run on: rebalanser.Client or rebalanser.aio.Client")
    p.add_argument("--workdir", type=Path, help="ZooKeeper data, worker logs, per-step records")
    p.add_argument("--report-dir", type=Path, default=REPO / "docs")
    p.add_argument("--no-report", action="store_true")
    p.add_argument("--merge", action="store_true", help="keep other targets' results already in the report")
    args = p.parse_args(argv)

    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    if args.algorithm:
        targets = [args.algorithm] + ([] if args.no_baseline else ["kazoo"])
    elif args.no_baseline:
        targets = [t for t in targets if t != "kazoo"]
    unknown = [t for t in targets if t not in TARGETS]
    kinds = [k.strip() for k in args.kinds.split(",")] if args.kinds else None
    if unknown or (kinds and any(base_kind(k)[0] not in STEP_KINDS for k in kinds)):
        p.error(f"unknown target or step kind in {targets} / {kinds}")
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 10**9)
    workdir = args.workdir or Path(tempfile.gettempdir()) / f"rebalanser-chaos-{seed}"
    topologies = ["single", "ensemble"] if args.topology == "both" else [args.topology]
    base = Settings(workers=args.workers, resources=args.resources, session_timeout=args.session_timeout,
                    interval=args.interval, api=args.api)
    workdir.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(level=logging.WARNING, filename=str(workdir / "harness.log"))
    logging.getLogger("kazoo").setLevel(logging.CRITICAL)  # the harness's own admin client reconnects noisily
    print(f"chaos campaign seed {seed} (replay with --seed {seed}); targets {targets}; workdir {workdir}",
          flush=True)
    if shutil.which("java") is None:
        print("java is required (real ZooKeeper servers)", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _stop)
    results: dict[str, dict[str, Any]] = {}
    try:
        for target in targets:
            minutes = args.baseline_minutes if target == "kazoo" and args.baseline_minutes else args.minutes
            results[target] = run_target(target, minutes, seed, base, workdir, topologies, kinds, args.steps)
    except (KeyboardInterrupt, Interrupted) as exc:
        print("interrupted: writing what was completed", flush=True)
        if exc.args and isinstance(exc.args[0], dict):
            results[exc.args[0]["target"]] = exc.args[0]
    bad = 0
    for target, summary in results.items():
        v = summary["violations_by_category"]
        print(f"{target}: {summary['steps']} steps, {summary['faults_total']} faults, "
              f"{summary['violations_total']} violations {v}; TTR after heal p50/p99 "
              f"{summary['ttr_overall']['after_heal_p50']}/{summary['ttr_overall']['after_heal_p99']} s", flush=True)
        if target != "kazoo":
            bad += summary["violations_total"]
    if results and not args.no_report:
        json_path, md_path = write_report(args.report_dir, results, merge=args.merge)
        print(f"report: {md_path} {json_path}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
