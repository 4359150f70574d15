"""Figures of ``bench/results.json`` (matplotlib, the ``bench`` extra), written as SVG next to the report.

* ``bench-latency.svg``: rebalance latency (p50, whisker to p99) by group size, per fault, for both
  algorithms and kazoo's SetPartitioner;
* ``bench-movement.svg``: resources moved in each rebalance against the fewest any balanced assignment
  could move;
* ``bench-writes.svg``: ZooKeeper write operations of each rebalance against members + moved, with the
  bound the targets check.

``python -m bench.figures`` renders them from the committed results without running the benchmark.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, never a display

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from bench.report import FAULT_TITLES, WRITE_FIXED, WRITE_SLOPE

REPO = Path(__file__).resolve().parents[1]
FIGURES = REPO / "docs" / "figures"

#: (impl, algorithm) -> legend label and colour; kazoo has no algorithm of ours.
SERIES: dict[tuple[str, str | None], tuple[str, str]] = {
    ("rebalanser", "resource-barrier"): ("rebalanser, Resource Barrier", "#1f77b4"),
    ("rebalanser", "global-barrier"): ("rebalanser, Global Barrier", "#2ca02c"),
    ("kazoo", None): ("kazoo SetPartitioner", "#d62728"),
}


def _series_of(cell: dict[str, Any]) -> tuple[str, str | None]:
    c = cell["cell"]
    return (c["impl"], c["algorithm"] if c["impl"] == "rebalanser" else None)


def style() -> None:
    plt.rcParams.update({
        "svg.hashsalt": "rebalanser",  # stable element ids: a re-render of the same data is the same file
        "svg.fonttype": "none",  # text stays text (small, searchable)
        "font.size": 9,
        "axes.grid": True,
        "grid.alpha": 0.3,
    })


def save_svg(figure: Figure, path: Path) -> Path:
    """Writes ``figure`` as SVG without a date in it (re-rendering unchanged data changes no byte)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="svg", metadata={"Date": None}, bbox_inches="tight")
    plt.close(figure)
    return path


def latency(results: dict[str, Any]) -> Figure:
    """Rebalance latency by N (members) and algorithm, kazoo beside; one panel per fault."""
    style()
    faults = [f for f in FAULT_TITLES if any(f in c.get("summary", {}) for c in results.get("cells", []))]
    figure, axes = plt.subplots(1, max(1, len(faults)), figsize=(3.2 * max(1, len(faults)), 3.4), squeeze=False,
                                sharey=True)
    for ax, fault in zip(axes[0], faults, strict=False):
        for key, (label, colour) in SERIES.items():
            points = sorted(
                (c["cell"]["members"], c["cell"]["resources"], s["p50_ms"], s.get("p99_ms") or s["p50_ms"])
                for c in results.get("cells", [])
                if _series_of(c) == key and (s := c.get("summary", {}).get(fault)) and s.get("p50_ms") is not None
            )
            if not points:
                continue
            xs = [p[0] for p in points]
            p50 = [p[2] / 1000 for p in points]
            p99 = [(p[3] - p[2]) / 1000 for p in points]
            ax.errorbar(xs, p50, yerr=[[0] * len(p50), p99], marker="o", capsize=3, label=label, color=colour)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(FAULT_TITLES[fault])
        ax.set_xlabel("members N")
    axes[0][0].set_ylabel("rebalance latency, s (p50, bar to p99)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="upper center", ncol=3, bbox_to_anchor=(0.5, 0.0), frameon=False)
    figure.suptitle("Time from a membership change until every resource is worked on again "
                    "(R = 10, 1,000, 10,000, 100,000 resources at N = 2, 10, 50, 200)")
    figure.tight_layout()
    return figure


def _samples(results: dict[str, Any]) -> list[tuple[tuple[str, str | None], dict[str, Any]]]:
    return [(_series_of(c), s) for c in results.get("cells", []) for s in c.get("samples", []) if s.get("ok")]


def movement(results: dict[str, Any]) -> Figure:
    """Resources moved per rebalance against the minimum a balanced assignment needs."""
    style()
    figure, ax = plt.subplots(figsize=(5.2, 4.2))
    top = 1.0
    for key, (label, colour) in SERIES.items():
        mine = [(s["min_moved"], s["moved"]) for k, s in _samples(results) if k == key and s.get("min_moved")]
        if mine:
            ax.scatter([m for m, _ in mine], [v for _, v in mine], s=14, alpha=0.6, label=label, color=colour)
            top = max(top, *(v for _, v in mine), *(m for m, _ in mine))
    ax.plot([1, top], [1, top], color="black", linewidth=0.8, linestyle="--", label="moved = minimum")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("fewest resources any balanced assignment moves")
    ax.set_ylabel("resources moved")
    ax.set_title("Resources moved per rebalance against the minimum")
    ax.legend(loc="upper left", frameon=False)
    return figure


def writes(results: dict[str, Any]) -> Figure:
    """ZooKeeper write operations per rebalance against members + moved resources."""
    style()
    figure, ax = plt.subplots(figsize=(5.2, 4.2))
    top = 1.0
    for key, (label, colour) in SERIES.items():
        mine = [(s["members_after"] + s["moved"], s["client"]["requests"]["write_ops"]) for k, s in _samples(results)
                if k == key and s.get("client", {}).get("requests", {}).get("write_ops") is not None]
        if mine:
            ax.scatter([x for x, _ in mine], [y for _, y in mine], s=14, alpha=0.6, label=label, color=colour)
            top = max(top, *(x for x, _ in mine))
    xs = [1, top]
    ax.plot(xs, [WRITE_FIXED + WRITE_SLOPE * x for x in xs], color="black", linewidth=0.8, linestyle="--",
            label=f"bound: {WRITE_FIXED} + {WRITE_SLOPE:g} x (members + moved)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("members + resources moved")
    ax.set_ylabel("ZooKeeper write operations")
    ax.set_title("Writes per rebalance against members + moved")
    ax.legend(loc="upper left", frameon=False)
    return figure


#: file name (captioned in bench.report.FIGURE_TITLES) -> renderer
BENCH_FIGURES: dict[str, Callable[[dict[str, Any]], Figure]] = {
    "bench-latency.svg": latency,
    "bench-movement.svg": movement,
    "bench-writes.svg": writes,
}


def render_bench(results: dict[str, Any], out_dir: Path = FIGURES) -> list[Path]:
    """Every benchmark figure into ``out_dir``; returns the files written."""
    return [save_svg(make(results), out_dir / name) for name, make in BENCH_FIGURES.items()]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.figures", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--results", type=Path, default=REPO / "bench" / "results.json")
    p.add_argument("--out", type=Path, default=FIGURES)
    args = p.parse_args(argv)
    for path in render_bench(json.loads(args.results.read_text()), args.out):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
