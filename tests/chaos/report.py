"""Summaries of campaign steps, and the report (``docs/chaos-report.json`` and ``docs/chaos-report.md``)."""

from __future__ import annotations

import json
import math
import time
from collections import Counter
from pathlib import Path
from typing import Any

CATEGORIES = ("overlap", "token", "liveness", "leak", "crash", "shutdown", "unreported", "duplicate")
# Fault kinds of the classes added for the administrator's hands, reconnects and duplicate ids.
NEW_CLASS_KINDS = frozenset({"reconnect-tamper", "tamper-group", "tamper-resources", "tamper-epoch", "tamper-garbage",
                             "tamper-stale", "fake-member", "fake-claim", "duplicate-id", "zk-follower-isolate"})
CATEGORY_TEXT = {
    "overlap": "two workers on one resource at once (invariant 1)",
    "token": "fencing token not increasing",
    "liveness": "not every resource worked on by exactly one live worker, balanced, within the bound (invariant 2)",
    "leak": "leaked ephemeral node / ghost member / stale claim in ZooKeeper",
    "crash": "worker process died on its own",
    "shutdown": "worker did not exit on SIGTERM",
    "unreported": "garbage read from ZooKeeper without an `error` event naming its znode",
    "duplicate": "a second worker with a live member's id worked, or did not exit with code 2 in time",
}


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in [0, 100])."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return round(ordered[rank - 1], 3)


def summarise(target: str, steps: list[dict[str, Any]], meta: dict[str, Any]) -> dict[str, Any]:
    faults = Counter(f["kind"] for s in steps for f in s["faults"])
    step_kinds = Counter(s["kind"] for s in steps)
    by_category: Counter[str] = Counter()
    by_step_kind: Counter[str] = Counter()
    steps_with: Counter[str] = Counter()
    samples: list[dict[str, Any]] = []
    for s in steps:
        cats = {v["category"] for v in s["violations"]}
        for cat in cats:
            steps_with[cat] += 1
        for v in s["violations"]:
            by_category[v["category"]] += 1
            by_step_kind[s["kind"]] += 1
            if len(samples) < 40:
                samples.append({"step": s["index"], "phase": s["phase"], "kind": s["kind"], "seed": s["seed"],
                                "category": v["category"], "message": v["message"][:600]})
    ttr: dict[str, dict[str, Any]] = {}
    for kind in sorted(step_kinds):
        mine = [s for s in steps if s["kind"] == kind and s["ttr_fault_s"] is not None]
        from_fault = [s["ttr_fault_s"] for s in mine]
        after_heal = [s["ttr_heal_s"] for s in mine]
        ttr[kind] = {
            "n": len(mine),
            "from_fault_p50": percentile(from_fault, 50), "from_fault_p99": percentile(from_fault, 99),
            "after_heal_p50": percentile(after_heal, 50), "after_heal_p99": percentile(after_heal, 99),
            "after_heal_max": round(max(after_heal), 3) if after_heal else None,
        }
    all_heal = [s["ttr_heal_s"] for s in steps if s["ttr_heal_s"] is not None]
    all_fault = [s["ttr_fault_s"] for s in steps if s["ttr_fault_s"] is not None]
    phases = Counter(s["phase"] for s in steps)
    starts = [min(f["start_ns"] for f in s["faults"]) for s in steps if s["faults"]]
    origin = min(starts) if starts else 0
    # [seconds into the campaign, step kind, time to recover after the heal, violations] per step
    timeline = [[round((min(f["start_ns"] for f in s["faults"]) - origin) / 1e9, 1), s["kind"], s["ttr_heal_s"],
                 len(s["violations"])] for s in steps if s["faults"]]
    phase_faults = Counter(s["phase"] for s in steps for _ in s["faults"])
    return {
        **meta,
        "target": target,
        "steps": len(steps),
        "faults_total": sum(faults.values()),
        "faults_excluding_churn": sum(n for k, n in faults.items() if k != "resource-churn"),
        "faults_new_classes": sum(n for k, n in faults.items() if k in NEW_CLASS_KINDS),
        "faults_by_kind": dict(sorted(faults.items())),
        "steps_by_kind": dict(sorted(step_kinds.items())),
        "topologies": {p: {"steps": phases[p], "faults": phase_faults[p]} for p in sorted(phases)},
        "violations_total": sum(by_category.values()),
        "violations_by_category": {c: by_category.get(c, 0) for c in CATEGORIES},
        "steps_with_violation": {c: steps_with.get(c, 0) for c in CATEGORIES},
        "violations_by_step_kind": dict(sorted(by_step_kind.items())),
        "timeline": timeline,
        "violation_samples": samples,
        "ttr_by_step_kind": ttr,
        "ttr_overall": {
            "n": len(all_heal),
            "from_fault_p50": percentile(all_fault, 50), "from_fault_p99": percentile(all_fault, 99),
            "after_heal_p50": percentile(all_heal, 50), "after_heal_p99": percentile(all_heal, 99),
            "after_heal_max": round(max(all_heal), 3) if all_heal else None,
        },
        "unrecovered_steps": sum(1 for s in steps if not s["recovered"]),
        "over_strict_bound_steps": sum(1 for s in steps if s.get("over_strict_bound")),
        "stall_s_total": round(sum(s.get("stall_s", 0.0) for s in steps), 1),
        "stall_s_max": round(max([s.get("stall_s", 0.0) for s in steps], default=0.0), 2),
    }


def write_report(report_dir: Path, results: dict[str, dict[str, Any]], merge: bool) -> tuple[Path, Path]:
    report_dir.mkdir(parents=True, exist_ok=True)
    json_path, md_path = report_dir / "chaos-report.json", report_dir / "chaos-report.md"
    targets: dict[str, Any] = {}
    if merge and json_path.exists():
        targets.update(json.loads(json_path.read_text()).get("targets", {}))
    targets.update(results)
    order = [t for t in ("resource-barrier", "global-barrier", "kazoo") if t in targets]
    doc = {"generated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "targets": {t: targets[t] for t in order}}
    json_path.write_text(json.dumps(doc, indent=1) + "\n")
    md_path.write_text(render_markdown(doc) + cluster_section(report_dir) + explore_section(report_dir))
    from tests.chaos.figures import render  # matplotlib: only when a campaign writes its report

    render(doc, report_dir / "figures")
    return json_path, md_path


def cluster_section(report_dir: Path) -> str:
    """The real-cluster part of the campaign (``tests.chaos.realcluster``), from ``chaos-cluster.json``."""
    from tests.chaos.realcluster import markdown_lines

    path = report_dir / "chaos-cluster.json"
    if not path.exists():
        return ""
    return "\n" + "\n".join(markdown_lines(json.loads(path.read_text()))) + "\n"


def explore_section(report_dir: Path) -> str:
    """The every-request explorer's part (``tests.chaos.explore``), from ``chaos-explore.json``."""
    from tests.chaos.explore import markdown_lines

    path = report_dir / "chaos-explore.json"
    if not path.exists():
        return ""
    return "\n" + "\n".join(markdown_lines(json.loads(path.read_text())))


def _share(t: dict[str, Any]) -> str:
    new = t.get("faults_new_classes")
    if new is None:
        return "-"
    return f"{new} ({100 * new / t['faults_total']:.0f} %)" if t["faults_total"] else "0"


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def render_markdown(doc: dict[str, Any]) -> str:
    targets: dict[str, Any] = doc["targets"]
    lines = [
        "# Chaos campaign report",
        "",
        f"Generated {doc['generated']} by `make chaos` (`python -m tests.chaos.campaign`); how the harness works, "
        "the fault kinds and the checks are described in [chaos.md](chaos.md). Machine-readable: "
        "[chaos-report.json](chaos-report.json).",
        "",
        "![Faults and time to recover per fault class](figures/chaos-timeline.svg)",
        "",
        "## Summary",
        "",
        "| target | seed | minutes | steps | faults (without churn) | new classes | overlaps | token | liveness | "
        "leaks | crashes | other | TTR after heal p50 / p99 / max (s) | bound (s) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, t in targets.items():
        v = t["violations_by_category"]
        o = t["ttr_overall"]
        token = "n/a" if name == "kazoo" else str(v["token"])
        other = sum(v.get(c, 0) for c in ("shutdown", "unreported", "duplicate"))
        lines.append(
            f"| {name} | {t['seed']} | {t.get('duration_s', t['minutes'] * 60) / 60:.0f} | {t['steps']} | "
            f"{t['faults_total']} ({t.get('faults_excluding_churn', '?')}) | {_share(t)} | {v['overlap']} | "
            f"{token} | {v['liveness']} | {v['leak']} | {v['crash']} | {other} | "
            f"{_fmt(o['after_heal_p50'])} / {_fmt(o['after_heal_p99'])} / {_fmt(o['after_heal_max'])} | "
            f"{t['settings']['bound_s']:.1f} |"
        )
    lines += [
        "",
        "Counts are violations found by the checkers (several may come from one step: e.g. one paused kazoo "
        "worker overlaps on each of its resources). *TTR* (time to reassign) is measured from the workers' "
        "evidence: the instant the last resource's final owner began working on it, counted from the last "
        "heal of the step (checked against the bound) and from the first fault's injection. Each resource-churn "
        "operation (an add, delete or delete-and-re-create) counts as one fault; the count without them is in "
        "parentheses. *New classes*: faults of the kinds that model an administrator's hands (tampering, fakes, "
        "a reconnect followed by tampering), duplicate member ids and server-to-server partitions, with their share "
        "of all faults. *Other*: shutdown, unreported bad data and duplicate-id violations. With about 10-25 steps "
        "per kind, a p99 is close to that kind's maximum.",
        "",
    ]
    for name, t in targets.items():
        lines += _target_section(name, t)
    return "\n".join(lines) + "\n"


def _target_section(name: str, t: dict[str, Any]) -> list[str]:
    s = t["settings"]
    runs = t.get("runs") or [{"seed": t["seed"], "minutes": t["minutes"]}]
    command = "python -m tests.chaos.campaign"
    replay = ", ".join(f"`{command} --seed {r['seed']} --targets {name} --minutes {r['minutes']:g}`" for r in runs)
    lines = [
        f"## {name}",
        "",
        f"Seed `{t['seed']}` (replay: {replay}), {t['duration_s'] / 60:.1f} minutes, "
        f"{t['steps']} steps, **{t['faults_total']} faults** ({_share(t)} of the new classes), "
        f"**{t['violations_total']} violations**. "
        f"{s['workers']} workers, {s['resources']} resources (churn varies them), session timeout "
        f"{s['session_timeout']} s, rebalance interval {s['interval']} s, tick {s['tick']} s, stop timeout "
        f"{s['stop_timeout']} s, slow stop callback {s['slow_delay']} s, bound {s['bound_s']:.1f} s.",
        "",
        "Topologies: " + ", ".join(f"{p}: {v['steps']} steps / {v['faults']} faults"
                                   for p, v in t["topologies"].items()) + ".",
        "",
        f"Host stalls measured by the harness (the machine is shared): {t.get('stall_s_total', 0):.1f} s in "
        f"total, at most {t.get('stall_s_max', 0):.1f} s in one step. Steps that recovered later than the "
        f"bound *before* adding the stall measured during them: {t.get('over_strict_bound_steps', 0)} of "
        f"{t['steps']}; steps that did not recover at all: {t.get('unrecovered_steps', 0)}.",
        "",
    ]
    if t.get("notes"):
        lines += [f"- {note}" for note in t["notes"]] + [""]
    lines += ["| fault kind | count |", "|---|---|"]
    lines += [f"| {k} | {n} |" for k, n in t["faults_by_kind"].items()]
    lines += ["", "| step kind | steps | violations | TTR from fault p50 / p99 (s) | "
                  "TTR after heal p50 / p99 / max (s) |", "|---|---|---|---|---|"]
    for kind, n in t["steps_by_kind"].items():
        r = t["ttr_by_step_kind"].get(kind, {})
        lines.append(
            f"| {kind} | {n} | {t['violations_by_step_kind'].get(kind, 0)} | "
            f"{_fmt(r.get('from_fault_p50'))} / {_fmt(r.get('from_fault_p99'))} | "
            f"{_fmt(r.get('after_heal_p50'))} / {_fmt(r.get('after_heal_p99'))} / {_fmt(r.get('after_heal_max'))} |"
        )
    lines += ["", "| violation | count | steps |", "|---|---|---|"]
    for cat in CATEGORIES:
        if name == "kazoo" and cat == "token":
            lines.append(f"| {cat}: {CATEGORY_TEXT[cat]} | not checked (no token) | - |")
            continue
        lines.append(f"| {cat}: {CATEGORY_TEXT[cat]} | {t['violations_by_category'].get(cat, 0)} | "
                     f"{t['steps_with_violation'].get(cat, 0)} |")
    if t["violation_samples"]:
        lines += ["", "First violations (step, phase, kind, seed — replay with the seed above):", ""]
        for v in t["violation_samples"][:12]:
            lines.append(f"- step {v['step']} ({v['phase']}, {v['kind']}, `{v['seed']}`) **{v['category']}**: "
                         f"{v['message'][:300]}")
    lines.append("")
    return lines


def combine(runs: list[tuple[dict[str, Any], list[dict[str, Any]]]]) -> dict[str, Any]:
    """One target's summary over several campaign runs of it: ``(its report entry, its steps)`` each.
    Steps are renumbered in run order; seeds, minutes and notes are joined."""
    steps: list[dict[str, Any]] = []
    for _, run_steps in runs:
        steps += [{**s, "index": len(steps) + i} for i, s in enumerate(run_steps)]
    first = runs[0][0]
    meta = {
        "seed": ", ".join(str(entry["seed"]) for entry, _ in runs),
        "minutes": round(sum(float(entry["minutes"]) for entry, _ in runs), 1),
        "duration_s": round(sum(float(entry["duration_s"]) for entry, _ in runs), 1),
        "settings": first.get("settings", {}),
        "notes": [n for entry, _ in runs for n in entry.get("notes", [])],
        "runs": [{"seed": entry["seed"], "minutes": entry["minutes"]} for entry, _ in runs],
    }
    return summarise(str(first["target"]), steps, meta)


def _load_run(report: Path) -> list[tuple[str, dict[str, Any], list[dict[str, Any]]]]:
    """A campaign's report and, beside its per-step records (``<workdir>/<target>/steps.jsonl``, named by
    the report's ``workdir`` note or found next to the report), each target's steps."""
    found = []
    for target, entry in json.loads(report.read_text())["targets"].items():
        records = report.parent.parent / report.parent.name.removesuffix("-report") / target / "steps.jsonl"
        lines = records.read_text().splitlines() if records.exists() else []
        found.append((target, entry, [json.loads(line) for line in lines if line.strip()]))
    return found


def main(argv: list[str] | None = None) -> int:
    """Merges the targets of several campaign reports (e.g. one run per target) into one report; with
    ``--combine``, several runs of one target are summarised together from their per-step records."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m tests.chaos.report", description=main.__doc__)
    p.add_argument("reports", nargs="+", type=Path, help="chaos-report.json files; later ones win per target")
    p.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[2] / "docs")
    p.add_argument("--combine", action="store_true",
                   help="summarise runs of the same target together (each report's steps.jsonl lies in "
                        "the workdir named like the report dir without '-report')")
    args = p.parse_args(argv)
    results: dict[str, dict[str, Any]] = {}
    if args.combine:
        runs: dict[str, list[tuple[dict[str, Any], list[dict[str, Any]]]]] = {}
        for path in args.reports:
            for target, entry, steps in _load_run(path):
                runs.setdefault(target, []).append((entry, steps))
        # A report without its per-step records (an earlier campaign, e.g. the baseline's) is kept whole.
        results = {target: target_runs[0][0] if len(target_runs) == 1 and not target_runs[0][1]
                   else combine(target_runs) for target, target_runs in runs.items()}
    for path in [] if args.combine else args.reports:
        results.update(json.loads(path.read_text())["targets"])
    json_path, md_path = write_report(args.out, results, merge=False)
    print(f"report: {md_path} {json_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
