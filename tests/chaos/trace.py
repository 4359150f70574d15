"""Conformance traces (docs/protocol.md, "Conformance"): a run's worker event streams as model events.

Each run directory the explorer (``runs/NNNN-*``) or the campaign leaves holds one ``<worker>.jsonl`` per
worker process: the ``rebalanser worker --json`` events. This module merges them by ``ts`` (the host's
monotonic clock, shared by the processes) and writes the observable events the model's ``conform`` mode
matches: ``join M`` (order of first connection), ``start M R TOKEN`` per resource of an ``assigned``
event, ``stop M R`` per resource of a ``revoked`` event. Ticks, roles and session events are not mapped.

``python -m tests.chaos.trace RUN_DIR... --out DIR`` writes ``DIR/<run>.trace`` per run.
"""
from __future__ import annotations

import argparse
import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any


def events_of(run: Path) -> list[dict[str, Any]]:
    """Every worker event of one run, ordered by time."""
    out: list[dict[str, Any]] = []
    for stream in sorted(run.glob("*.jsonl")):
        for line in stream.read_text().splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut short by a kill
            if isinstance(record, dict) and "event" in record and "ts" in record:
                out.append(record)
    return sorted(out, key=lambda e: int(e["ts"]))


def trace_lines(events: Iterable[dict[str, Any]], algo: str = "resource") -> Iterator[str]:
    yield f"algo {algo}"
    joined: set[str] = set()
    for e in events:
        member, kind = str(e.get("id")), e["event"]
        if member not in joined and kind in ("session", "role", "assigned"):
            joined.add(member)
            yield f"join {member}"
        if kind == "assigned":
            for resource in e.get("resources", []):
                yield f"start {member} {resource} {e.get('token')}"
        elif kind == "revoked":
            for resource in e.get("resources", []):
                yield f"stop {member} {resource}"


def export(run: Path, out: Path) -> Path:
    algo = "global" if "global" in run.name else "resource"
    target = out / f"{run.name}.trace"
    target.write_text("\n".join(trace_lines(events_of(run), algo)) + "\n")
    return target


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("runs", nargs="+", type=Path)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for run in args.runs:
        if run.is_dir() and any(run.glob("*.jsonl")):
            print(export(run, args.out))


if __name__ == "__main__":
    main()
