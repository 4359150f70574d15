"""Kubelet-confirmed failover vs session-expiry failover, side by side on the real cluster (``make bench``).

    python -m bench.failover [--kills 6] [--workers 3] [--resources 12] [--out bench/failover-results.json]

Two ResourceGroups in one namespace, the same worker pods but for ``spec.failover``: ``confirmed``
(``KubeletConfirmed``) and ``expiry`` (``SessionExpiry``), T = 10 s each. Each round SIGKILLs one worker
of each group in the same instant (the kubelet restarts both containers) and measures, from the
workers' own JSON logs, the time from the kill until every resource the victim held was worked on
again. Victims rotate over the pods. Then, on the confirmed group: a worker paused (SIGSTOP) for 3 T,
and a worker killed with the operator killed 0.3 s after it (in the middle of the failover). Every
scenario is checked for overlaps and fencing-token regressions. Needs the cluster (``make
cluster-up``) and the image; without them the result says why and nothing is measured.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from tests.support.failoverscene import FailoverScene
from tests.support.podcluster import REPO, NoCluster, pod_cluster

T = 10.0
OUT = REPO / ".pod-failover-bench"


def log(message: str) -> None:
    print(message, flush=True)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def summary(values: list[float]) -> dict[str, Any]:
    return {"n": len(values), "p50_s": round(statistics.median(values), 2) if values else None,
            "p95_s": round(percentile(values, 0.95), 2) if values else None,
            "max_s": round(max(values), 2) if values else None, "samples_s": [round(v, 2) for v in values]}


def owned_by(owners: dict[str, str], pod: str) -> set[str]:
    return {r for r, m in owners.items() if m == pod}


def run(kills: int, workers: int, resources: int, oom_kills: int = 2) -> dict[str, Any]:
    kube = pod_cluster()
    shutil.rmtree(OUT, ignore_errors=True)
    scene = FailoverScene(kube, OUT).setup()
    result: dict[str, Any] = {"T_s": T, "workers": workers, "resources": resources}
    try:
        scene.deploy("confirmed", "KubeletConfirmed", replicas=workers, resources=resources, session_timeout=T)
        scene.deploy("expiry", "SessionExpiry", replicas=workers, resources=resources, session_timeout=T)
        result["sigkill"] = side_by_side(scene, "KILL", kills, workers)
        result["oom"] = side_by_side(scene, "USR1", oom_kills, workers, first=kills)
        result["sigstop"] = sigstop(scene, workers)
        result["operator_killed"] = operator_killed(scene, workers)
        result["zookeeper_cut"] = zookeeper_cut(scene, workers)
        for group in ("confirmed", "expiry"):
            overlaps, regressions = scene.violations(group)
            result[f"violations_{group}"] = {"overlaps": len(overlaps), "token_regressions": len(regressions),
                                             "examples": (overlaps + regressions)[:5]}
    finally:
        scene.close()
    return result


def side_by_side(scene: FailoverScene, sig: str, rounds: int, workers: int, first: int = 0) -> dict[str, Any]:
    """``rounds`` times: ``sig`` to one worker of each group in the same instant (KILL: SIGKILL; USR1: the
    worker exhausts its memory limit and the kernel OOM-kills it); victims rotate over the pods."""
    latencies: dict[str, list[float]] = {"confirmed": [], "expiry": []}
    from_death: dict[str, list[float]] = {"confirmed": [], "expiry": []}
    reasons: list[str] = []
    for round_ in range(first, first + rounds):
        owners = {g: scene.stable(g, workers, timeout=400) for g in latencies}
        victims = {g: sorted(set(o.values()))[round_ % workers] for g, o in owners.items()}
        instances = {g: scene.instance(v) for g, v in victims.items()}
        kill = scene.signal(victims["confirmed"], sig, then=(0, victims["expiry"]))
        for group in latencies:
            seconds = scene.reworked(group, victims[group], instances[group],
                                     owned_by(owners[group], victims[group]), kill.ts)
            latencies[group].append(seconds)
            # From the victim's last event (at or before its death: an OOM kill comes after the signal).
            victim_id = (victims[group], instances[group])
            last = max(e["ts"] for e in scene.events(group) if (e["id"], e["_pid"]) == victim_id)
            from_death[group].append((kill.ts + seconds * 1e9 - last) / 1e9)
        for group, victim in victims.items():
            status = scene.wait_restarted(victim, instances[group], timeout=400)
            reasons.append(str(status["lastState"]["terminated"].get("reason")))
        log(f"  {sig} {round_ - first + 1}/{rounds}: confirmed {latencies['confirmed'][-1]:.2f} s, "
            f"expiry {latencies['expiry'][-1]:.2f} s ({', '.join(reasons[-2:])})")
    out: dict[str, Any] = {group: summary(values) for group, values in latencies.items()}
    for group, values in from_death.items():
        out[group]["from_last_event"] = summary(values)
    out["reasons"] = sorted(set(reasons))
    return out


def sigstop(scene: FailoverScene, workers: int) -> dict[str, Any]:
    owners = scene.stable("confirmed", workers, timeout=400)
    victim = sorted(set(owners.values()))[0]
    instance = scene.instance(victim)
    before = [line for line in scene.operator_lines("failover: pod") if victim in line]
    stop = scene.signal(victim, "STOP")
    try:
        seconds = scene.reworked("confirmed", victim, instance, owned_by(owners, victim), stop.ts, timeout=3 * T)
        scene.settle(max(0.0, 3 * T - seconds))
    finally:
        scene.signal(victim, "CONT")
    scene.stable("confirmed", workers, timeout=400)
    acted = [line for line in scene.operator_lines("failover: pod") if victim in line and line not in before]
    log(f"  SIGSTOP 3T: resources worked again {seconds:.2f} s after the pause began; operator acted: {bool(acted)}")
    return {"reworked_s": round(seconds, 2), "operator_acted": bool(acted),
            "restarted": scene.instance(victim) != instance}


def zookeeper_cut(scene: FailoverScene, workers: int) -> dict[str, Any]:
    """A KubeletConfirmed worker cut off from ZooKeeper (iptables in its pod's network namespace) for 3 T:
    its container keeps running, so the operator must leave it to session expiry."""
    owners = scene.stable("confirmed", workers, timeout=400)
    victim = sorted(set(owners.values()))[2 % workers]
    instance = scene.instance(victim)
    before = [line for line in scene.operator_lines("failover: pod") if victim in line]
    cut = scene.cut(victim)
    try:
        seconds = scene.reworked("confirmed", victim, instance, owned_by(owners, victim), cut, timeout=3 * T)
        scene.settle(max(0.0, 3 * T - seconds))
    finally:
        scene.cut(victim, heal=True)
    scene.stable("confirmed", workers, timeout=400)
    acted = [line for line in scene.operator_lines("failover: pod") if victim in line and line not in before]
    log(f"  ZooKeeper cut 3T: resources worked again {seconds:.2f} s after the cut; operator acted: {bool(acted)}")
    return {"reworked_s": round(seconds, 2), "operator_acted": bool(acted),
            "restarted": scene.instance(victim) != instance}


def operator_killed(scene: FailoverScene, workers: int) -> dict[str, Any]:
    owners = scene.stable("confirmed", workers, timeout=400)
    victim = sorted(set(owners.values()))[1 % workers]
    instance = scene.instance(victim)
    kill = scene.signal(victim, "KILL", then=(0.3, "operator"))
    seconds = scene.reworked("confirmed", victim, instance, owned_by(owners, victim), kill.ts)
    log(f"  worker + operator (0.3 s later) killed: resources worked again {seconds:.2f} s after the kill")
    scene.wait_restarted(victim, instance, timeout=400)
    return {"reworked_s": round(seconds, 2), "operator_pids_killed": len(kill.later)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.failover", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kills", type=int, default=6)
    p.add_argument("--oom-kills", type=int, default=2)
    p.add_argument("--workers", type=int, default=3)
    p.add_argument("--resources", type=int, default=12)
    p.add_argument("--out", type=Path, default=REPO / "bench" / "failover-results.json")
    args = p.parse_args(argv)
    started = time.monotonic()
    try:
        result = run(args.kills, args.workers, args.resources, args.oom_kills)
    except NoCluster as exc:
        result = {"skipped": f"no cluster: {exc}"}
    result["elapsed_s"] = round(time.monotonic() - started, 1)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    log(json.dumps({k: v for k, v in result.items() if k not in ("sigkill", "oom")}, indent=1))
    for fault in ("sigkill", "oom"):
        for group in ("confirmed", "expiry"):
            s = (result.get(fault) or {}).get(group)
            if s:
                log(f"{fault:7s} {group:10s} worked again: p50 {s['p50_s']} s, p95 {s['p95_s']} s, "
                    f"max {s['max_s']} s (n = {s['n']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())


def targets(result: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The targets of ``bench.report`` this comparison measures (none when it did not run)."""
    if not result or result.get("skipped") or result.get("error"):
        return []
    out = []
    for fault, what in (("sigkill", "SIGKILL"), ("oom", "OOM kill")):
        s = (result.get(fault) or {}).get("confirmed")
        if fault == "oom" and s and s.get("from_last_event"):
            s = s["from_last_event"]  # the kernel kills the worker some time after the signal
        if s and s.get("p50_s") is not None:
            expiry = (result.get(fault) or {}).get("expiry") or {}
            out.append({"target": f"kubelet-confirmed failover after {what}: worked again ≤ 2 s p50 (T = 10 s)",
                        "met": s["p50_s"] <= 2.0, "value": f"p50 {s['p50_s']} s, p95 {s['p95_s']} s (n = {s['n']})",
                        "detail": f"session expiry in the same run: p50 {expiry.get('p50_s')} s, "
                                  f"p95 {expiry.get('p95_s')} s"})
    violations = [result.get(f"violations_{g}") or {} for g in ("confirmed", "expiry")]
    if all(violations):
        total = sum(v.get("overlaps", 0) + v.get("token_regressions", 0) for v in violations)
        acted = [k for k in ("sigstop", "zookeeper_cut") if (result.get(k) or {}).get("operator_acted")]
        out.append({"target": "failover faults (SIGKILL, OOM, SIGSTOP 3T, ZooKeeper cut 3T, operator killed): "
                              "0 overlaps, 0 token regressions, no confirmed failover of a live process",
                    "met": total == 0 and not acted,
                    "value": f"{total} violations; operator acted on: {', '.join(acted) or 'none'}", "detail": ""})
    return out


def markdown_lines(result: dict[str, Any] | None) -> list[str]:
    """The section of docs/benchmarks.md (``bench.report`` appends it when ``make bench`` measured it)."""
    if not result:
        return []
    lines = ["", "## Kubelet-confirmed failover vs session expiry (real cluster)", ""]
    if result.get("skipped") or result.get("error"):
        return [*lines, f"- not measured: {result.get('skipped') or result.get('error')}"]
    lines += [
        f"{result['workers']} worker pods per group, {result['resources']} resources, T = {result['T_s']:g} s; "
        "each round kills one worker of each group in the same instant (`python -m bench.failover`; OOM: the "
        "worker exhausts its container's memory limit after the signal, so the OOM rows are also measured from the "
        "victim's last event, at or before its death). "
        "Time from the kill until every resource the victim held was worked on again, from the workers' logs:",
        "",
        "| failover | fault | n | p50 | p95 | max |",
        "|---|---|---|---|---|---|",
    ]
    for fault, what in (("sigkill", "SIGKILL"), ("oom", "OOM kill")):
        for group, label in (("confirmed", "KubeletConfirmed"), ("expiry", "SessionExpiry")):
            s = (result.get(fault) or {}).get(group)
            if not s:
                continue
            lines.append(f"| {label} | {what} | {s['n']} | {s['p50_s']} s | {s['p95_s']} s | {s['max_s']} s |")
            death = s.get("from_last_event")
            if fault == "oom" and death:
                lines.append(f"| {label} | OOM kill, from the victim's last event | {death['n']} | "
                             f"{death['p50_s']} s | {death['p95_s']} s | {death['max_s']} s |")
    lines.append("")
    for group, label in (("confirmed", "KubeletConfirmed"), ("expiry", "SessionExpiry")):
        v = result.get(f"violations_{group}", {})
        lines.append(f"- {label} group over the whole run (every fault above and below): {v.get('overlaps', '-')} "
                     f"overlaps, {v.get('token_regressions', '-')} fencing-token regressions (workers' logs).")
    stop, op = result.get("sigstop", {}), result.get("operator_killed", {})
    lines += [
        f"- SIGSTOP of a KubeletConfirmed worker for 3 T: the operator acted: {stop.get('operator_acted')}; its "
        f"resources were worked on again {stop.get('reworked_s')} s after the pause began (session expiry).",
        f"- A KubeletConfirmed worker cut off from ZooKeeper for 3 T (iptables in its pod's network namespace): "
        f"the operator acted: {result.get('zookeeper_cut', {}).get('operator_acted')}; its resources were worked "
        f"on again {result.get('zookeeper_cut', {}).get('reworked_s')} s after the cut (session expiry).",
        f"- A KubeletConfirmed worker SIGKILLed and the operator SIGKILLed 0.3 s later: resources worked again "
        f"{op.get('reworked_s')} s after the kill.",
    ]
    return lines
