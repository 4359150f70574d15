"""The real-cluster campaign's bookkeeping on synthetic steps (the campaign itself needs the cluster:
``python -m tests.chaos.realcluster``, part of ``make chaos``)."""

from __future__ import annotations

from typing import Any

from tests.chaos import realcluster

CLEAN = {"confirmed": {"overlaps": 0, "token_regressions": 0, "examples": []},
         "expiry": {"overlaps": 0, "token_regressions": 0, "examples": []}}


def kill(confirmed: float, expiry: float) -> dict[str, Any]:
    return {"kind": "sigkill", "started": 0.0, "outcome": {
        "confirmed": {"n": 1, "p50_s": confirmed}, "expiry": {"n": 1, "p50_s": expiry}}}


def result(steps: list[dict[str, Any]], violations: dict[str, Any] = CLEAN) -> dict[str, Any]:
    return realcluster._result(7, 1.0, 3, 12, steps, violations, 60.0)


def test_a_clean_run_counts_no_violation_and_summarises_each_fault_kind() -> None:
    r = result([kill(1.2, 11.5), kill(1.6, 11.9),
                {"kind": "sigstop-3T", "started": 0.0, "outcome": {"reworked_s": 11.0, "operator_acted": False}}])
    assert realcluster.total_violations(r) == 0
    assert r["by_kind"]["sigkill"]["steps"] == 2
    assert r["by_kind"]["sigkill"]["reworked_confirmed"]["max_s"] == 1.6
    assert r["by_kind"]["sigkill"]["reworked_expiry"]["n"] == 2
    assert r["by_kind"]["sigstop-3T"]["operator_acted"] == 0
    text = "\n".join(realcluster.markdown_lines(r))
    assert "**Violations: 0.**" in text and "| sigkill | 2 |" in text


def test_idle_resources_overlaps_and_a_failover_of_a_live_process_are_each_violations() -> None:
    idle = {"kind": "oom", "started": 0.0, "liveness": "timed out after 120s: r1 not worked on again"}
    acted = {"kind": "zookeeper-cut-3T", "started": 0.0, "outcome": {"reworked_s": 2.0, "operator_acted": True}}
    overlapped = {**CLEAN, "expiry": {"overlaps": 2, "token_regressions": 1, "examples": ["r1"]}}
    r = result([kill(1.0, 11.0), idle, acted], overlapped)
    assert r["liveness"] == 1 and r["confirmed_failover_of_a_live_process"] == 1
    assert realcluster.total_violations(r) == 1 + 1 + 2 + 1
    assert "**Violations: 5.**" in "\n".join(realcluster.markdown_lines(r))
