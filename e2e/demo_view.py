"""What the demo shows: the ResourceGroup's status (or the group read from ZooKeeper) as a terminal frame.

The preferred source is ``kubectl get rg -o json``, i.e. the status the operator writes; while it is
still empty (or without a control plane) the group is read with ``rebalanser status --json`` and the
frame says so.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TextIO

from e2e.demo_stack import BIN, GROUP, GROUP_PATH, NAMESPACE
from e2e.lab.cluster import Cluster

RG_SOURCE = f"ResourceGroup status (kubectl get rg {GROUP} -n {NAMESPACE} -o json), written by the operator"
CLI_SOURCE = f"rebalanser status --json (read from ZooKeeper {GROUP_PATH})"


def natural(name: str) -> list[Any]:
    """Sort key: orders-2 before orders-10."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


@dataclass
class Snapshot:
    source: str
    phase: str | None = None
    coordinator: str | None = None
    epoch: int | None = None
    member_count: int = 0
    members: list[str] = field(default_factory=list)
    resources: int = 0
    assigned: int = 0
    unassigned: list[str] = field(default_factory=list)
    assignments: dict[str, list[str]] = field(default_factory=dict)
    last_rebalance: dict[str, Any] | None = None
    interval: float | None = None  # the operator's effective rebalance interval
    ready: str | None = None
    error: str | None = None

    @property
    def complete(self) -> bool:
        """Every resource assigned to a live member."""
        return self.error is None and self.resources > 0 and self.assigned == self.resources and not self.unassigned

    def owners(self) -> list[str]:
        """Members that own resources, plus members listed without any."""
        names = list(self.assignments) + [m for m in self.members if m not in self.assignments]
        return sorted(names, key=natural)


def from_resource_group(rg: dict[str, Any]) -> Snapshot | None:
    """The operator's status, or None while it has not written the group's view yet."""
    status = rg.get("status") or {}
    if "members" not in status or "resources" not in status:
        return None
    ready = next((c for c in status.get("conditions", []) if c.get("type") == "Ready"), None)
    return Snapshot(
        source=RG_SOURCE, phase=status.get("phase"), coordinator=status.get("coordinator"),
        epoch=status.get("epoch"), member_count=int(status.get("members", 0)),
        resources=int(status.get("resources", 0)), assigned=int(status.get("assigned", 0)),
        unassigned=list(status.get("unassigned", [])), assignments=dict(status.get("assignments", {})),
        last_rebalance=status.get("lastRebalance"), interval=status.get("effectiveIntervalSeconds"),
        ready=f"Ready={ready['status']} ({ready.get('reason', '')}): {ready.get('message', '')}" if ready else None,
    )


def from_cli(data: dict[str, Any], note: str = "") -> Snapshot:
    members = list(data.get("members", []))
    return Snapshot(
        source=CLI_SOURCE + note, coordinator=data.get("coordinator"), epoch=data.get("epoch"),
        member_count=len(members), members=members, resources=int(data.get("resources", 0)),
        assigned=int(data.get("assigned", 0)), unassigned=list(data.get("unassigned", [])),
        assignments=dict(data.get("assignments", {})), last_rebalance=data.get("lastRebalance"),
    )


@dataclass
class StatusSource:
    hosts: str
    cluster: Cluster | None
    operator_alive: Callable[[], bool] = lambda: True

    def read(self) -> Snapshot:
        note = ""
        if self.cluster is not None and not self.operator_alive():
            note = "; the operator exited (see operator.log), its status would be stale"
        elif self.cluster is not None:
            rg = self._resource_group()
            snapshot = from_resource_group(rg) if rg is not None else None
            if snapshot is not None:
                return snapshot
            note = "; the ResourceGroup status is still empty" if rg is not None else "; kubectl get rg failed"
        return self._cli(note)

    def _resource_group(self) -> dict[str, Any] | None:
        assert self.cluster is not None
        try:
            proc = self.cluster.run_kubectl("get", "rg", GROUP, "-n", NAMESPACE, "-o", "json", check=False, timeout=10)
        except subprocess.TimeoutExpired:
            return None
        if proc.returncode != 0:
            return None
        result: dict[str, Any] = json.loads(proc.stdout)
        return result

    def _cli(self, note: str) -> Snapshot:
        cmd = [str(BIN / "rebalanser"), "status", "--zk", self.hosts, "--group", GROUP_PATH, "--json"]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=15, check=False,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return Snapshot(source=CLI_SOURCE + note, error="rebalanser status timed out")
        if proc.returncode != 0:
            return Snapshot(source=CLI_SOURCE + note, error=(proc.stderr or proc.stdout).strip()[-300:])
        return from_cli(json.loads(proc.stdout), note)


# ------------------------------------------------------------------------------------------ rendering


@dataclass(frozen=True)
class WorkerRow:
    member_id: str
    pid: int | None
    state: str  # running | KILLED (SIGKILL) | ...


def _clock(stamp: str | None) -> str:
    if not stamp:
        return "-"
    try:
        return datetime.fromisoformat(stamp).astimezone().strftime("%H:%M:%S.%f")[:-3]
    except ValueError:
        return stamp


def describe_rebalance(last: dict[str, Any] | None) -> str:
    if not last:
        return "none yet"
    parts = [f"generation {last.get('generation', '?')}", f"completed {_clock(last.get('completedAt'))}"]
    if last.get("durationMs") is not None:
        parts.append(f"took {float(last['durationMs']):.0f} ms")
    if last.get("moved") is not None:
        parts.append(f"moved {last['moved']}")
    return ", ".join(parts)


def render(snapshot: Snapshot, workers: list[WorkerRow], events: list[str]) -> list[str]:
    """The frame body (no timer line, so unchanged frames compare equal)."""
    s = snapshot
    lines = [f"source: {s.source}"]
    if s.error:
        return [*lines, f"error: {s.error}", "", "events:", *[f"  {e}" for e in events[-10:]]]
    lines += [
        f"phase {s.phase or '-'}   coordinator {s.coordinator or '-'}   epoch {s.epoch if s.epoch is not None else '-'}"
        f"   members {s.member_count}   resources {s.resources}   assigned {s.assigned}"
        f"   unassigned {len(s.unassigned)}",
        f"last rebalance: {describe_rebalance(s.last_rebalance)}"
        + (f"   effective interval {s.interval:g}s" if s.interval is not None else ""),
    ]
    if s.ready:
        lines.append(s.ready)
    lines += ["", f"  {'member':<12} {'pid':>7}  {'process':<20} resources"]
    lines += _member_lines(s, workers)
    lines += [f"  unassigned: {' '.join(sorted(s.unassigned, key=natural)) or '-'}", "", "events:"]
    lines += [f"  {e}" for e in events[-10:]]
    return lines


def _member_lines(s: Snapshot, workers: list[WorkerRow]) -> list[str]:
    rows = {w.member_id: w for w in workers}
    names = sorted(set(rows) | set(s.owners()), key=natural)
    lines = []
    for name in names:
        row = rows.get(name, WorkerRow(name, None, "-"))
        owned = sorted(s.assignments.get(name, []), key=natural)
        mark = "*" if name == s.coordinator else " "
        pid = str(row.pid) if row.pid else "-"
        lines.append(f"  {name + ' ' + mark:<12} {pid:>7}  {row.state:<20} {len(owned):>2}: {' '.join(owned) or '-'}")
    lines.append("  (* = coordinator)")
    return lines


class Screen:
    """A TTY gets the frame redrawn in place; anything else gets a snapshot appended when it changes."""

    CLEAR = "\033[H\033[2J"

    def __init__(self, out: TextIO = sys.stdout, tty: bool | None = None, heartbeat: float = 10.0) -> None:
        self.out = out
        self.tty = out.isatty() if tty is None else tty
        self.heartbeat = heartbeat
        self._last_body: list[str] = []
        self._last_print = 0.0

    def event(self, line: str) -> None:
        if not self.tty:
            self._write(f"event: {line}\n")

    def frame(self, title: str, body: list[str]) -> None:
        now = time.monotonic()
        if self.tty:
            self._write(self.CLEAR + "\n".join([title, "", *body]) + "\n")
            return
        if body == self._last_body and now - self._last_print < self.heartbeat:
            return
        self._last_body, self._last_print = body, now
        self._write("\n".join([f"---- {title}", *body]) + "\n")

    def _write(self, text: str) -> None:
        try:
            self.out.write(text)
            self.out.flush()
        except OSError:  # the terminal went away; the demo still runs to its clean-up
            pass
