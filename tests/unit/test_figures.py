"""The report figures: each renderer turns a small fixture into a valid, reproducible SVG."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from bench import figures
from bench.report import FIGURE_TITLES
from tests.chaos import figures as chaos_figures

SVG = "{http://www.w3.org/2000/svg}"


def _sample(members: int, moved: int, minimum: int, ops: int) -> dict[str, Any]:
    return {"ok": True, "moved": moved, "min_moved": minimum, "members_after": members,
            "client": {"requests": {"write_ops": ops}}}


def _cell(impl: str, algorithm: str, members: int, resources: int, p50: float, moved: int) -> dict[str, Any]:
    summary = {fault: {"p50_ms": p50 * (1 + i), "p99_ms": p50 * (1.5 + i)}
               for i, fault in enumerate(("join", "leave", "kill"))}
    return {"cell": {"impl": impl, "algorithm": algorithm, "members": members, "resources": resources},
            "summary": summary, "samples": [_sample(members, moved, resources // members, 4 * (members + moved))]}


RESULTS = {"cells": [
    _cell("rebalanser", "resource-barrier", 2, 10, 20, 5), _cell("rebalanser", "resource-barrier", 10, 1000, 90, 100),
    _cell("rebalanser", "global-barrier", 10, 1000, 120, 100), _cell("kazoo", "resource-barrier", 10, 1000, 4000, 900),
]}

CHAOS = {"generated": "2026-01-01T00:00:00Z", "targets": {
    "resource-barrier": {"steps": 3, "violations_total": 0, "steps_by_kind": {"kill-follower": 2, "conn-cut": 1},
                         "ttr_by_step_kind": {"kill-follower": {"after_heal_p50": 1.5, "after_heal_max": 3.0},
                                              "conn-cut": {"after_heal_p50": 0.0, "after_heal_max": 0.0}},
                         "timeline": [[0.0, "kill-follower", 1.5, 0], [30.0, "conn-cut", 0.0, 0],
                                      [61.5, "kill-follower", 3.0, 1]]},
    "kazoo": {"steps": 1, "violations_total": 2, "steps_by_kind": {"kill-follower": 1},
              "ttr_by_step_kind": {"kill-follower": {"after_heal_p50": None}}},
}}


def _texts(path: Path) -> str:
    root = ET.parse(path).getroot()
    assert root.tag == f"{SVG}svg", root.tag
    return " ".join(t.text or "" for t in root.iter(f"{SVG}text"))


def test_every_bench_figure_is_an_svg_with_its_labels(tmp_path: Path) -> None:
    written = figures.render_bench(RESULTS, tmp_path)
    assert [p.name for p in written] == list(FIGURE_TITLES)
    texts = {p.name: _texts(p) for p in written}
    assert "kazoo SetPartitioner" in texts["bench-latency.svg"] and "graceful leave" in texts["bench-latency.svg"]
    assert "moved = minimum" in texts["bench-movement.svg"]
    assert "members + resources moved" in texts["bench-writes.svg"]


def test_a_rerender_of_the_same_data_is_the_same_file(tmp_path: Path) -> None:
    first = figures.save_svg(figures.movement(RESULTS), tmp_path / "a.svg").read_bytes()
    second = figures.save_svg(figures.movement(RESULTS), tmp_path / "b.svg").read_bytes()
    assert first == second


def test_the_chaos_timeline_shows_classes_targets_and_steps(tmp_path: Path) -> None:
    texts = _texts(chaos_figures.render(CHAOS, tmp_path))
    for expected in ("kill-follower", "conn-cut", "Every step", "kazoo 1 steps, 2 violations"):
        assert expected in texts, expected


def test_the_chaos_figure_needs_no_timeline(tmp_path: Path) -> None:
    aggregate_only = {"targets": {n: {k: v for k, v in t.items() if k != "timeline"}
                                  for n, t in CHAOS["targets"].items()}}  # type: ignore[attr-defined]
    assert "Every step" not in _texts(chaos_figures.render(aggregate_only, tmp_path))
