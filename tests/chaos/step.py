"""What one campaign step is made of: composable fault :class:`Action`\\ s, the :class:`FaultRecord` of
each fault injected, and the :class:`StepResult` that the checks fill in."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Verdicts = list[tuple[str, str]]  # (violation category, message)


@dataclass
class FaultRecord:
    kind: str
    target: str
    start_ns: int
    heal_ns: int
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "target": self.target, "start_ns": self.start_ns, "heal_ns": self.heal_ns,
                "hold_s": round((self.heal_ns - self.start_ns) / 1e9, 3), "detail": self.detail}


@dataclass
class Action:
    """A composable fault: ``inject`` at ``offset`` seconds into the step, ``heal`` ``hold`` seconds later."""

    kind: str
    target: str
    inject: Callable[[], str]
    heal: Callable[[], str | None] | None = None  # may return more detail for the fault's record
    hold: float = 0.0
    offset: float = 0.0
    extra: list[FaultRecord] | None = None  # an action made of several faults reports them here
    settle: Callable[[], None] | None = None  # after every heal: wait until this fault is really over
    verify: Callable[[], Verdicts] | None = None  # after recovery: checks of this fault's own
    cleanup: Callable[[], str | None] | None = None  # after the checks: undo what the fault left behind


@dataclass
class StepResult:
    index: int
    phase: str
    kind: str
    seed: str
    faults: list[FaultRecord] = field(default_factory=list)
    first_fault_ns: int = 0
    heal_ns: int = 0
    recovered: bool = False
    ttr_fault: float | None = None  # recovery measured from the first fault's injection
    ttr_heal: float | None = None  # recovery measured from the last heal (checked against the bound)
    stall: float = 0.0  # seconds the host was measured stalled between the first fault and recovery
    over_strict_bound: bool = False  # recovery after the bound, before adding the measured stall
    late_start: float = 0.0  # seconds a process started in the step took to start beyond the usual (see Fleet)
    violations: list[tuple[str, str]] = field(default_factory=list)  # (category, message)
    notes: list[str] = field(default_factory=list)
    duration: float = 0.0
    started_at: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%S"))  # local wall clock
    # Not part of the record: the step's own checks (run after recovery), then its cleanups.
    verifiers: list[Callable[[], Verdicts]] = field(default_factory=list, repr=False)
    cleanups: list[Callable[[], str | None]] = field(default_factory=list, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index, "phase": self.phase, "kind": self.kind, "seed": self.seed,
            "faults": [f.to_dict() for f in self.faults], "recovered": self.recovered,
            "ttr_fault_s": self.ttr_fault, "ttr_heal_s": self.ttr_heal, "stall_s": round(self.stall, 3),
            "late_start_s": round(self.late_start, 3),
            "over_strict_bound": self.over_strict_bound,
            "violations": [{"category": c, "message": m} for c, m in self.violations],
            "notes": self.notes, "duration_s": round(self.duration, 2), "started_at": self.started_at,
        }


def run_actions(actions: list[Action]) -> list[FaultRecord]:
    """Runs injects and heals on one timeline; every injected fault is healed, whatever happens."""
    t0 = time.monotonic()
    timeline: list[tuple[float, int, int]] = []  # (when, 0=inject/1=heal, action index)
    for i, action in enumerate(actions):
        timeline.append((action.offset, 0, i))
        timeline.append((action.offset + action.hold, 1, i))
    timeline.sort()
    records: dict[int, FaultRecord] = {}
    try:
        for when, phase, i in timeline:
            delay = t0 + when - time.monotonic()
            if delay > 0:
                time.sleep(delay)  # holding the fault for its duration
            action = actions[i]
            if phase == 0:
                start = time.monotonic_ns()
                detail = action.inject()
                records[i] = FaultRecord(action.kind, action.target, start, start, detail)
            elif i in records:
                more = action.heal() if action.heal is not None else None
                records[i].heal_ns = time.monotonic_ns()
                if more:
                    records[i].detail += f"; {more}"
    finally:
        for i, action in enumerate(actions):  # an exception half-way must not leave a fault behind
            if i in records and records[i].heal_ns == records[i].start_ns and action.heal is not None:
                try:
                    action.heal()
                except Exception:
                    pass
    for i, action in enumerate(actions):
        if i in records and action.settle is not None:
            action.settle()
            records[i].heal_ns = time.monotonic_ns()
    out = []
    for i in sorted(records):
        extra = actions[i].extra
        out += extra if extra is not None else [records[i]]
    return out
