"""The pure part of ``bench/scale_replicas.py``: reading what the cluster answered (the ResourceGroups' list, the
operator replicas' metrics, ZooKeeper's ``stat``, the processes' /proc samples) into figures, and the
subsection of docs/benchmarks.md. No I/O here: ``tests/unit/test_scalestats.py`` feeds it text.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: The metrics a probe keeps of a replica's ``/metrics`` (the per-group series are left in the pod: with
#: thousands of groups they are megabytes).
METRICS = ("process_cpu_seconds_total", "process_resident_memory_bytes", "rebalanser_operator_zookeeper_connections",
           "rebalanser_operator_replica_groups", "rebalanser_operator_replica_in_office")

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{[^}]*\})?\s+(\S+)")
#: A client line of ZooKeeper's ``stat``: `` /10.244.0.7:51234[1](queued=0,recved=12,sent=12)``
_CLIENT = re.compile(r"^\s*/\[?([0-9A-Fa-f.:]+?)\]?:(\d+)\[")


@dataclass(frozen=True)
class GroupState:
    """One ResourceGroup as a list call shows it."""

    key: str  # namespace/name
    generation: int
    synced: bool  # ResourcesSynced True for this generation
    served_by: str | None


def group_states(listing: Mapping[str, Any]) -> list[GroupState]:
    """The ResourceGroups of a list call's answer (``{"items": [...]}``). Synced means the ``ResourcesSynced``
    condition is True and was written for the object's current generation (an older Synced does not count)."""
    out = []
    for item in listing.get("items") or []:
        meta = item.get("metadata") or {}
        status = item.get("status") or {}
        generation = int(meta.get("generation") or 0)
        cond = next((c for c in status.get("conditions") or [] if c.get("type") == "ResourcesSynced"), None)
        synced = (cond is not None and cond.get("status") == "True"
                  and int(cond.get("observedGeneration") or 0) >= generation)
        served = (status.get("servedBy") or {}).get("replica")
        out.append(GroupState(f"{meta.get('namespace')}/{meta.get('name')}", generation, synced, served))
    return out


def first_seen(polls: Iterable[tuple[float, Iterable[str]]]) -> dict[str, float]:
    """Group -> the instant of the first poll that showed it synced (polls as ``(instant, synced keys)``)."""
    seen: dict[str, float] = {}
    for at, keys in polls:
        for key in keys:
            seen.setdefault(key, at)
    return seen


def quantile_s(times: Iterable[float], q: float) -> float | None:
    """Nearest rank: the time by which a fraction ``q`` of the values had come (None for no values)."""
    values = sorted(times)
    if not values:
        return None
    return values[max(0, math.ceil(q * len(values)) - 1)]


def parse_metrics(text: str, names: Iterable[str] = METRICS) -> dict[str, float]:
    """The unlabelled (or summed over labels) value of each of ``names`` in a Prometheus text exposition."""
    wanted = set(names)
    out: dict[str, float] = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match is None or match.group(1) not in wanted:
            continue
        try:
            value = float(match.group(2))
        except ValueError:
            continue
        out[match.group(1)] = out.get(match.group(1), 0.0) + value
    return out


def stat_clients(text: str) -> list[str]:
    """The client addresses (one per connection, so per session) in ZooKeeper's ``stat`` answer."""
    return [m.group(1) for m in map(_CLIENT.match, text.splitlines()) if m is not None]


def sessions_per_pod(stats: Mapping[str, str], pod_ips: Mapping[str, str]) -> dict[str, int]:
    """Pod -> its connections over every server's ``stat`` (a client holds one connection per session)."""
    by_ip = Counter(ip for text in stats.values() for ip in stat_clients(text))
    return {pod: by_ip.get(ip, 0) for pod, ip in pod_ips.items()}


def served_counts(states: Iterable[GroupState]) -> dict[str, int]:
    """Replica -> the ResourceGroups whose status names it in ``servedBy``."""
    return dict(Counter(s.served_by for s in states if s.served_by))


def proc_totals(procs: Mapping[str, list[Mapping[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Pod -> its operator processes' CPU seconds (summed), RSS and peak RSS (largest), from the probe's /proc
    sample (``{pod: [{"pid", "cpu_s", "rss_kb", "hwm_kb"}, ...]}``)."""
    out = {}
    for pod, found in procs.items():
        if not found:
            continue
        out[pod] = {"cpu_s": round(sum(float(p["cpu_s"]) for p in found), 2),
                    "rss_mb": round(max(int(p["rss_kb"]) for p in found) / 1024, 1),
                    "peak_rss_mb": round(max(int(p["hwm_kb"]) for p in found) / 1024, 1),
                    "pids": sorted(int(p["pid"]) for p in found)}
    return out


def idle_rates(before: Mapping[str, Mapping[str, Any]], after: Mapping[str, Mapping[str, Any]],
               seconds: float) -> dict[str, float]:
    """Pod -> CPU seconds per second between two :func:`proc_totals` samples (the same processes only)."""
    out = {}
    for pod, b in before.items():
        a = after.get(pod)
        if a is None or a["pids"] != b["pids"] or seconds <= 0:
            continue
        out[pod] = round((a["cpu_s"] - b["cpu_s"]) / seconds, 4)
    return out


# ---------------------------------------------------------------------------------------------- report


def _mb(values: Iterable[float]) -> str:
    said = ", ".join(f"{v:.0f}" for v in values)
    return f"{said} MB" if said else "-"


def _per_replica(run: Mapping[str, Any], key: str, fmt: str = "{:g}") -> str:
    values = [r.get(key) for r in run.get("per_replica") or []]
    return ", ".join("-" if v is None else fmt.format(v) for v in values) or "-"


def results_list(stored: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None) -> list[Mapping[str, Any]]:
    """bench/results.json's ``operator_replicas_scale``: one result (as the first bench wrote it) or one per
    group count, in ascending order of groups."""
    if not stored:
        return []
    found = [stored] if isinstance(stored, Mapping) else list(stored)
    return sorted(found, key=lambda r: int(r.get("groups") or 0))


def merged(stored: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None,
           result: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """``stored`` with ``result`` in place of the result of the same group count (if any)."""
    kept = [r for r in results_list(stored) if r.get("groups") != result.get("groups")]
    return results_list([*kept, result])


def _counts(results: Iterable[Mapping[str, Any]], key: str) -> str:
    return " or ".join(dict.fromkeys(f"{r.get(key, '?')}" for r in results))


def markdown_lines(stored: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None) -> list[str]:
    """The subsection of docs/benchmarks.md (after "Operator at scale"): one table, the runs of every group
    count measured (:func:`results_list`), then each count's clean-up and notes."""
    results = results_list(stored)
    if not results:
        return []
    lines = ["", "### Operator replicas at scale", ""]
    measured = [r for r in results if not (r.get("skipped") or r.get("error"))]
    if not measured:
        return [*lines, *(f"- not measured: {r.get('skipped') or r.get('error')}" for r in results)]
    first = measured[0]
    sizes = " and ".join(f"{r['groups']:,}" for r in measured)
    lines += [
        f"`python -m bench.scale_replicas` on the kind cluster: the chart with `examples/values-ha.yaml` (the "
        f"operator group on the cluster's ensemble, the operator's identity, a memory limit of "
        f"{_counts(measured, 'memory_limit')}), {sizes} ResourceGroups without workers over "
        f"{first['namespaces']} namespaces ({first['resources_per_group']} resources each, every group on the "
        "cluster's ZooKeeper), created while the Deployment had no pod. *first start*: the Deployment scaled from "
        "0, the groups never served. *restart*: scaled to 0 (every pod gone, the operator group empty), every "
        "spec changed by one resource, scaled up again. *synced*: from the scale to the first list call in "
        "which every group's `ResourcesSynced` is True for its current generation (the first group, half, 90 % and "
        "all of them; the time includes the pods' scheduling and start; polled every "
        f"{_counts(measured, 'poll_s')} s). Per replica (in the same order in each column): its operator "
        "process's CPU seconds from its start to then and its peak RSS (`VmHWM`), read from /proc by a pod with "
        "the node's PID namespace; the groups whose `status.servedBy` names it; its ZooKeeper sessions, "
        "counted by ZooKeeper (`stat` on each server, connections from the pod's IP) and by its own metric "
        "`rebalanser_operator_zookeeper_connections` (the shared sessions of the groups; the operator group's "
        f"member is one more); *idle*: CPU per second over {_counts(measured, 'idle_s')} s starting "
        f"{_counts(measured, 'settle_s')} s after all were synced. Load: `uptime` at the run's start.",
        "",
        "| groups | run | replicas | synced (first / 50 % / 90 % / all) | CPU-s per replica | peak RSS per replica "
        "| groups per replica | ZooKeeper sessions per replica (server; metric) | idle CPU per replica "
        "| load at start |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for result in measured:
        for run in result.get("runs") or []:
            times = (f"**not all**: {run['unfinished']}" if run.get("unfinished") else
                     f"{run.get('first_synced_s', '-')} / {run.get('synced_p50_s')} / {run.get('synced_p90_s')} / "
                     f"**{run.get('synced_s')} s**")
            sessions = f"{_per_replica(run, 'sessions')}; {_per_replica(run, 'zk_connections_metric', '{:.0f}')}"
            idle = _per_replica(run, "idle_cores", "{:.3f}")
            lines.append(
                f"| {result['groups']:,} | {run['kind']} | {run['replicas']} | {times} | "
                f"{_per_replica(run, 'cpu_s', '{:.1f}')} | "
                f"{_mb(r.get('peak_rss_mb', 0) for r in run.get('per_replica') or [])} | "
                f"{_per_replica(run, 'groups')} | {sessions} | {idle + (' core' if idle != '-' else '')} | "
                f"{run.get('uptime_load', '?')} |")
    for result in results:
        lines += ["", *_result_notes(result)]
    return lines


def _result_notes(result: Mapping[str, Any]) -> list[str]:
    """One group count's bullets: its creation, clean-up and load, then its notes."""
    head = f"**{result.get('groups', 0):,} groups**"
    if result.get("skipped") or result.get("error"):
        return [f"- {head}: not measured: {result.get('skipped') or result.get('error')}"]
    facts = [f"created in {result['create_s']} s" if "create_s" in result else None,
             f"the groups' deletion {result['delete_s']} s" if "delete_s" in result else None,
             f"{result['elapsed_s']:.0f} s in all" if "elapsed_s" in result else None,
             f"load {result['uptime_start']} at the start, {result['uptime_end']} at the end"
             if "uptime_start" in result and "uptime_end" in result else None,
             f"clean-up error: {result['cleanup_error']}" if result.get("cleanup_error") else None]
    said = "; ".join(f for f in facts if f)
    return [f"- {head}{': ' + said if said else ''}.", *(f"  - {note}" for note in result.get("notes") or [])]
