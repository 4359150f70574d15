"""The campaign timeline of ``docs/chaos-report.json`` as SVG (matplotlib, the ``bench`` extra).

Per fault class and target: how many faults were injected and how long the group took to recover
after the fault was healed (p50, bar to the maximum). When the report carries the per-step
``timeline`` (campaigns since it was added), a panel beneath shows every step at its time in the
campaign, its size the time to recover and a cross where a step had a violation.

``python -m tests.chaos.figures`` renders it from the committed report.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from matplotlib import pyplot as plt
from matplotlib.figure import Figure

from bench.figures import FIGURES, REPO, save_svg, style

TARGET_COLOURS = {"resource-barrier": "#1f77b4", "global-barrier": "#2ca02c", "kazoo": "#d62728"}
CHAOS_FIGURE = "chaos-timeline.svg"


def _colour(target: str) -> str:
    return TARGET_COLOURS.get(target, "#7f7f7f")


def timeline(report: dict[str, Any]) -> Figure:
    """Faults and time to recover per fault class, per target (and per step, where recorded)."""
    style()
    targets: dict[str, dict[str, Any]] = report.get("targets", {})
    kinds = sorted({k for t in targets.values() for k in t.get("ttr_by_step_kind", {})})
    steps = {name: t["timeline"] for name, t in targets.items() if t.get("timeline")}
    rows = 2 if steps else 1
    height = max(3.0, 0.28 * len(kinds) + 1.2)
    figure, axes = plt.subplots(rows, 2, figsize=(11, height * rows), squeeze=False,
                                gridspec_kw={"height_ratios": [1] * rows})
    count_ax, ttr_ax = axes[0]
    width = 0.8 / max(1, len(targets))
    positions = {k: i for i, k in enumerate(kinds)}
    for j, (name, t) in enumerate(targets.items()):
        offset = (j - (len(targets) - 1) / 2) * width
        counts = t.get("steps_by_kind", {})
        count_ax.barh([positions[k] + offset for k in kinds], [counts.get(k, 0) for k in kinds], height=width,
                      color=_colour(name), label=name)
        ttr = t.get("ttr_by_step_kind", {})
        shown = [k for k in kinds if ttr.get(k, {}).get("after_heal_p50") is not None]
        p50 = [ttr[k]["after_heal_p50"] for k in shown]
        top = [max(0.0, (ttr[k].get("after_heal_max") or ttr[k]["after_heal_p50"]) - ttr[k]["after_heal_p50"])
               for k in shown]
        ttr_ax.errorbar(p50, [positions[k] + offset for k in shown], xerr=[[0] * len(p50), top], fmt="o",
                        markersize=4, capsize=2, color=_colour(name), label=name)
    for ax in (count_ax, ttr_ax):
        ax.set_yticks(range(len(kinds)), kinds)
        ax.invert_yaxis()
    ttr_ax.set_yticklabels([])
    count_ax.set_xlabel("steps of this class")
    count_ax.set_title("Faults injected, by class")
    ttr_ax.set_xlabel("time to recover after the heal, s (p50, bar to max)")
    ttr_ax.set_title("Time to recover, by class")
    count_ax.legend(loc="lower right", frameon=False)
    if steps:
        gs = axes[1][0].get_gridspec()
        for ax in axes[1]:
            ax.remove()
        step_ax = figure.add_subplot(gs[1, :])
        for name, records in steps.items():
            xs = [r[0] / 60 for r in records]
            ys = [positions.get(r[1], -1) for r in records]
            sizes = [8 + 12 * (r[2] or 0) for r in records]
            step_ax.scatter(xs, ys, s=sizes, alpha=0.5, color=_colour(name), label=name)
            bad = [(x, y) for x, y, r in zip(xs, ys, records, strict=True) if r[3]]
            if bad:
                step_ax.scatter([x for x, _ in bad], [y for _, y in bad], marker="x", color="black", s=30)
        step_ax.set_yticks(range(len(kinds)), kinds)
        step_ax.invert_yaxis()
        step_ax.set_xlabel("minutes into the campaign (marker size: time to recover; x: violation)")
        step_ax.set_title("Every step")
    figure.suptitle(f"Chaos campaign, generated {report.get('generated', '?')}: "
                    + ", ".join(f"{n} {t.get('steps', 0)} steps, {t.get('violations_total', 0)} violations"
                                for n, t in targets.items()))
    figure.tight_layout()
    return figure


def render(report: dict[str, Any], out_dir: Path = FIGURES) -> Path:
    return save_svg(timeline(report), out_dir / CHAOS_FIGURE)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="tests.chaos.figures", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--report", type=Path, default=REPO / "docs" / "chaos-report.json")
    p.add_argument("--out", type=Path, default=FIGURES)
    args = p.parse_args(argv)
    print(render(json.loads(args.report.read_text()), args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
