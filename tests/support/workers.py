"""Real worker processes (the ``rebalanser worker`` CLI) and their JSON event streams."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
Event = dict[str, Any]


def wait_for(
    predicate: Callable[[], bool], timeout: float, message: str | Callable[[], str], poll: float = 0.05
) -> None:
    """Bounded wait with a clear failure message."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(poll)
    if predicate():
        return
    raise AssertionError(f"timed out after {timeout:.1f}s: {message() if callable(message) else message}")


@dataclass
class Worker:
    member_id: str
    args: list[str]
    log_dir: Path
    module: str = "rebalanser.cli"  # or "bench.adapters.kazoo_worker": the same CLI contract
    env: dict[str, str] = field(default_factory=dict)  # added to the test's environment
    proc: subprocess.Popen[str] | None = None
    events: list[Event] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _reader: threading.Thread | None = None

    def start(self) -> Worker:
        err = open(self.log_dir / f"{self.member_id}.{len(self.events)}.err", "w")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", self.module, *self.args], stdout=subprocess.PIPE, stderr=err,
            stdin=subprocess.DEVNULL, text=True, cwd=REPO, env={**os.environ, "PYTHONUNBUFFERED": "1", **self.env},
        )
        self._reader = threading.Thread(target=self._read, args=(self.proc,), daemon=True)
        self._reader.start()
        return self

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        with open(self.log_dir / f"{self.member_id}.jsonl", "a") as out:
            for line in proc.stdout:
                out.write(line)
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                event["_pid"] = proc.pid
                with self._lock:
                    self.events.append(event)

    def snapshot(self) -> list[Event]:
        with self._lock:
            return list(self.events)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        self.wait()

    def terminate(self, timeout: float = 60) -> int:
        if self.alive:
            self.signal(signal.SIGTERM)
        return self.wait(timeout)

    def pause(self) -> None:
        self.signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.signal(signal.SIGCONT)

    def wait(self, timeout: float = 60) -> int:
        assert self.proc is not None
        code = self.proc.wait(timeout)
        if self._reader is not None:
            self._reader.join(10)
        return code

    def owned(self) -> set[str]:
        """Resources this worker currently works on, from its own assigned/revoked events."""
        owned: set[str] = set()
        for event in self.snapshot():
            if event["event"] == "assigned":
                owned |= set(event["resources"])
            elif event["event"] == "revoked":
                owned -= set(event["resources"])
            elif event["event"] == "stopped":
                owned = set()
        return owned if self.alive else set()

    def of(self, kind: str) -> list[Event]:
        return [e for e in self.snapshot() if e["event"] == kind]


@dataclass
class Group:
    """A group of worker processes sharing one ZooKeeper group path."""

    hosts: str
    path: str
    log_dir: Path
    algorithm: str = "resource-barrier"
    session_timeout: float = 2.0
    min_interval: float = 0.3
    tick: float = 0.05
    extra: list[str] = field(default_factory=list)
    module: str = "rebalanser.cli"
    create_group: bool = True  # the first worker makes the group (tests start on a fresh path)
    workers: dict[str, Worker] = field(default_factory=dict)
    retired: list[Worker] = field(default_factory=list)

    def spawn(self, member_id: str, *extra: str, hosts: str | None = None, env: dict[str, str] | None = None) -> Worker:
        """Starts a worker; ``hosts`` overrides the group's connect string for this one worker, ``env`` is
        added to its environment."""
        args = [
            "worker", "--zk", hosts or self.hosts, "--group", self.path, "--id", member_id, "--json",
            "--algorithm", self.algorithm, "--session-timeout", str(self.session_timeout),
            "--min-interval", str(self.min_interval), "--tick", str(self.tick), "--log-level", "INFO",
            *(["--create-group"] if self.create_group else []), *self.extra, *extra,
        ]
        if member_id in self.workers:
            self.retired.append(self.workers[member_id])
        worker = Worker(member_id, args, self.log_dir, module=self.module, env=dict(env or {})).start()
        self.workers[member_id] = worker
        return worker

    def live(self) -> list[Worker]:
        return [w for w in self.workers.values() if w.alive]

    def all_workers(self) -> Iterator[Worker]:
        yield from self.retired
        yield from self.workers.values()

    def events(self) -> list[Event]:
        out = [e for w in self.all_workers() for e in w.snapshot()]
        return sorted(out, key=lambda e: e["ts"])

    def ownership(self) -> dict[str, str]:
        owners: dict[str, str] = {}
        for worker in self.live():
            for resource in worker.owned():
                owners[resource] = worker.member_id
        return owners

    def settled(self, resources: set[str]) -> bool:
        """Every resource owned by exactly one live worker, balanced, and recently ticked by it."""
        counts: dict[str, int] = {}
        loads = []
        for worker in self.live():
            owned = worker.owned()
            loads.append(len(owned))
            for resource in owned:
                counts[resource] = counts.get(resource, 0) + 1
        if set(counts) != resources or any(c != 1 for c in counts.values()):
            return False
        return bool(loads) and max(loads) - min(loads) <= 1

    def wait_settled(self, resources: set[str], timeout: float) -> float:
        start = time.monotonic()
        wait_for(lambda: self.settled(resources), timeout,
                 lambda: f"not settled: {self.describe(resources)}")
        return time.monotonic() - start

    def describe(self, resources: set[str]) -> str:
        owned = {w.member_id: sorted(w.owned()) for w in self.live()}
        taken = {r for rs in owned.values() for r in rs}
        return f"owned={ {k: len(v) for k, v in owned.items()} } missing={sorted(resources - taken)[:10]}"

    def stop_all(self) -> None:
        for worker in self.live():
            worker.signal(signal.SIGTERM)
        for worker in self.all_workers():
            if worker.proc is not None:
                try:
                    worker.wait(60)
                except subprocess.TimeoutExpired:
                    worker.kill()
