"""The chaos campaign's real-cluster part: kubelet-confirmed failover faults on worker pods.

    python -m tests.chaos.realcluster [--minutes 12] [--seed N] [--out docs]

Two ResourceGroups in one namespace of the kind cluster (``make cluster-up``), the same worker pods but
for ``spec.failover``: ``confirmed`` (``KubeletConfirmed``) and ``expiry`` (``SessionExpiry``), T = 10 s
(:class:`tests.support.failoverscene.FailoverScene`). Every fault kind once, in a seeded order, then a
seeded random fault per step until the time is up, from the fault functions of :mod:`bench.failover`:

- ``sigkill``: SIGKILL of one worker of each group in the same instant (the kubelet restarts both);
- ``oom``: the same, the workers exhausting their memory limit (the kernel kills them);
- ``sigstop-3T``: a confirmed worker paused for 3 T (alive as far as the kubelet knows);
- ``zookeeper-cut-3T``: a confirmed worker cut off from ZooKeeper for 3 T (iptables in its pod);
- ``operator-killed``: a confirmed worker SIGKILLed, and the operator 0.3 s later, mid-failover.

Violations, from the worker pods' JSON logs and the operator's log: overlaps and fencing-token
regressions over the whole run (both groups); liveness (a victim's resources not worked on again
within the bound); a confirmed failover of a process that was alive (SIGSTOP, ZooKeeper cut). The
result goes to ``docs/chaos-cluster.json``; ``tests.chaos.report`` adds it to the chaos report.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.failover import operator_killed, side_by_side, sigstop, summary, zookeeper_cut
from tests.support.failoverscene import FailoverScene
from tests.support.kubectl import KubeError
from tests.support.podcluster import REPO, NoCluster, pod_cluster

T = 10.0
OUT = REPO / ".pod-failover-chaos"
Fault = Callable[[FailoverScene, int, int], dict[str, Any]]

FAULTS: dict[str, Fault] = {
    "sigkill": lambda scene, workers, step: side_by_side(scene, "KILL", 1, workers, first=step),
    "oom": lambda scene, workers, step: side_by_side(scene, "USR1", 1, workers, first=step),
    "sigstop-3T": lambda scene, workers, step: sigstop(scene, workers),
    "zookeeper-cut-3T": lambda scene, workers, step: zookeeper_cut(scene, workers),
    "operator-killed": lambda scene, workers, step: operator_killed(scene, workers),
}
ALIVE = ("sigstop-3T", "zookeeper-cut-3T")  # the victim's process lives: the operator must not act


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def run(minutes: float, seed: int, workers: int = 3, resources: int = 12,
        kinds: tuple[str, ...] = tuple(FAULTS)) -> dict[str, Any]:
    rng = random.Random(seed)
    kube = pod_cluster()
    shutil.rmtree(OUT, ignore_errors=True)
    scene = FailoverScene(kube, OUT).setup()
    started = time.monotonic()
    steps: list[dict[str, Any]] = []
    try:
        scene.deploy("confirmed", "KubeletConfirmed", replicas=workers, resources=resources, session_timeout=T)
        scene.deploy("expiry", "SessionExpiry", replicas=workers, resources=resources, session_timeout=T)
        deadline = started + minutes * 60
        first = rng.sample(kinds, len(kinds))  # every kind once, in a seeded order, then drawn at random
        while time.monotonic() < deadline or len(steps) < len(first):
            kind = first[len(steps)] if len(steps) < len(first) else rng.choice(kinds)
            steps.append(_step(scene, kind, workers, len(steps)))
            if "harness" in steps[-1]:
                break
        violations = {g: _violations(scene, g) for g in ("confirmed", "expiry")}
    finally:
        scene.close()
    return _result(seed, minutes, workers, resources, steps, violations, time.monotonic() - started)


def _step(scene: FailoverScene, kind: str, workers: int, index: int) -> dict[str, Any]:
    log(f"step {index + 1}: {kind}")
    started = time.time()
    try:
        outcome = FAULTS[kind](scene, workers, index)
    except AssertionError as exc:  # a bounded wait ran out: the victim's resources stayed idle
        log(f"    liveness: {exc}")
        return {"kind": kind, "started": started, "liveness": str(exc)[:500]}
    except KubeError as exc:  # the harness's own kubectl failed: not the system's fault, and the run ends
        log(f"    harness: {exc}")
        return {"kind": kind, "started": started, "harness": str(exc)[-500:]}
    return {"kind": kind, "started": started, "outcome": outcome}


def _violations(scene: FailoverScene, group: str) -> dict[str, Any]:
    overlaps, regressions = scene.violations(group)
    return {"overlaps": len(overlaps), "token_regressions": len(regressions), "examples": (overlaps + regressions)[:5]}


def _reworked(step: dict[str, Any]) -> dict[str, float]:
    """Seconds until the victim's resources were worked on again, per group the step measured."""
    outcome = step.get("outcome") or {}
    if step["kind"] in ("sigkill", "oom"):
        return {g: outcome[g]["p50_s"] for g in ("confirmed", "expiry") if outcome.get(g, {}).get("n")}
    return {"confirmed": outcome["reworked_s"]} if "reworked_s" in outcome else {}


def _result(seed: int, minutes: float, workers: int, resources: int, steps: list[dict[str, Any]],
            violations: dict[str, dict[str, Any]], elapsed: float) -> dict[str, Any]:
    by_kind: dict[str, dict[str, Any]] = {}
    for kind in FAULTS:
        mine = [s for s in steps if s["kind"] == kind and "harness" not in s]
        if not mine:
            continue
        entry: dict[str, Any] = {"steps": len(mine), "liveness": sum(1 for s in mine if "liveness" in s)}
        for group in ("confirmed", "expiry"):
            values = [v for s in mine if (v := _reworked(s).get(group)) is not None]
            if values:
                entry[f"reworked_{group}"] = summary(values)
        if kind in ALIVE:
            entry["operator_acted"] = sum(1 for s in mine if (s.get("outcome") or {}).get("operator_acted"))
        by_kind[kind] = entry
    return {
        "seed": seed, "minutes": minutes, "elapsed_s": round(elapsed, 1), "workers": workers,
        "resources": resources, "T_s": T, "faults": sum(1 for s in steps if "harness" not in s),
        "harness_errors": [s["harness"] for s in steps if "harness" in s], "by_kind": by_kind, "violations": violations,
        "liveness": sum(e["liveness"] for e in by_kind.values()),
        "confirmed_failover_of_a_live_process": sum(e.get("operator_acted", 0) for e in by_kind.values()),
        "steps": steps,
    }


def total_violations(result: dict[str, Any]) -> int:
    safety = sum(int(v["overlaps"]) + int(v["token_regressions"]) for v in result["violations"].values())
    return safety + int(result["liveness"]) + int(result["confirmed_failover_of_a_live_process"])


def markdown_lines(result: dict[str, Any] | None) -> list[str]:
    """The chaos report's section (``tests.chaos.report`` appends it when docs/chaos-cluster.json exists)."""
    if not result:
        return []
    lines = ["## Real cluster: kubelet-confirmed failover faults", ""]
    if result.get("skipped"):
        return [*lines, f"Not run: {result['skipped']}", ""]
    v = result["violations"]
    lines += [
        f"`python -m tests.chaos.realcluster` (part of `make chaos`): seed {result['seed']}, "
        f"{result['elapsed_s'] / 60:.0f} minutes, {result['faults']} faults on worker pods of the kind cluster; "
        f"{result['workers']} workers and {result['resources']} resources per group, T = {result['T_s']:g} s; "
        "a `KubeletConfirmed` and a `SessionExpiry` group side by side. Evidence: the worker pods' JSON logs "
        "and the operator's log.",
        "",
        f"- **Violations: {total_violations(result)}.** Overlaps: {v['confirmed']['overlaps']} (confirmed), "
        f"{v['expiry']['overlaps']} (expiry); fencing-token regressions: {v['confirmed']['token_regressions']}, "
        f"{v['expiry']['token_regressions']}; liveness: {result['liveness']}; confirmed failovers of a live "
        f"process: {result['confirmed_failover_of_a_live_process']}.",
        "",
        *([f"- The run ended early: the harness's own command failed ({result['harness_errors'][0][:200]})."]
          if result.get("harness_errors") else []),
        "",
        "| fault | steps | worked again, KubeletConfirmed p50 / max (s) | worked again, SessionExpiry p50 / max (s) |",
        "|---|---|---|---|",
    ]
    for kind, entry in result["by_kind"].items():
        cells = []
        for group in ("confirmed", "expiry"):
            s = entry.get(f"reworked_{group}")
            cells.append(f"{s['p50_s']} / {s['max_s']}" if s else "-")
        lines.append(f"| {kind} | {entry['steps']} | {cells[0]} | {cells[1]} |")
    return [*lines, ""]


def _refresh_report(out: Path) -> None:
    """Rewrites chaos-report.md with this result in it (the campaign's own targets unchanged)."""
    from tests.chaos.report import write_report

    report = out / "chaos-report.json"
    if report.exists():
        write_report(out, json.loads(report.read_text()).get("targets", {}), merge=False)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.chaos.realcluster", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, default=12.0)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--workers", type=int, default=3)
    p.add_argument("--resources", type=int, default=12)
    p.add_argument("--out", type=Path, default=REPO / "docs")
    args = p.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 1 << 31)
    try:
        result = run(args.minutes, seed, args.workers, args.resources)
    except NoCluster as exc:
        result = {"skipped": f"no cluster: {exc}", "seed": seed}
        log(result["skipped"])
        return 0
    path = args.out / "chaos-cluster.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    log("\n".join(markdown_lines(result)))
    _refresh_report(args.out)
    log(f"wrote {path} and the chaos report's section")
    return 1 if total_violations(result) else 0


if __name__ == "__main__":
    sys.exit(main())
