"""bench/scalestats.py: what bench/scale_replicas.py reads from the cluster's answers."""

from __future__ import annotations

from typing import Any

from bench.scalestats import (
    first_seen,
    group_states,
    idle_rates,
    markdown_lines,
    merged,
    parse_metrics,
    proc_totals,
    quantile_s,
    served_counts,
    sessions_per_pod,
    stat_clients,
)


def _rg(name: str, generation: int, synced: str | None, observed: int, replica: str | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if synced is not None:
        status["conditions"] = [{"type": "Ready", "status": "False"},
                                {"type": "ResourcesSynced", "status": synced, "observedGeneration": observed}]
    if replica:
        status["servedBy"] = {"replica": replica, "token": 7}
    return {"metadata": {"namespace": "t0", "name": name, "generation": generation}, "status": status}


def test_synced_only_for_the_current_generation() -> None:
    states = group_states({"items": [
        _rg("new", 1, None, 0),                   # never served: no status
        _rg("fresh", 2, "True", 2, "op-a"),
        _rg("old", 2, "True", 1, "op-b"),          # Synced, but for the spec before the change
        _rg("failing", 1, "False", 1, "op-a"),
    ]})
    assert [(s.key, s.synced) for s in states] == [("t0/new", False), ("t0/fresh", True), ("t0/old", False),
                                                   ("t0/failing", False)]
    assert served_counts(states) == {"op-a": 2, "op-b": 1}


def test_first_seen_and_quantiles() -> None:
    seen = first_seen([(1.0, ["a"]), (3.0, ["a", "b"]), (5.0, ["a", "b", "c", "d"])])
    assert seen == {"a": 1.0, "b": 3.0, "c": 5.0, "d": 5.0}
    assert quantile_s(seen.values(), 0.5) == 3.0
    assert quantile_s(seen.values(), 1.0) == 5.0
    assert quantile_s([], 0.5) is None


def test_metrics_keep_the_wanted_and_sum_labels() -> None:
    text = """# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total 41.5
process_resident_memory_bytes 2.5e+08
rebalanser_operator_zookeeper_connections 1.0
rebalanser_operator_replica_handovers_total{direction="gained"} 1000.0
rebalanser_operator_replica_groups 1000.0
rebalanser_group_members{namespace="t0",name="g1"} 0.0
"""
    assert parse_metrics(text) == {"process_cpu_seconds_total": 41.5, "process_resident_memory_bytes": 2.5e8,
                                   "rebalanser_operator_zookeeper_connections": 1.0,
                                   "rebalanser_operator_replica_groups": 1000.0}
    assert parse_metrics(text, ["rebalanser_operator_replica_handovers_total"]) == {
        "rebalanser_operator_replica_handovers_total": 1000.0}
    assert parse_metrics("# error timed out") == {}


STAT = """Zookeeper version: 3.9.3-c26634f34490bb0ea7a09cc51e05ede3b4e320ee, built on 2024-10-17 23:21 UTC
Clients:
 /10.244.0.21:40118[1](queued=0,recved=310,sent=310)
 /10.244.0.9:55306[0](queued=0,recved=1,sent=0)
 /10.244.0.21:40990[1](queued=0,recved=12,sent=12)

Latency min/avg/max: 0/0.4/12
Mode: follower
Node count: 30211
"""


def test_sessions_from_zookeeper_stat() -> None:
    assert stat_clients(STAT) == ["10.244.0.21", "10.244.0.9", "10.244.0.21"]
    other = "Clients:\n /10.244.0.22:33000[1](queued=0,recved=5,sent=5)\n"
    counts = sessions_per_pod({"zk-0": STAT, "zk-1": other, "zk-2": "# error refused"},
                              {"op-a": "10.244.0.21", "op-b": "10.244.0.22", "op-c": "10.244.0.23"})
    assert counts == {"op-a": 2, "op-b": 1, "op-c": 0}


def test_proc_totals_and_idle_rates() -> None:
    before = proc_totals({"op-a": [{"pid": 10, "cpu_s": 30.0, "rss_kb": 204800, "hwm_kb": 307200}], "op-b": []})
    assert before == {"op-a": {"cpu_s": 30.0, "rss_mb": 200.0, "peak_rss_mb": 300.0, "pids": [10]}}
    after = proc_totals({"op-a": [{"pid": 10, "cpu_s": 33.0, "rss_kb": 204800, "hwm_kb": 307200}]})
    assert idle_rates(before, after, 60.0) == {"op-a": 0.05}
    restarted = proc_totals({"op-a": [{"pid": 99, "cpu_s": 1.0, "rss_kb": 1024, "hwm_kb": 1024}]})
    assert idle_rates(before, restarted, 60.0) == {}  # another process: no rate


def test_markdown_rows() -> None:
    result = {"groups": 3000, "namespaces": 4, "resources_per_group": 2, "poll_s": 2.0, "idle_s": 60, "settle_s": 60,
              "memory_limit": "2Gi", "runs": [
                  {"kind": "restart", "replicas": 3, "synced_s": 80.2, "first_synced_s": 9.5, "synced_p50_s": 40.1,
                   "synced_p90_s": 70.0,
                   "uptime_load": "2.50, 2.40, 2.30", "per_replica": [
                       {"pod": "a", "cpu_s": 50.0, "peak_rss_mb": 250.0, "groups": 1000, "sessions": 2,
                        "zk_connections_metric": 1.0, "idle_cores": 0.012},
                       {"pod": "b", "cpu_s": 49.0, "peak_rss_mb": 240.0, "groups": 1000, "sessions": 2,
                        "zk_connections_metric": 1.0, "idle_cores": None}]}]}
    lines = markdown_lines(result)
    row = next(line for line in lines if line.startswith("| 3,000 | restart"))
    assert ("| 3 | 9.5 / 40.1 / 70.0 / **80.2 s** | 50.0, 49.0 | 250, 240 MB | 1000, 1000 | 2, 2; 1, 1 "
            "| 0.012, - core |") in row
    assert markdown_lines({"skipped": "no cluster"})[-1] == "- not measured: no cluster"
    assert markdown_lines(None) == []


def test_results_of_several_group_counts_share_the_table() -> None:
    def result(groups: int, synced_s: float, note: str) -> dict[str, Any]:
        return {"groups": groups, "namespaces": 4, "resources_per_group": 2, "poll_s": 2.0, "idle_s": 30,
                "settle_s": 60, "memory_limit": "2Gi", "create_s": 8.6, "delete_s": 99.0, "notes": [note],
                "runs": [{"kind": "first start", "replicas": 1, "synced_s": synced_s, "per_replica": []}]}

    small, large = result(1000, 245.7, "the small one"), result(3000, 700.0, "the large one")
    stored = merged(small, large)  # the first bench's single result, then another count
    assert [r["groups"] for r in stored] == [1000, 3000]
    again = merged(stored, result(3000, 650.0, "measured again"))
    assert [(r["groups"], r["notes"]) for r in again] == [(1000, ["the small one"]), (3000, ["measured again"])]
    text = "\n".join(markdown_lines(again))
    assert "1,000 and 3,000 ResourceGroups" in text
    rows = [line for line in text.splitlines() if line.startswith("| 1,000 |") or line.startswith("| 3,000 |")]
    assert [row.split(" | ")[0] for row in rows] == ["| 1,000", "| 3,000"] and "**650.0 s**" in rows[1]
    assert "- **3,000 groups**: created in 8.6 s; the groups' deletion 99.0 s." in text
    assert "  - measured again" in text and "the large one" not in text
    stopped = {"kind": "restart", "replicas": 3, "unfinished": "636 of 3,000 after 660 s", "per_replica": []}
    row = next(line for line in markdown_lines({**large, "runs": [stopped]}) if line.startswith("| 3,000 |"))
    assert "| **not all**: 636 of 3,000 after 660 s | - | - | - |" in row
