"""One benchmark cell: an implementation, an algorithm, N members and R resources; faults repeated.

Process layout: the first ``solos`` members run one per process and join one after another (so the
oldest, the coordinator, and the kill victims are whole processes that can be killed alone); the
other members run several per process (:mod:`bench.multiworker`), all real ZooKeeper sessions.

Faults (``fault_ns`` = the instant the change happened, on CLOCK_MONOTONIC, comparable with the
workers' event timestamps):

* ``join``: a new one-member process starts; ``fault_ns`` = its ``session connected`` event.
* ``leave``: that member gets SIGTERM (graceful); ``fault_ns`` = just before the signal.
* ``kill``: kill -9 of a one-member process that is not the coordinator; then it is restarted.
* ``kill-coordinator``: kill -9 of the coordinator's process; then it is restarted (it rejoins as the
  youngest member). kazoo's partitioner has no coordinator: not run for it (it would equal ``kill``).

After each fault the harness waits until the evidence shows every resource worked on by exactly one
live member, balanced, with no assignment change for 0.4 s. ``latency`` = the first instant by which
every resource had been worked on by its post-change owner, minus ``fault_ns`` (resources whose
ownership episode began before the fault count as covered at once: they were never stopped).
"""

from __future__ import annotations

import math
import os
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient

from bench.fleet import Fleet, FleetConfig, Proc, stats_delta
from bench.zkmon import mntr, mntr_delta
from tests.support.zk import ZkCluster

FAULTS = ("join", "leave", "kill", "kill-coordinator")


@dataclass(frozen=True)
class Cell:
    impl: str  # rebalanser | kazoo | kafka
    algorithm: str  # resource-barrier | global-barrier (kazoo: n/a; kafka: the protocol, bench.adapters.kafka_worker)
    members: int
    resources: int
    repeats: int
    faults: tuple[str, ...] = FAULTS
    session_timeout: float = 2.0
    min_interval: float = 1.0
    max_per_process: int = 25

    @property
    def name(self) -> str:
        alg = "kazoo" if self.impl == "kazoo" else self.algorithm
        return f"{alg} N={self.members} R={self.resources}"


@dataclass
class Sample:
    fault: str
    repeat: int
    ok: bool
    latency_ms: float | None
    window_s: float
    moved: int
    min_moved: int
    restarted: int
    members_before: int
    members_after: int
    client: dict[str, Any] = field(default_factory=dict)
    server: dict[str, float] = field(default_factory=dict)
    server_net: dict[str, float] = field(default_factory=dict)
    note: str = ""
    fault_ns: int = 0  # the instant of the change (CLOCK_MONOTONIC, as the workers' event timestamps)
    coordinator: str = ""  # the coordinator before the change, as its role events said
    member: str = ""  # the member that joined, left or was killed


def create_resources(zk: KazooClient, group: str, count: int) -> list[str]:
    width = max(1, len(str(count - 1)))
    names = [f"res-{i:0{width}d}" for i in range(count)]
    zk.ensure_path(f"{group}/resources")
    pending = []
    for start in range(0, count, 1000):
        txn = zk.transaction()
        for name in names[start : start + 1000]:
            txn.create(f"{group}/resources/{name}")
        pending.append(txn.commit_async())
        if len(pending) >= 4:
            _check(pending.pop(0).get())
    for result in pending:
        _check(result.get())
    return names


def _check(results: list[Any]) -> None:
    failed = [r for r in results if isinstance(r, Exception)]
    if failed:
        raise RuntimeError(f"creating resources failed: {failed[0]!r}")


def minimum_moves(before: dict[str, str], live_after: set[str], total: int) -> int:
    """Fewest owner changes any balanced assignment over ``live_after`` needs, starting from ``before``."""
    if not live_after:
        return 0
    loads = Counter(m for m in before.values() if m in live_after)
    must = total - sum(loads.values())  # resources of departed members (or unowned)
    q, extra = divmod(total, len(live_after))
    ranked = sorted(live_after, key=lambda m: (-loads[m], m))
    excess = sum(max(0, loads[m] - (q + 1 if i < extra else q)) for i, m in enumerate(ranked))
    return must + excess


def percentile(values: list[float], p: float) -> float | None:
    """Nearest-rank percentile (with fewer than 100 samples, p99 is the maximum)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


class CellRun:
    def __init__(self, cell: Cell, cluster: ZkCluster, admin: KazooClient, log_dir: Path, log: Any) -> None:
        self.cell, self.cluster, self.admin, self.log = cell, cluster, admin, log
        alg = "kazoo" if cell.impl == "kazoo" else cell.algorithm
        self.group = f"/bench/{alg}-n{cell.members}-r{cell.resources}-{uuid.uuid4().hex[:6]}"
        log_dir.mkdir(parents=True, exist_ok=True)
        self.fleet = Fleet(FleetConfig(
            impl=cell.impl, hosts=cluster.hosts, group=self.group, algorithm=cell.algorithm,
            session_timeout=cell.session_timeout, min_interval=cell.min_interval, log_dir=log_dir,
        ))
        self.samples: list[Sample] = []
        self.result: dict[str, Any] = {"cell": asdict(cell), "name": cell.name, "group": self.group}
        self._joins = 0
        self._idle: dict[str, float] = {}
        self._idle_client: dict[str, float] = {}

    # -- setup ---------------------------------------------------------------------------------

    def setup(self) -> bool:
        """Starts the members; rebalanser members join an empty group and the resources are created
        once all have joined (one initial rebalance instead of the first member claiming everything:
        see docs/benchmarks.md, findings); kazoo gets its resources first (its partitioner restarts
        on every change of the set)."""
        cell = self.cell
        resources_first = cell.impl in ("kazoo", "kafka")  # a Kafka topic's partitions exist before its consumers
        if resources_first:
            self._create()
        solos = min(cell.members, cell.repeats + 1)
        ids = [f"m{i:03d}" for i in range(cell.members)]
        started = time.monotonic()
        for member in ids[:solos]:
            proc = self.fleet.spawn([member])
            if not proc.ready.wait(60):
                raise RuntimeError(f"{member} did not start")
        rest = ids[solos:]
        if rest:
            packs = math.ceil(len(rest) / cell.max_per_process)
            size = math.ceil(len(rest) / packs)
            procs = [self.fleet.spawn(rest[i : i + size], label=f"pack{i // size}") for i in range(0, len(rest), size)]
            for proc in procs:
                if not proc.ready.wait(300):
                    raise RuntimeError(f"{proc.label} did not start")
        self.result["members_started_s"] = round(time.monotonic() - started, 2)
        if not resources_first:
            self._create()
        self.result["processes"] = len(self.fleet.live())
        timeout = 120 + cell.resources / 500
        ok = self.fleet.wait_settled(cell.resources, set(ids), timeout)
        self.result["initial_settle_s"] = round(time.monotonic() - started, 2)
        if not ok:
            self.result["error"] = f"initial assignment did not settle within {timeout:.0f}s"
            return False
        self._measure_idle(2.0)
        return True

    def _create(self) -> None:
        started = time.monotonic()
        create_resources(self.admin, self.group, self.cell.resources)
        self.result["create_resources_s"] = round(time.monotonic() - started, 2)

    def _measure_idle(self, seconds: float) -> None:
        before, server_before = self.fleet.snapshot(), mntr(self.cluster)
        time.sleep(seconds)
        after, server_after = self.fleet.snapshot(), mntr(self.cluster)
        delta = mntr_delta(server_before, server_after)
        self._idle = {k: v / seconds for k, v in delta.items()}
        client = stats_delta(before, after)
        self._idle_client = {"cpu_s": client["cpu_s"] / seconds,
                             **{k: v / seconds for k, v in client["requests"].items()}}
        self.result["idle_per_s"] = {"server": {k: round(v, 1) for k, v in self._idle.items()},
                                     "client": {k: round(v, 2) for k, v in self._idle_client.items()}}

    # -- faults --------------------------------------------------------------------------------

    def run(self, deadline: float = math.inf) -> dict[str, Any]:
        """Runs the cell; faults that would start after ``deadline`` (monotonic) are left out."""
        try:
            if self.setup():
                faults = [f for f in self.cell.faults if not (f == "kill-coordinator" and self.cell.impl == "kazoo")]
                plan = [(repeat, fault) for repeat in range(self.cell.repeats) for fault in faults]
                for i, (repeat, fault) in enumerate(plan):
                    if time.monotonic() > deadline:
                        self.result["cut_short"] = f"time budget: {len(plan) - i} of {len(plan)} faults not run"
                        self.log(f"    {self.result['cut_short']}")
                        break
                    sample = self.fault(fault, repeat, last=i == len(plan) - 1)
                    self.samples.append(sample)
                    self.log(f"    {fault:17s} #{repeat}: {self._describe(sample)}")
            self._resources_in_use()
        except Exception as exc:  # a failed cell is reported, the rest of the run goes on
            self.result["error"] = f"{type(exc).__name__}: {exc}"
            self.log(f"    error: {self.result['error']}")
        finally:
            self.fleet.stop_all()
            self._cleanup()
        self.result["stats_missed"] = dict(self.fleet.stats_missed)
        self.result["samples"] = [asdict(s) for s in self.samples]
        self.result["summary"] = summarise(self.samples)
        return self.result

    def _describe(self, s: Sample) -> str:
        if not s.ok:
            return f"FAILED {s.note}"
        writes = s.client.get("requests", {}).get("write_requests", 0)
        return (f"{s.latency_ms:8.0f} ms  moved {s.moved}/{s.min_moved} (min)  restarted {s.restarted}  "
                f"writes {writes}  notify {s.client.get('watches', {}).get('total', 0)}")

    def _gap(self) -> None:
        """Faults are spaced beyond the rebalance interval (so no fault waits for the previous one)."""
        last = self.fleet.ledger.last_change_ns / 1e9
        wait = last + self.cell.min_interval + 0.3 - time.monotonic()
        if wait > 0:
            time.sleep(wait)

    def _victim(self, coordinator: bool) -> Proc | None:
        chief = self.fleet.ledger.coordinator()
        if coordinator:
            proc = self.fleet.proc_of(chief) if chief else None
            return proc if proc is not None and proc.solo else None
        solos = [p for p in self.fleet.live() if p.solo and chief not in p.members]
        return max(solos, key=lambda p: p.started_ns) if solos else None

    def fault(self, fault: str, repeat: int, last: bool = False) -> Sample:
        cell = self.cell
        self._gap()
        if os.environ.get("BENCH_LOG_LEVEL"):  # to read beside the workers' logs (wall clock)
            self.log(f"    {fault:17s} #{repeat}: starting at {datetime.now().strftime('%H:%M:%S.%f')[:-3]}")
        members = self.fleet.members()
        chief = self.fleet.ledger.coordinator()
        before_owners = self.fleet.ledger.owners()
        stats_before, server_before = self.fleet.snapshot(), mntr(self.cluster)
        started = time.monotonic()
        victim: Proc | None = None
        note = ""
        if fault == "join":
            self._joins += 1
            member = f"j{self._joins:03d}"
            self.fleet.spawn([member])
            after_members = members | {member}
            fault_ns = 0
        else:
            victim = self._victim(coordinator=fault == "kill-coordinator")
            if victim is None:
                return Sample(fault, repeat, False, None, 0, 0, 0, 0, len(members), len(members),
                              note="no suitable one-member process to fail")
            after_members = members - set(victim.members)
            if fault == "leave":
                fault_ns = self.fleet.terminate(victim)
            else:
                fault_ns = self.fleet.kill(victim)
        timeout = 60 + cell.resources / 1000 + 5 * cell.session_timeout
        ok = self.fleet.wait_settled(cell.resources, after_members, timeout)
        window = time.monotonic() - started
        stats_after, server_after = self.fleet.snapshot(), mntr(self.cluster)
        if fault == "join":
            state = self.fleet.ledger.sessions.get(member)
            fault_ns = state[1] if state else int(started * 1e9)
        covered, restarted = self.fleet.ledger.coverage_ns(fault_ns)
        after_owners = self.fleet.ledger.owners()
        moved = sum(1 for r, m in after_owners.items() if before_owners.get(r) != m)
        client = stats_delta({k: v for k, v in stats_before.items()}, stats_after)
        # CPU of processes that existed before the fault only (a new process's interpreter start-up
        # is not rebalancing work); requests of every process.
        client["cpu_s"] = stats_delta(stats_before, {k: v for k, v in stats_after.items() if k in stats_before})[
            "cpu_s"]
        server = mntr_delta(server_before, server_after)
        server_net = {k: round(v - self._idle.get(k, 0.0) * window, 1) for k, v in server.items()}
        if not ok:
            note = f"did not settle within {timeout:.0f}s"
        sample = Sample(
            fault, repeat, ok, round((covered - fault_ns) / 1e6, 1) if ok else None, round(window, 2),
            moved, minimum_moves(before_owners, after_members, cell.resources), restarted,
            len(members), len(after_members), client, server, server_net, note, fault_ns, chief or "",
            member if fault == "join" else ",".join(victim.members) if victim is not None else "",
        )
        if victim is not None:
            self.fleet.reap(victim)
        if fault in ("kill", "kill-coordinator") and victim is not None and not last:
            self._restart(victim, members)
        return sample

    def _restart(self, victim: Proc, members: set[str]) -> None:
        self._gap()
        self.fleet.spawn(victim.members)
        if not self.fleet.wait_settled(self.cell.resources, members, 60 + self.cell.resources / 1000):
            raise RuntimeError(f"the group did not settle after restarting {victim.label}")

    def _resources_in_use(self) -> None:
        """Peak RSS over every stats answer of every process of the cell (killed ones included)."""
        self.fleet.snapshot()
        answers = [s for p in self.fleet.procs for s in p.stats]
        solo = [s for s in answers if s.get("members") == 1]
        packs = [s for s in answers if s.get("members", 0) > 1]
        self.result["rss"] = {
            "solo_max_mb": round(max((s["maxrss_kb"] for s in solo), default=0) / 1024, 1),
            "pack_max_mb": round(max((s["maxrss_kb"] for s in packs), default=0) / 1024, 1),
            "pack_max_members": max((s["members"] for s in packs), default=0),
        }
        self.result["idle_cpu_per_member_pct"] = round(
            100 * self._idle_client.get("cpu_s", 0.0) / max(1, self.cell.members), 2)

    def _cleanup(self) -> None:
        """Nothing to delete: every run has its own ZooKeeper server, thrown away at the end (deleting a
        group of 100,000 resources znode by znode would take minutes)."""


def summarise(samples: list[Sample]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for fault in FAULTS:
        mine = [s for s in samples if s.fault == fault]
        if not mine:
            continue
        good = [s for s in mine if s.ok and s.latency_ms is not None]
        lat = [s.latency_ms for s in good if s.latency_ms is not None]

        def mean(values: list[float], digits: int = 1) -> float | None:
            return round(sum(values) / len(values), digits) if values else None

        req = [s.client.get("requests", {}) for s in good]
        out[fault] = {
            "n": len(mine), "failed": len(mine) - len(good),
            "p50_ms": percentile(lat, 50), "p99_ms": percentile(lat, 99),
            "moved": mean([s.moved for s in good]), "min_moved": mean([s.min_moved for s in good]),
            "restarted": mean([s.restarted for s in good]),
            "write_requests": mean([r.get("write_requests", 0) for r in req]),
            "write_ops": mean([r.get("write_ops", 0) for r in req]),
            "write_bytes": mean([r.get("write_bytes", 0) for r in req]),
            "read_requests": mean([r.get("read_requests", 0) for r in req]),
            "read_bytes": mean([r.get("read_bytes", 0) for r in req]),
            "server_writes": mean([s.server.get("writes", 0) for s in good]),
            "server_requests_net": mean([s.server_net.get("packets_received", 0) for s in good]),
            "server_bytes_net": mean([s.server_net.get("bytes_received", 0) for s in good]),
            "notifications": mean([s.client.get("watches", {}).get("total", 0) for s in good]),
            "member_notifications": mean([s.client.get("watches", {}).get("members", 0) for s in good]),
            "server_notifications": mean([s.server.get("notifications", 0) for s in good]),
            "cpu_s": mean([s.client.get("cpu_s", 0.0) for s in good], 3),
        }
    return out
