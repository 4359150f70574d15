"""Kill -> worked again, as a user runs it, on the real cluster (``make bench``, ``make bench-failover``).

    python -m bench.failover [--kills 3] [--formed 3] [--rollouts 3] [--merge] [--namespace NS]

The chart's operator (``failover.enabled``), ResourceGroups at the defaults a user starts from
(``minIntervalSeconds`` 1, ``adaptive`` on, ``maxIntervalSeconds`` 30, ``workload`` naming the workers'
Deployment, T = 10 s) and worker pods wired like ``examples/workers.yaml`` (``--termination-log``,
``POD_NAME``, ``POD_UID``; a 0.1 s tick for the resolution). One worker process is SIGKILLed from the
host (``kill -9`` of its pid on the node: one kernel, one CLOCK_MONOTONIC with the workers' ``ts``), and
the time is measured from the kill until every resource that instance was working on (by its own
``assigned``/``revoked`` events) was worked on again by a live instance (the other workers' ``tick``
events, or the victim's restarted container's). Nothing is read from the library's own state.

Scenarios, each with ``KubeletConfirmed`` and ``SessionExpiry`` groups side by side (killed in the same
instant), except the rollout (``KubeletConfirmed`` only):

- ``formed``: a fresh group, killed as soon as its status says Stable (the start-up raised the interval:
  the new Deployment counts as rolling out);
- ``calm``: the same groups later, once the interval is back near its minimum;
- ``rollout``: 5 worker pods, ``kubectl rollout restart``, a worker killed once 1, 2, 3 new pods are Ready.

The effective interval the operator published and the load average are recorded with every kill. Then,
on the first groups: OOM kills, a SIGSTOP of 3 T, a ZooKeeper cut of 3 T, and the operator killed 0.3 s
after a worker; every group is checked for overlaps and fencing-token regressions. Needs the cluster
(``make cluster-up``) and the image; without them the result says why and nothing is measured.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tests.support.failoverscene import ZK_CONNECT, FailoverScene
from tests.support.kubectl import wait_until
from tests.support.podcluster import REPO, NoCluster, pod_cluster
from tests.support.workergaps import victim_logged

T = 10.0
MIN_INTERVAL = 1
CALM = 2.0  # a group is calm once the effective interval is at most this
NAMESPACE = "rb-bench-failover"
OUT = REPO / ".pod-failover-bench"
FAILOVERS = {"confirmed": "KubeletConfirmed", "expiry": "SessionExpiry"}
SCENARIOS = ("formed", "rollout", "calm")


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


def run(kills: int = 3, workers: int = 3, resources: int = 12, oom_kills: int = 1, *, formed: int = 3,
        rollouts: int = 3, rollout_workers: int = 5, extras: bool = True, namespace: str = NAMESPACE,
        min_interval: int = MIN_INTERVAL, replica_kills: int = 3, replica_rollouts: int = 1) -> dict[str, Any]:
    """Every scenario of the module's docstring; ``kills`` calm kills, ``formed`` fresh group pairs,
    ``rollouts`` rollouts (one kill each); then the operator replicas' cells (:mod:`bench.failover_replicas`:
    ``replica_kills`` kills of a replica and a worker, ``replica_rollouts`` rolling updates of the operator)."""
    kube = pod_cluster()
    shutil.rmtree(OUT, ignore_errors=True)
    scene = FailoverScene(kube, OUT, ns=namespace).setup()
    result: dict[str, Any] = {"T_s": T, "workers": workers, "resources": resources, "rollout_workers": rollout_workers,
                              "rebalance": {"minIntervalSeconds": min_interval, "maxIntervalSeconds": 30,
                                            "adaptive": True, "workload": "Deployment"},
                              "loadavg_start": [round(v, 2) for v in os.getloadavg()],
                              "zookeeper": {"connect": ZK_CONNECT, "tickTime_ms": zk_tick_ms(kube)}}
    samples: list[dict[str, Any]] = []
    violations: dict[str, dict[str, Any]] = {}
    try:
        for round_ in range(formed):
            groups = {f: f"{f}{round_}" for f in FAILOVERS}
            for failover, group in groups.items():
                scene.deploy(group, FAILOVERS[failover], replicas=workers, resources=resources, session_timeout=T,
                             min_interval=min_interval, adaptive=True, workload=True)
            samples += kill_pair(scene, groups, "formed", workers, rotate=0)
            if round_ == 0:
                for k in range(kills):
                    calm(scene, groups, min_interval)
                    samples += kill_pair(scene, groups, "calm", workers, rotate=k + 1)
                if extras:
                    result["oom"] = side_by_side(scene, groups, "USR1", oom_kills, workers, first=kills + 1)
                    result["sigstop"] = sigstop(scene, groups["confirmed"], workers)
                    result["operator_killed"] = operator_killed(scene, groups["confirmed"], workers)
                    result["zookeeper_cut"] = zookeeper_cut(scene, groups["confirmed"], workers)
            for group in groups.values():
                violations[group] = checked(scene, group)
                scene.remove(group)
        if rollouts:
            group = "rollout"
            scene.deploy(group, FAILOVERS["confirmed"], replicas=rollout_workers, resources=resources,
                         session_timeout=T, min_interval=min_interval, adaptive=True, workload=True)
            for k in range(rollouts):
                samples.append(kill_in_rollout(scene, group, rollout_workers, ready_new=1 + k % (rollout_workers - 1)))
            violations[group] = checked(scene, group)
    finally:
        scene.close()
    result["samples"] = samples
    result["kill"] = {f"{scenario}/{failover}": {**summary([s["seconds"] for s in picked]),
                                                "effective_interval_s": sorted({s["interval_s"] for s in picked}),
                                                "load1": [s["load1"] for s in picked]}
                      for scenario in SCENARIOS for failover in FAILOVERS
                      if (picked := [s for s in samples if s["scenario"] == scenario and s["failover"] == failover])}
    result["violations"] = violations
    result["loadavg_end"] = [round(v, 2) for v in os.getloadavg()]
    if replica_kills or replica_rollouts:
        from bench import failover_replicas

        result["replicas"] = failover_replicas.run(replica_kills, replica_rollouts)
    return result


def zk_tick_ms(kube: Any) -> int | None:
    """The tickTime of the ensemble the run uses, from the zoo.cfg of its first server (a StatefulSet ``zk``
    in the namespace its connect string names, as e2e/cluster/zookeeper.yaml deploys it); None if unknown."""
    parts = ZK_CONNECT.split(".")
    if len(parts) < 2:
        return None
    out = kube.kubectl("-n", parts[1], "exec", "zk-0", "--", "grep", "^tickTime=", "/data/zoo.cfg", check=False)
    found = re.search(r"tickTime=(\d+)", out.stdout or "")
    return int(found.group(1)) if found else None


def checked(scene: FailoverScene, group: str) -> dict[str, Any]:
    overlaps, regressions = scene.violations(group)
    return {"overlaps": len(overlaps), "token_regressions": len(regressions), "examples": (overlaps + regressions)[:5]}


def calm(scene: FailoverScene, groups: dict[str, str], min_interval: float) -> None:
    """Waits until every group's published interval is at most ``CALM`` (bounded: the policy decays to
    the minimum within ~2 minutes of the last disturbance)."""
    limit = max(CALM, min_interval)
    for group in groups.values():
        def down(g: str = group) -> bool:
            return (scene.effective_interval(g) or 0.0) <= limit

        wait_until(down, 300, f"{group}: the interval did not come down to {limit:g} s", poll=2.0)


def measure(scene: FailoverScene, group: str, victim: str, instance: int, ts: int,
            fallback: set[str]) -> tuple[float, int, dict[str, Any]]:
    """Seconds from the kill until everything the victim instance held was worked on again; the number held."""
    victim_logged(scene, group, victim, instance, ts, warn=lambda text: log(f"    {text}"))
    held = scene.held(group, victim, instance, ts) or fallback
    seconds = scene.reworked(group, victim, instance, held, ts, timeout=120)
    return seconds, len(held), stages(scene, group, victim, instance, ts, held)


def stages(scene: FailoverScene, group: str, victim: str, instance: int, ts: int, held: set[str]) -> dict[str, Any]:
    """Where the time went, seconds after the kill: the operator's log line saying it ended the victim's
    member (``operator_s``, with the duration it reports, ``operator_end_ms``, and when the pod event that
    led to it arrived, ``pod_event_s``), the first rebalance or hand-out a coordinator logged after the
    kill (``rebalanced_s``), and the first ``assigned`` event of a live instance naming one of the
    victim's resources (``assigned_s``). The log lines' timestamps are wall-clock; the node's kernel is
    this host's, so they map onto CLOCK_MONOTONIC."""
    offset = time.time_ns() - time.monotonic_ns()
    out: dict[str, Any] = {}
    for line in scene.operator_lines(f"failover: pod {victim}'s"):
        try:
            entry = json.loads(line)
            at = datetime.fromisoformat(entry["timestamp"]).timestamp() * 1e9 - offset
        except (ValueError, KeyError):
            continue
        if at >= ts and "operator_s" not in out:
            out["operator_s"] = round((at - ts) / 1e9, 3)
            found = re.search(r"ended in (\d+) ms", entry.get("message", ""))
            out["operator_end_ms"] = int(found.group(1)) if found else None
            arrived = re.search(r"the pod event arrived (\d+) ms before", entry.get("message", ""))
            if arrived:
                out["pod_event_s"] = round(out["operator_s"] - int(arrived.group(1)) / 1000, 3)
    logdir = scene.logs[group].dir if group in scene.logs else None
    rebalanced = [at for at in coordinator_lines(logdir, offset) if at >= ts]
    if rebalanced:
        out["rebalanced_s"] = round((min(rebalanced) - ts) / 1e9, 3)
    # A successor took office before that rebalance: the victim was the coordinator.
    took = [at for at in coordinator_lines(logdir, offset, TOOK_OFFICE) if at >= ts]
    if took and rebalanced and min(took) <= min(rebalanced):
        out["took_office_s"] = round((min(took) - ts) / 1e9, 3)
    assigned = [int(e["ts"]) for e in scene.events(group) if e["event"] == "assigned" and int(e["ts"]) >= ts
                and (e["id"], e["_pid"]) != (victim, instance) and held & set(e["resources"])]
    if assigned:
        out["assigned_s"] = round((min(assigned) - ts) / 1e9, 3)
    return out


COORDINATOR_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO rebalanser\.coordinator: "
                              r"(rebalance \d+:|\d+ orphans handed out)")
TOOK_OFFICE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO rebalanser\.coordinator: took office")


def coordinator_lines(logdir: Path | None, offset: int, pattern: re.Pattern[str] = COORDINATOR_LINE) -> list[int]:
    """When the group's coordinators logged a rebalance or a hand-out (``pattern``) in the workers' logs under
    ``logdir`` (stderr, ``--log-level=INFO``; wall-clock milliseconds in the container's UTC), as
    CLOCK_MONOTONIC nanoseconds (``offset``: wall - monotonic)."""
    if logdir is None:
        return []
    out = []
    for path in sorted(logdir.glob("*.log")):
        for line in path.read_text(errors="replace").splitlines():
            found = pattern.match(line)
            if found:
                wall = datetime.strptime(found.group(1), "%Y-%m-%d %H:%M:%S,%f").replace(tzinfo=UTC)
                out.append(int(wall.timestamp() * 1e9) - offset)
    return out


def kill_pair(scene: FailoverScene, groups: dict[str, str], scenario: str, workers: int,
              rotate: int) -> list[dict[str, Any]]:
    """One worker of each group SIGKILLed from the host in the same instant, measured, restarted."""
    owners = {f: scene.stable(g, workers, timeout=400) for f, g in groups.items()}
    victims = {f: sorted(set(o.values()))[rotate % workers] for f, o in owners.items()}
    instances = {f: scene.instance(v) for f, v in victims.items()}
    intervals = {f: scene.effective_interval(g) for f, g in groups.items()}
    load1 = round(os.getloadavg()[0], 2)
    kills = {f: scene.kill_from_host(victims[f]) for f in groups}
    out = []
    for f, group in groups.items():
        seconds, held, where = measure(scene, group, victims[f], instances[f], kills[f].ts,
                                       owned_by(owners[f], victims[f]))
        out.append({"scenario": scenario, "failover": f, "group": group, "victim": victims[f], "held": held,
                    "seconds": round(seconds, 3), "interval_s": intervals[f], "load1": load1, **where})
    for f in groups:
        scene.wait_restarted(victims[f], instances[f], timeout=400)
    log(f"  {scenario}: " + ", ".join(f"{s['failover']} {s['seconds']:.2f} s (interval {s['interval_s']} s; "
                                      f"pod event {s.get('pod_event_s')} s, operator {s.get('operator_s')} s, "
                                      f"rebalanced {s.get('rebalanced_s')} s, assigned {s.get('assigned_s')} s)"
                                      for s in out) + f", load {load1}")
    return out


def kill_in_rollout(scene: FailoverScene, group: str, workers: int, ready_new: int) -> dict[str, Any]:
    """``kubectl rollout restart`` of the workers' Deployment; once ``ready_new`` new pods are Ready, the
    live worker holding the most resources (by its own events) is SIGKILLed; the rollout is then awaited."""
    scene.stable(group, workers, timeout=400)
    before = {p["metadata"]["name"] for p in scene.worker_pods(group)}
    scene.kube.kubectl("rollout", "restart", f"deployment/{group}-worker", "-n", scene.ns)

    def under_way() -> list[dict[str, Any]] | None:
        pods = [p for p in scene.worker_pods(group) if not p["metadata"].get("deletionTimestamp")]
        new = [p for p in pods if p["metadata"]["name"] not in before and ready(p)]
        return pods if len(new) >= ready_new else None

    pods = wait_until(under_way, 400, f"{group}: the rollout did not reach {ready_new} new Ready pods", poll=0.5)
    now = time.monotonic_ns()
    candidates = []
    for pod in pods:
        name = pod["metadata"]["name"]
        if not ready(pod):
            continue
        instance = scene.instance(name)
        candidates.append((len(scene.held(group, name, instance, now)), name, instance))
    _, victim, instance = max(candidates)
    interval = scene.effective_interval(group)
    load1 = round(os.getloadavg()[0], 2)
    kill = scene.kill_from_host(victim)
    seconds, held, where = measure(scene, group, victim, instance, kill.ts, set())
    old = "old" if victim in before else "new"
    log(f"  rollout ({ready_new} new Ready): {old} pod {victim} held {held}: worked again {seconds:.2f} s "
        f"(interval {interval} s; pod event {where.get('pod_event_s')} s, operator {where.get('operator_s')} s, "
        f"rebalanced {where.get('rebalanced_s')} s, assigned {where.get('assigned_s')} s), "
        f"load {load1}")
    scene.kube.kubectl("rollout", "status", f"deployment/{group}-worker", "-n", scene.ns, "--timeout=600s",
                       timeout=660)
    return {"scenario": "rollout", "failover": "confirmed", "group": group, "victim": victim, "victim_pod": old,
            "new_ready_at_kill": ready_new, "held": held, "seconds": round(seconds, 3), "interval_s": interval,
            "load1": load1, **where}


def ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod.get("status", {}).get("conditions", []))


def side_by_side(scene: FailoverScene, groups: dict[str, str], sig: str, rounds: int, workers: int,
                 first: int = 0) -> dict[str, Any]:
    """``rounds`` times: ``sig`` to one worker of each group in the same instant (USR1: the worker
    exhausts its memory limit and the kernel OOM-kills it); victims rotate over the pods."""
    latencies: dict[str, list[float]] = {f: [] for f in groups}
    from_death: dict[str, list[float]] = {f: [] for f in groups}
    reasons: list[str] = []
    for round_ in range(first, first + rounds):
        owners = {f: scene.stable(g, workers, timeout=400) for f, g in groups.items()}
        victims = {f: sorted(set(o.values()))[round_ % workers] for f, o in owners.items()}
        instances = {f: scene.instance(v) for f, v in victims.items()}
        kill = scene.signal(victims["confirmed"], sig, then=(0, victims["expiry"]))
        for f, group in groups.items():
            seconds = scene.reworked(group, victims[f], instances[f], owned_by(owners[f], victims[f]), kill.ts)
            latencies[f].append(seconds)
            # From the victim's last event (at or before its death: an OOM kill comes after the signal).
            victim_id = (victims[f], instances[f])
            last = max(e["ts"] for e in scene.events(group) if (e["id"], e["_pid"]) == victim_id)
            from_death[f].append((kill.ts + seconds * 1e9 - last) / 1e9)
        for f, victim in victims.items():
            status = scene.wait_restarted(victim, instances[f], timeout=400)
            reasons.append(str(status["lastState"]["terminated"].get("reason")))
        log(f"  {sig} {round_ - first + 1}/{rounds}: confirmed {latencies['confirmed'][-1]:.2f} s, "
            f"expiry {latencies['expiry'][-1]:.2f} s ({', '.join(reasons[-2:])})")
    out: dict[str, Any] = {f: summary(values) for f, values in latencies.items()}
    for f, values in from_death.items():
        out[f]["from_last_event"] = summary(values)
    out["reasons"] = sorted(set(reasons))
    return out


def sigstop(scene: FailoverScene, group: str, workers: int) -> dict[str, Any]:
    owners = scene.stable(group, workers, timeout=400)
    victim = sorted(set(owners.values()))[0]
    instance = scene.instance(victim)
    before = [line for line in scene.operator_lines("failover: pod") if victim in line]
    stop = scene.signal(victim, "STOP")
    try:
        seconds = scene.reworked(group, victim, instance, owned_by(owners, victim), stop.ts, timeout=3 * T)
        scene.settle(max(0.0, 3 * T - seconds))
    finally:
        scene.signal(victim, "CONT")
    scene.stable(group, workers, timeout=400)
    acted = [line for line in scene.operator_lines("failover: pod") if victim in line and line not in before]
    log(f"  SIGSTOP 3T: resources worked again {seconds:.2f} s after the pause began; operator acted: {bool(acted)}")
    return {"reworked_s": round(seconds, 2), "operator_acted": bool(acted),
            "restarted": scene.instance(victim) != instance}


def zookeeper_cut(scene: FailoverScene, group: str, workers: int) -> dict[str, Any]:
    """A KubeletConfirmed worker cut off from ZooKeeper (iptables in its pod's network namespace) for 3 T:
    its container keeps running, so the operator must leave it to session expiry."""
    owners = scene.stable(group, workers, timeout=400)
    victim = sorted(set(owners.values()))[2 % workers]
    instance = scene.instance(victim)
    before = [line for line in scene.operator_lines("failover: pod") if victim in line]
    cut = scene.cut(victim)
    try:
        seconds = scene.reworked(group, victim, instance, owned_by(owners, victim), cut, timeout=3 * T)
        scene.settle(max(0.0, 3 * T - seconds))
    finally:
        scene.cut(victim, heal=True)
    scene.stable(group, workers, timeout=400)
    acted = [line for line in scene.operator_lines("failover: pod") if victim in line and line not in before]
    log(f"  ZooKeeper cut 3T: resources worked again {seconds:.2f} s after the cut; operator acted: {bool(acted)}")
    return {"reworked_s": round(seconds, 2), "operator_acted": bool(acted),
            "restarted": scene.instance(victim) != instance}


def operator_killed(scene: FailoverScene, group: str, workers: int) -> dict[str, Any]:
    owners = scene.stable(group, workers, timeout=400)
    victim = sorted(set(owners.values()))[1 % workers]
    instance = scene.instance(victim)
    kill = scene.signal(victim, "KILL", then=(0.3, "operator"))
    seconds = scene.reworked(group, victim, instance, owned_by(owners, victim), kill.ts)
    log(f"  worker + operator (0.3 s later) killed: resources worked again {seconds:.2f} s after the kill")
    scene.wait_restarted(victim, instance, timeout=400)
    return {"reworked_s": round(seconds, 2), "operator_pids_killed": len(kill.later)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.failover", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kills", type=int, default=3, help="kills in a calm group (default 3)")
    p.add_argument("--formed", type=int, default=3, help="fresh groups killed right after they formed (default 3)")
    p.add_argument("--rollouts", type=int, default=3, help="rollouts with a kill each (default 3)")
    p.add_argument("--oom-kills", type=int, default=1)
    p.add_argument("--workers", type=int, default=3)
    p.add_argument("--resources", type=int, default=12)
    p.add_argument("--no-extras", action="store_true", help="skip OOM, SIGSTOP, ZooKeeper cut, operator killed")
    p.add_argument("--namespace", default=NAMESPACE)
    p.add_argument("--replica-kills", type=int, default=3,
                   help="operator replicas: the replica serving a group killed, a worker right after (default 3)")
    p.add_argument("--replica-rollouts", type=int, default=1,
                   help="operator replicas: rolling updates of the operator's Deployment (default 1)")
    p.add_argument("--replicas-only", action="store_true",
                   help="only the operator replicas' cells, put into the existing result (--out)")
    p.add_argument("--out", type=Path, default=REPO / "bench" / "failover-results.json")
    p.add_argument("--merge", action="store_true",
                   help="also put the result into bench/results.json and regenerate docs/benchmarks.md")
    args = p.parse_args(argv)
    if args.replicas_only:
        return replicas_only(args.out, args.replica_kills, args.replica_rollouts, args.merge)
    started = time.monotonic()
    try:
        result = run(args.kills, args.workers, args.resources, args.oom_kills, formed=args.formed,
                     rollouts=args.rollouts, extras=not args.no_extras, namespace=args.namespace,
                     replica_kills=args.replica_kills, replica_rollouts=args.replica_rollouts)
    except NoCluster as exc:
        result = {"skipped": f"no cluster: {exc}"}
    result["elapsed_s"] = round(time.monotonic() - started, 1)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    for line in markdown_lines(result):
        log(line)
    if args.merge and not result.get("skipped"):
        merge(result)
    return 0


def replicas_only(out: Path, kills: int, rollouts: int, merge_it: bool) -> int:
    """The operator replicas' cells alone, put into the failover result at ``out`` (and, with ``merge_it``,
    into bench/results.json's failover section) beside the cells measured before."""
    from bench import failover_replicas

    try:
        cells = failover_replicas.run(kills, rollouts)
    except NoCluster as exc:
        cells = {"skipped": f"no cluster: {exc}"}
    for line in failover_replicas.markdown_lines(cells):
        log(line)
    if cells.get("skipped"):
        return 0
    result: dict[str, Any] = json.loads(out.read_text()) if out.exists() else {}
    result["replicas"] = cells
    out.write_text(json.dumps(result, indent=1) + "\n")
    if merge_it:
        merge(result, only_replicas=True)
    return 0


def merge(result: dict[str, Any], only_replicas: bool = False) -> None:
    """``result`` as the failover section of bench/results.json (``only_replicas``: its operator replicas'
    cells alone, the rest kept); docs/benchmarks.md regenerated from it (every other section keeps the run
    it came from)."""
    from bench import report

    out, md = REPO / "bench" / "results.json", REPO / "docs" / "benchmarks.md"
    results: dict[str, Any] = json.loads(out.read_text())
    if only_replicas:
        results["failover"] = {**(results.get("failover") or {}), "replicas": result["replicas"]}
    else:
        results["failover"] = result
    results["targets"] = report.evaluate(results)
    out.write_text(json.dumps(results, indent=1, sort_keys=False) + "\n")
    md.write_text(report.markdown(results))
    log(f"wrote the failover section into {out} and {md}")


def targets(result: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The targets of ``bench.report`` this module measures (none when it did not run)."""
    from bench import failover_replicas

    if not result or result.get("skipped") or result.get("error"):
        return []
    replicas = failover_replicas.targets(result.get("replicas"))
    if "kill" not in result:
        return replicas
    out = []
    kill = result["kill"]
    for scenario, what in (("formed", "right after the group formed"),
                           ("rollout", "during `kubectl rollout restart` of 5 pods"), ("calm", "in a calm group")):
        s = kill.get(f"{scenario}/confirmed")
        if s and s.get("p50_s") is not None:
            picked = [x for x in result.get("samples", [])
                      if x["scenario"] == scenario and x["failover"] == "confirmed"]
            out.append({"target": f"KubeletConfirmed, T = 10 s: kill -> worked again ≤ 2 s p50, {what}",
                        "met": s["p50_s"] <= 2.0, "value": f"p50 {s['p50_s']} s, max {s['max_s']} s (n = {s['n']})",
                        "detail": f"effective interval at the kills: {_intervals(s)}; load {_loads(s)}; "
                                  f"{split(picked)}"})
    expiry = [x["seconds"] for x in result.get("samples", []) if x["failover"] == "expiry"]
    if expiry:
        s = summary(expiry)
        out.append({"target": f"SessionExpiry: kill -> worked again ≤ T + 0.5 s = {T + 0.5:g} s p50",
                    "met": s["p50_s"] <= T + 0.5, "value": f"p50 {s['p50_s']} s, max {s['max_s']} s (n = {s['n']})",
                    "detail": "formed and calm groups; the first hand-out reached a worker p50 "
                              f"{_median(result, 'assigned_s'):.2f} s after the kill (the session's expiry at the "
                              "server, which expires sessions in tickTime = "
                              f"{(result.get('zookeeper') or {}).get('tickTime_ms') or '?'} ms buckets), the last "
                              f"resource was worked again p50 {_median(result, 'after_assigned'):.2f} s after that"})
    violations = result.get("violations") or {}
    if violations:
        total = sum(v.get("overlaps", 0) + v.get("token_regressions", 0) for v in violations.values())
        acted = [k for k in ("sigstop", "zookeeper_cut") if (result.get(k) or {}).get("operator_acted")]
        out.append({"target": "failover faults (SIGKILL, rollout, OOM, SIGSTOP 3T, ZooKeeper cut 3T, operator "
                              "killed): 0 overlaps, 0 token regressions, no confirmed failover of a live process",
                    "met": total == 0 and not acted,
                    "value": f"{total} violations; operator acted on: {', '.join(acted) or 'none'}", "detail": ""})
    return out + replicas


def _median(result: dict[str, Any], what: str) -> float:
    samples = [x for x in result.get("samples", []) if x["failover"] == "expiry" and x.get("assigned_s") is not None]
    values = [x["seconds"] - x["assigned_s"] if what == "after_assigned" else x[what] for x in samples]
    return statistics.median(values) if values else float("nan")


def split(samples: list[dict[str, Any]]) -> str:
    """Where the median kill's time went: until the operator had ended the member (kubelet, API server,
    the operator's watch and its own work), and after it (the coordinator's hand-out, the claim, a tick)."""
    until = [x["operator_s"] for x in samples if x.get("operator_s") is not None]
    own = [x["operator_end_ms"] for x in samples if x.get("operator_end_ms") is not None]
    after = [x["seconds"] - x["operator_s"] for x in samples if x.get("operator_s") is not None]
    if not until:
        return "the operator's log line was not found"
    seen = [x["pod_event_s"] for x in samples if x.get("pod_event_s") is not None]
    heirs = [x for x in samples if x.get("took_office_s") is not None and x.get("operator_s") is not None]
    return (f"until the operator had ended the member p50 {statistics.median(until):.2f} s ("
            + (f"the pod event p50 {statistics.median(seen):.2f} s, " if seen else "")
            + f"its own work p50 {statistics.median(own):.0f} ms), after it p50 {statistics.median(after):.2f} s"
            + (f"; {len(heirs)} of {len(samples)} killed the coordinator (a successor took office "
               f"p50 {statistics.median([x['took_office_s'] - x['operator_s'] for x in heirs]):.2f} s after "
               "the operator's line, then handed out)" if heirs else ""))


def _intervals(s: dict[str, Any]) -> str:
    return ", ".join(f"{v:g} s" for v in s.get("effective_interval_s", []) if v is not None) or "-"


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def _loads(s: dict[str, Any]) -> str:
    loads = s.get("load1") or []
    return f"{min(loads):g} to {max(loads):g}" if loads else "-"


def markdown_lines(result: dict[str, Any] | None) -> list[str]:
    """The section of docs/benchmarks.md (``bench.report`` appends it when it was measured)."""
    from bench import failover_replicas

    if not result:
        return []
    lines = ["", "## Failover on the real cluster: kill -> worked again", ""]
    if result.get("skipped") or result.get("error"):
        return [*lines, f"- not measured: {result.get('skipped') or result.get('error')}"]
    if "kill" not in result:
        return [*lines, "- not measured by this version of `bench.failover` (run `make bench-failover`)",
                *failover_replicas.markdown_lines(result.get("replicas"))]
    rb = result.get("rebalance", {})
    lines += [
        f"`make bench-failover` (`python -m bench.failover`, also part of `make bench`): the chart's operator, "
        f"ResourceGroups at minIntervalSeconds {rb.get('minIntervalSeconds', MIN_INTERVAL):g}, adaptive on, "
        f"maxIntervalSeconds 30, `workload` naming the workers' Deployment, T = {result['T_s']:g} s, "
        f"{result['resources']} resources; {result['workers']} worker pods per group wired like "
        f"`examples/workers.yaml` ({result.get('rollout_workers', 5)} in the rollout). One worker process is "
        "SIGKILLed from the host; the time runs from the kill until every resource that instance was working "
        "on (its own `assigned`/`revoked` events) was worked on again (the other workers' `tick` events). "
        "*formed*: a fresh group, killed as soon as it is Stable; *rollout*: during `kubectl rollout restart`, "
        "once 1, 2 or 3 new pods are Ready; *calm*: once the interval is back near its minimum. The "
        "interval column is the effective interval the operator had published at the kill.",
        "",
        f"Load average (1 min) at the start {' '.join(map(str, result.get('loadavg_start', [])))}, at the end "
        f"{' '.join(map(str, result.get('loadavg_end', [])))}; {result.get('elapsed_s', 0):.0f} s in all.",
        "",
        "| scenario | failover | n | effective interval at the kill | p50 | p95 | max | load (1 min) at the kills |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for key, s in result["kill"].items():
        scenario, failover = key.split("/")
        lines.append(f"| {scenario} | {FAILOVERS[failover]} | {s['n']} | {_intervals(s)} | {s['p50_s']} s | "
                     f"{s['p95_s']} s | {s['max_s']} s | {_loads(s)} |")
    zk = result.get("zookeeper") or {}
    if zk.get("tickTime_ms"):
        lines += ["", f"ZooKeeper: `{zk.get('connect')}`, tickTime {zk['tickTime_ms']} ms (a session expires "
                      "in tickTime buckets: between T and T + tickTime after the leader last heard of it)."]
    lines += ["", "Every kill, and where its time went (seconds after the kill): the pod event that told the "
              "operator (the kubelet's detection and the watch), the operator's log line saying it ended the "
              "victim's member (and how long its ZooKeeper step says it took), the first rebalance a coordinator "
              "logged (*successor*: the victim was the coordinator, and that rebalance came from the member that "
              "took office after it), the first `assigned` event of a live worker naming one of the victim's "
              "resources, the last of them worked on again:", "",
              "| scenario | failover | interval | load | pod event | operator ended the member | "
              "(its own duration) | rebalanced | assigned | worked again |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for x in result.get("samples", []):
        own = x.get("operator_end_ms")
        lines.append(f"| {x['scenario']} | {FAILOVERS[x['failover']]} | {x['interval_s']} s | {x['load1']} | "
                     f"{_s(x.get('pod_event_s'))} | {_s(x.get('operator_s'))} | "
                     f"{'-' if own is None else f'{own} ms'} | {_s(x.get('rebalanced_s'))}"
                     f"{' (successor)' if x.get('took_office_s') is not None else ''} | "
                     f"{_s(x.get('assigned_s'))} | {x['seconds']:.2f} s |")
    lines.append("")
    oom = result.get("oom") or {}
    for failover, label in FAILOVERS.items():
        s = oom.get(failover)
        if s:
            death = s.get("from_last_event") or {}
            lines.append(f"- OOM kill, {label}: worked again p50 {s['p50_s']} s after the signal, "
                         f"{death.get('p50_s')} s after the victim's last event (n = {s['n']}).")
    stop, op, cut = result.get("sigstop"), result.get("operator_killed"), result.get("zookeeper_cut")
    if stop:
        lines.append(f"- SIGSTOP of a KubeletConfirmed worker for 3 T: the operator acted: "
                     f"{stop.get('operator_acted')}; its resources were worked on again "
                     f"{stop.get('reworked_s')} s after the pause began "
                     "(session expiry).")
    if cut:
        lines.append(f"- A KubeletConfirmed worker cut off from ZooKeeper for 3 T (iptables in its pod's network "
                     f"namespace): the operator acted: {cut.get('operator_acted')}; its resources were worked on "
                     f"again {cut.get('reworked_s')} s after the cut (session expiry).")
    if op:
        lines.append(f"- A KubeletConfirmed worker SIGKILLed and the operator SIGKILLed 0.3 s later: resources "
                     f"worked again {op.get('reworked_s')} s after the kill.")
    total = {k: v.get("overlaps", 0) + v.get("token_regressions", 0)
             for k, v in (result.get("violations") or {}).items()}
    lines.append(f"- Overlaps and fencing-token regressions over the whole run (workers' logs), per group: "
                 f"{', '.join(f'{k} {v}' for k, v in total.items()) or '-'}.")
    return lines + failover_replicas.markdown_lines(result.get("replicas"))


if __name__ == "__main__":
    sys.exit(main())
