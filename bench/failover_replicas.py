"""Operator replicas on the real cluster (issue 32): a killed replica's handover, a worker's failover during
it, and a rolling update's owner gaps (``make bench-failover``; a part of ``bench/failover.py``'s section).

    python -m bench.failover --replicas-only [--replica-kills 3] [--replica-rollouts 1] [--merge]

The chart as users install it for high availability (``examples/values-ha.yaml``: 3 replicas, the operator
group on the cluster's ZooKeeper ensemble; the operator's identity; ``failover.enabled``) in a namespace of
its own (:class:`tests.support.replicascene.ReplicaScene`), 30 ResourceGroups without workers and one,
``fo``, KubeletConfirmed with two worker pods (T = 10 s, a 0.1 s tick).

- **kill**: the replica serving ``fo`` is SIGKILLed from the host, and one of ``fo``'s workers right after
  it. From the replicas' logs: the kill -> each of its groups' ``replica-serve`` line on another replica
  (the kubelet's report of the ended container, the membership ended by another replica, one rebalance of
  the operator group). From the workers' logs: the victim's last tick of each of its resources -> the
  next tick of it by another instance (the new owner of ``fo`` catches up on the worker's death, which was
  reported while nobody served the group). Then the cluster recovers (the replica's container restarted
  and Ready, ``fo`` Stable) before the next kill; the victim worker rotates.
- **rollout**: ``kubectl rollout restart`` of the operator's Deployment; each group's handovers (a
  ``replica-stop`` line -> the next server's ``replica-serve`` line).
"""

from __future__ import annotations

import os
import shutil
import time
from typing import Any

from bench.failover import log, summary
from tests.support.podcluster import REPO, pod_cluster
from tests.support.replicascene import REPLICAS, ReplicaScene, T

NAMESPACE = "rb-bench-ha"
GROUPS = 30
WORKERS = 2
FO = "fo"
OUT = REPO / ".pod-replicas-bench"
#: issue 32's targets
HANDOVER_TARGET_S = 2.0
WORKER_TARGET_S = 3.0
GAP_TARGET_S = 2.0


def run(kills: int = 3, rollouts: int = 1, groups: int = GROUPS, namespace: str = NAMESPACE) -> dict[str, Any]:
    """``kills`` replica kills (each with a worker of its group) and ``rollouts`` rolling updates."""
    kube = pod_cluster()
    shutil.rmtree(OUT, ignore_errors=True)
    names = [f"g{i:02d}" for i in range(groups)]
    every = {f"{namespace}/{g}" for g in [*names, FO]}
    scene = ReplicaScene(kube, OUT, ns=namespace)
    result: dict[str, Any] = {"replicas": REPLICAS, "groups": len(every), "workers": WORKERS, "T_s": T,
                              "loadavg_start": [round(v, 2) for v in os.getloadavg()]}
    samples: list[dict[str, Any]] = []
    rolled: list[dict[str, Any]] = []
    started = time.monotonic()
    try:
        scene.setup(names, worker_group=FO)
        scene.deploy_workers(FO, WORKERS)
        result["setup_s"] = round(time.monotonic() - started, 1)
        for k in range(kills):
            samples.append(kill(scene, every, k))
            recover(scene, every)
        for _ in range(rollouts):
            rolled.append(rollout(scene, every))
        overlaps, regressions = scene.workers.violations(FO)
        result["violations"] = {"overlaps": len(overlaps), "token_regressions": len(regressions),
                                "examples": (overlaps + regressions)[:5]}
    finally:
        scene.close()
    result["samples"] = samples
    result["rollouts"] = rolled
    result["handover"] = summary([s for x in samples for s in x["taken_s"]])
    result["worker_during_handover"] = summary([x["worker_gap_s"] for x in samples])
    result["worker_from_kill"] = summary([x["worked_again_s"] for x in samples])
    result["rollout_gap"] = summary([g for x in rolled for g in x["gaps_s"]])
    result["loadavg_end"] = [round(v, 2) for v in os.getloadavg()]
    result["elapsed_s"] = round(time.monotonic() - started, 1)
    return result


def kill(scene: ReplicaScene, every: set[str], k: int) -> dict[str, Any]:
    outcome = scene.kill_server_and_worker(every, FO, WORKERS, rotate=k)
    taken = sorted(round(v, 3) for v in outcome.taken.values())
    gap = max(outcome.gaps.values())
    log(f"  replica {outcome.server} killed with {len(taken)} groups: served elsewhere {taken[0]:.2f} to "
        f"{taken[-1]:.2f} s; worker {outcome.victim} right after: worked again {outcome.worked_again_s:.2f} s, "
        f"last tick -> next {gap:.2f} s; load {outcome.load1}")
    return {"server": outcome.server, "groups": len(taken), "taken_s": taken, "victim": outcome.victim,
            "held": outcome.held, "worked_again_s": round(outcome.worked_again_s, 3), "worker_gap_s": round(gap, 3),
            "membership_ended": bool(outcome.ended), "worker_failed_over": bool(outcome.caught),
            "load1": outcome.load1}


def recover(scene: ReplicaScene, every: set[str]) -> None:
    """The killed replica's container restarted and Ready, the killed worker back in ``fo``, every group served."""
    scene.wait_ready(REPLICAS)
    scene.workers.stable(FO, WORKERS)
    scene.settled(every)


def rollout(scene: ReplicaScene, every: set[str]) -> dict[str, Any]:
    scene.wait_ready(REPLICAS)
    load1 = round(os.getloadavg()[0], 2)
    started = time.monotonic()
    moves, _ = scene.rollout(every)
    gaps = sorted(round(h.gap, 3) for h in moves)
    log(f"  rollout restart: {len(moves)} handovers of {len(every)} groups in {time.monotonic() - started:.0f} s, "
        f"owner gap max {gaps[-1] * 1000:.0f} ms; load {load1}")
    return {"seconds": round(time.monotonic() - started, 1), "handovers": len(moves),
            "groups_moved": len({h.group for h in moves}), "gaps_s": gaps, "load1": load1}


def _load(samples: list[dict[str, Any]]) -> str:
    loads = [x["load1"] for x in samples]
    return f"{min(loads):g} to {max(loads):g}" if loads else "-"


def targets(result: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The targets of ``bench.report`` these cells measure (none when they did not run)."""
    if not result or (not result.get("samples") and not result.get("rollouts")):
        return []
    out = []
    samples, rolled = result.get("samples") or [], result.get("rollouts") or []
    for key, target, what, picked in (
        ("handover", HANDOVER_TARGET_S, "a SIGKILLed operator replica's ResourceGroups served by another replica",
         samples),
        ("worker_during_handover", WORKER_TARGET_S, "a worker SIGKILLed right after its group's operator replica: "
         "its resources worked on again (last tick -> next tick), T = 10 s", samples),
        ("rollout_gap", GAP_TARGET_S, "`kubectl rollout restart` of the operator: a ResourceGroup without a "
         "server", rolled),
    ):
        s = result.get(key) or {}
        if s.get("max_s") is None:
            continue
        out.append({"target": f"Operator replicas: {what} ≤ {target:g} s", "met": s["max_s"] <= target,
                    "value": f"p50 {s['p50_s']} s, max {s['max_s']} s (n = {s['n']})",
                    "detail": f"{result['replicas']} replicas, {result['groups']} ResourceGroups; "
                              f"load {_load(picked)}"})
    return out


def markdown_lines(result: dict[str, Any] | None) -> list[str]:
    """The subsection of docs/benchmarks.md's failover section."""
    if not result:
        return []
    lines = ["", "### Operator replicas: handover, and a worker's failover during it", ""]
    if result.get("skipped") or result.get("error"):
        return [*lines, f"- not measured: {result.get('skipped') or result.get('error')}"]
    lines += [
        f"The chart with `examples/values-ha.yaml` ({result['replicas']} replicas, the operator group on the "
        f"cluster's ensemble, the operator's identity), {result['groups']} ResourceGroups, one of them "
        f"KubeletConfirmed with {result['workers']} worker pods (T = {result['T_s']:g} s). *kill*: the replica "
        "serving that group SIGKILLed from the host, one of its workers right after; the replica's groups "
        "until another replica's `replica-serve` line, the worker's resources from its last tick to the next "
        "tick by another instance. *rollout*: `kubectl rollout restart` of the operator, each group's handover "
        "from its `replica-stop` line to the next server's `replica-serve` line. Load average (1 min) at the "
        f"start {' '.join(map(str, result.get('loadavg_start', [])))}, at the end "
        f"{' '.join(map(str, result.get('loadavg_end', [])))}; {result.get('elapsed_s', 0):.0f} s in all.",
        "",
        "| cell | n | p50 | max | load (1 min) |",
        "|---|---|---|---|---|",
    ]
    samples, rolled = result.get("samples") or [], result.get("rollouts") or []
    for key, label, picked in (("handover", "replica SIGKILLed -> its groups served elsewhere", samples),
                               ("worker_during_handover", "worker SIGKILLed right after -> worked again "
                                "(last tick -> next)", samples),
                               ("worker_from_kill", "the same, from the worker's kill", samples),
                               ("rollout_gap", "rollout restart: a group without a server", rolled)):
        s = result.get(key) or {}
        if s.get("n"):
            lines.append(f"| {label} | {s['n']} | {s['p50_s']} s | {s['max_s']} s | {_load(picked)} |")
    v = result.get("violations") or {}
    lines += ["", f"- The worker group over the whole run (workers' logs): {v.get('overlaps', '-')} overlaps, "
                  f"{v.get('token_regressions', '-')} fencing-token regressions."]
    return lines
