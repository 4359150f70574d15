"""A group of bench worker processes (:mod:`bench.multiworker`) and what their JSON events prove.

The :class:`Ledger` is built only from the workers' own events (``assigned``/``revoked``/``ticks``/
``stopped``) plus the harness's knowledge of which processes it killed: who works on what right now,
since when, and when each resource was first worked on in its current ownership episode.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


@dataclass
class Episode:
    member: str
    assigned_ns: int
    worked_ns: int | None = None


class Ledger:
    """resource -> current ownership episode, from the evidence; thread-safe."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.current: dict[str, Episode] = {}
        self.load: Counter[str] = Counter()
        self.unworked = 0
        self.doubles = 0  # a resource assigned to a member while another still held it (must stay 0)
        self.last_change_ns = 0
        self.roles: dict[str, tuple[str, int, int]] = {}  # member -> (role, epoch, ts)
        self.sessions: dict[str, tuple[str, int]] = {}  # member -> (last state, ts)

    def _drop(self, resource: str) -> None:
        episode = self.current.pop(resource)
        self.load[episode.member] -= 1
        if self.load[episode.member] <= 0:
            del self.load[episode.member]
        if episode.worked_ns is None:
            self.unworked -= 1

    def apply(self, event: dict[str, Any]) -> None:
        kind, member, ts = event.get("event"), event.get("id", ""), int(event.get("ts", 0))
        with self.lock:
            if kind == "assigned":
                for r in event["resources"]:
                    held = self.current.get(r)
                    if held is not None:
                        if held.member != member:
                            self.doubles += 1
                        self._drop(r)
                    self.current[r] = Episode(member, ts)
                    self.load[member] += 1
                    self.unworked += 1
                self.last_change_ns = max(self.last_change_ns, ts)
            elif kind == "revoked":
                for r in event["resources"]:
                    held = self.current.get(r)
                    if held is not None and held.member == member:
                        self._drop(r)
                self.last_change_ns = max(self.last_change_ns, ts)
            elif kind == "ticks":
                for r in event["resources"]:
                    held = self.current.get(r)
                    if held is not None and held.member == member and held.worked_ns is None:
                        held.worked_ns = ts
                        self.unworked -= 1
            elif kind == "stopped":
                self._forget_locked({member})
            elif kind == "role":
                self.roles[member] = (event["role"], int(event["epoch"]), ts)
            elif kind == "session":
                self.sessions[member] = (event["state"], ts)
            else:
                return
            self.changed.notify_all()

    def forget(self, members: set[str]) -> None:
        """The members' process was killed: they work on nothing any more (they cannot say so)."""
        with self.lock:
            self._forget_locked(members)
            self.changed.notify_all()

    def _forget_locked(self, members: set[str]) -> None:
        for r in [r for r, e in self.current.items() if e.member in members]:
            self._drop(r)
        for m in members:
            self.roles.pop(m, None)

    def owners(self) -> dict[str, str]:
        with self.lock:
            return {r: e.member for r, e in self.current.items()}

    def settled(self, resources: int, members: set[str]) -> bool:
        """Every resource worked on by exactly one of ``members``, balanced, each member holding some."""
        with self.lock:
            if len(self.current) != resources or self.unworked:
                return False
            holders = set(self.load)
            if not holders <= members:
                return False
            if resources >= len(members) and holders != members:
                return False
            loads = [self.load.get(m, 0) for m in members]
            return max(loads) - min(loads) <= 1

    def coverage_ns(self, since_ns: int) -> tuple[int, int]:
        """(the instant every resource had been worked on by its current owner, resources restarted):
        episodes that began before ``since_ns`` count as covered at ``since_ns``."""
        with self.lock:
            latest = since_ns
            restarted = 0
            for e in self.current.values():
                if e.assigned_ns >= since_ns:
                    restarted += 1
                    latest = max(latest, e.worked_ns or 0)
            return latest, restarted

    def coordinator(self) -> str | None:
        with self.lock:
            best = [(epoch, m) for m, (role, epoch, _) in self.roles.items() if role == "coordinator"]
        return max(best)[1] if best else None


@dataclass
class Proc:
    label: str
    members: list[str]
    popen: subprocess.Popen[str]
    started_ns: int
    stats: list[dict[str, Any]] = field(default_factory=list)
    ready: threading.Event = field(default_factory=threading.Event)
    loaded: threading.Event = field(default_factory=threading.Event)  # waiting for the go file
    loaded_cpu: float = 0.0  # CPU seconds it had used by then (interpreter start-up, imports)
    reader: threading.Thread | None = None
    killed: bool = False

    @property
    def alive(self) -> bool:
        return self.popen.poll() is None and not self.killed

    @property
    def solo(self) -> bool:
        return len(self.members) == 1


@dataclass
class FleetConfig:
    impl: str  # rebalanser | kazoo
    hosts: str
    group: str
    algorithm: str = "resource-barrier"
    session_timeout: float = 2.0
    min_interval: float = 1.0
    tick: float = 0.05
    log_dir: Path = Path("/tmp")
    initial_quiet: float | None = None  # rebalanser's start-up window; None: the library's default
    keep_events: bool = False  # also write every worker's raw event lines to log_dir/<label>.jsonl
    python: str = sys.executable  # the workers' interpreter (bench.compare: another ref's virtualenv)
    trace: bool = False  # the workers' zk and notified events (bench.split), every event kept in Fleet.events


class Fleet:
    """Spawns, signals and kills bench worker processes; feeds their events into one ledger."""

    def __init__(self, config: FleetConfig) -> None:
        self.config = config
        self.ledger = Ledger()
        self.procs: list[Proc] = []
        self.lock = threading.Lock()
        self.stats_changed = threading.Condition()
        self.stats_missed: Counter[str] = Counter()  # label -> snapshots it did not answer in time
        self.events: list[dict[str, Any]] = []  # with config.trace: every event of every process, as read
        self._seq = 0

    # -- processes -----------------------------------------------------------------------------

    def spawn(self, members: list[str], label: str | None = None, go: Path | None = None,
              start_at: list[float] | None = None) -> Proc:
        """``go``: the members start once the harness has written a wall-clock instant into this file,
        each ``start_at`` seconds after it (default: at once)."""
        c = self.config
        label = label or members[0]
        self._seq += 1
        err = open(c.log_dir / f"{label}.{self._seq}.err", "w")  # noqa: SIM115 - owned by the child
        args = [
            c.python, "-m", "bench.multiworker", "--impl", c.impl, "--zk", c.hosts, "--group", c.group,
            "--ids", ",".join(members), "--label", label, "--algorithm", c.algorithm,
            "--session-timeout", str(c.session_timeout), "--min-interval", str(c.min_interval),
            "--tick", str(c.tick),
        ]
        if c.initial_quiet is not None:
            args += ["--initial-quiet", str(c.initial_quiet)]
        if c.trace:
            args.append("--trace")
        if go is not None:
            args += ["--go", str(go)]
        if start_at:
            args += ["--start-at", ",".join(f"{t:.3f}" for t in start_at)]
        popen = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL, text=True, cwd=REPO,
            env={**os.environ, "PYTHONUNBUFFERED": "1"}, bufsize=1 << 20,
        )
        err.close()
        proc = Proc(label, members, popen, time.monotonic_ns())
        proc.reader = threading.Thread(target=self._read, args=(proc,), daemon=True)
        proc.reader.start()
        with self.lock:
            self.procs.append(proc)
        return proc

    def _read(self, proc: Proc) -> None:
        assert proc.popen.stdout is not None
        tee = open(self.config.log_dir / f"{proc.label}.jsonl", "a") if self.config.keep_events else None  # noqa: SIM115
        for line in proc.popen.stdout:
            if tee is not None:
                tee.write(line)
            try:
                event = json.loads(line)
            except ValueError:
                continue
            kind = event.get("event")
            if self.config.trace:
                with self.lock:
                    self.events.append(event)
            if kind == "stats":
                with self.stats_changed:
                    proc.stats.append(event)
                    self.stats_changed.notify_all()
            elif kind == "ready":
                proc.ready.set()
            elif kind == "loaded":
                proc.loaded_cpu = float(event.get("cpu", 0.0))
                proc.loaded.set()
            elif not proc.killed:
                self.ledger.apply(event)
        if tee is not None:
            tee.close()

    def live(self) -> list[Proc]:
        with self.lock:
            return [p for p in self.procs if p.alive]

    def members(self) -> set[str]:
        return {m for p in self.live() for m in p.members}

    def proc_of(self, member: str) -> Proc | None:
        return next((p for p in self.live() if member in p.members), None)

    def kill(self, proc: Proc) -> int:
        """kill -9; returns the monotonic instant just before the signal."""
        ts = time.monotonic_ns()
        proc.killed = True
        proc.popen.send_signal(signal.SIGKILL)
        proc.popen.wait(30)
        self.ledger.forget(set(proc.members))
        return ts

    def terminate(self, proc: Proc) -> int:
        """Graceful leave (SIGTERM); returns the monotonic instant just before the signal."""
        ts = time.monotonic_ns()
        proc.popen.send_signal(signal.SIGTERM)
        return ts

    def reap(self, proc: Proc, timeout: float = 60) -> None:
        try:
            proc.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill(proc)
        if proc.reader is not None:
            proc.reader.join(10)

    def stop_all(self) -> None:
        procs = self.live()
        for p in procs:
            try:
                p.popen.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
        for p in procs:
            self.reap(p, 60)

    # -- waiting -------------------------------------------------------------------------------

    def wait_settled(self, resources: int, members: set[str], timeout: float, quiet: float = 0.4) -> bool:
        """Waits until the ledger is settled on ``members`` and no assignment changed for ``quiet`` s."""
        deadline = time.monotonic() + timeout
        ledger = self.ledger
        while time.monotonic() < deadline:
            if ledger.settled(resources, members):
                quiet_until = ledger.last_change_ns + int(quiet * 1e9)
                now = time.monotonic_ns()
                if now >= quiet_until:
                    return True
                time.sleep((quiet_until - now) / 1e9)
                continue
            with ledger.changed:
                ledger.changed.wait(0.05)
        return False

    # -- stats ---------------------------------------------------------------------------------

    def snapshot(self, timeout: float = 3.0) -> dict[str, dict[str, Any]]:
        """Asks every live process for its counters (SIGUSR1); label -> latest stats event."""
        procs = self.live()
        wanted = {}
        for p in procs:
            with self.stats_changed:
                wanted[p.label] = len(p.stats) + 1
            try:
                p.popen.send_signal(signal.SIGUSR1)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + timeout
        with self.stats_changed:
            while time.monotonic() < deadline:
                if all(len(p.stats) >= wanted[p.label] or not p.alive for p in procs):
                    break
                self.stats_changed.wait(0.05)
            for p in procs:
                if len(p.stats) < wanted[p.label] and p.alive:
                    self.stats_missed[p.label] += 1
            return {p.label: p.stats[-1] for p in procs if p.stats}


def stats_delta(before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Sums of counters over processes (a process absent before counts from zero)."""
    requests: Counter[str] = Counter()
    watches: Counter[str] = Counter()
    cpu = 0.0
    for label, now in after.items():
        then = before.get(label, {})
        for k, v in now.get("requests", {}).items():
            requests[k] += v - then.get("requests", {}).get(k, 0)
        for k, v in now.get("watches", {}).items():
            watches[k] += v - then.get("watches", {}).get(k, 0)
        cpu += float(now.get("cpu", 0.0)) - float(then.get("cpu", 0.0))
    return {"requests": dict(requests), "watches": dict(watches), "cpu_s": round(cpu, 3)}
