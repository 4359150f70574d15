"""`python -m bench.run --quick` runs a tiny grid end to end and writes valid results (the bench code path)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.zk


def test_quick_bench_completes_and_writes_valid_results(tmp_path: Path) -> None:
    out, md = tmp_path / "results.json", tmp_path / "benchmarks.md"
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "bench.run", "--quick", "--out", str(out), "--md", str(md),
         "--workdir", str(tmp_path / "work"), "--budget", "200"],
        cwd=REPO, capture_output=True, text=True, timeout=400,
    )
    elapsed = time.monotonic() - started
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = json.loads(out.read_text())
    print(f"\nbench --quick: {elapsed:.0f} s")
    assert results["quick"] is True
    cells = {c["cell"]["impl"]: c for c in results["cells"]}
    assert set(cells) == {"rebalanser", "kazoo"}, results.get("skipped")
    for cell in cells.values():
        assert "error" not in cell, cell["error"]
        assert cell["samples"] and all(s["ok"] for s in cell["samples"])
        assert cell["summary"]["join"]["p50_ms"] is not None
    ours = cells["rebalanser"]["samples"]
    assert all(s["moved"] == s["min_moved"] for s in ours), "rebalanser must move exactly the minimum"
    assert results["operator"]["reconcile"]["create_s"]
    assert {t["target"] for t in results["targets"]}
    rows = results["assignment_bytes"].get("rows")
    assert rows, results["assignment_bytes"]
    assert {(r["layout"], r["change"]) for r in rows} == {(layout, change) for layout in ("chunked", "whole")
                                                          for change in ("add 10 resources", "remove 10 resources",
                                                                         "member joins", "member leaves")}
    assert "## Bytes written per rebalance" in md.read_text()
    floors = {(f["resources"], f["clients"]): f for f in results["floor"]}
    assert set(floors) == {(500, 1), (300, 1), (300, 3)}, floors
    assert all(f["create_best_ms"] > 0 and f["delete_best_ms"] > 0 for f in floors.values())
    # the bench's server runs here: what a create cost it and its clients is measured beside its time
    # (a small R may take less than one clock tick of the server's: >= 0, but measured)
    assert all(f["best_create_server_cpu_s"] >= 0 and f["best_create_clients_cpu_s"] >= 0 for f in floors.values())
    cold = results["coldstart"]["runs"][0]["samples"][0]
    assert cold["server_cpu_s"] >= 0, cold
    used = cold["worker_cpu_s"] + cold["server_cpu_s"] + cold["harness_cpu_s"]
    assert cold["cpu_bound_s"] == round(used / (os.cpu_count() or 1), 2), cold
    assert results["claimbook"]["x_floor"]["claim"] and results["claimbook"]["x_floor"]["release"]
    assert results["coldstart"]["runs"][0]["samples"][0]["x_floor"]["members_clients"]
    assert "## ZooKeeper's floor" in md.read_text() and "| x floor |" in md.read_text()
    layouts = {layout["per_process"]: layout for layout in results["split"]["layouts"]}
    assert set(layouts) == {3, 1}, results["split"]
    for layout in layouts.values():
        for row in layout["faults"]:
            assert "error" not in row, row
            assert row["library_path_ms"] is not None and row["plan_ms"] is not None, row
            assert row["library_path_ms"] <= row["latency_ms"] + 0.1, row
    assert "## Where a join's and a leave's time goes" in md.read_text()
    figures = sorted(p.name for p in (tmp_path / "figures").glob("*.svg"))
    assert figures == ["bench-latency.svg", "bench-movement.svg", "bench-writes.svg"], figures
    assert "figures/bench-latency.svg" in md.read_text()
    assert md.read_text().startswith("# Benchmarks")
