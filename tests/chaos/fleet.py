"""A group of real worker processes, each behind its own :class:`~tests.chaos.proxy.FaultProxy`, on a
real ZooKeeper server or ensemble, with every JSON event fed into one :class:`~tests.chaos.checks.Ledger`.

The fleet never looks at the library's internal state: roles, ownership and recovery are read from the
workers' own events; the only ZooKeeper reads are the leak check and resource changes (what an
administrator would do).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss, KazooException, OperationTimeoutError, SessionExpiredError
from kazoo.retry import KazooRetry

from tests.chaos.admin import Admin
from tests.chaos.checks import Ledger, kazoo_leaks, window_owners, window_problems, zk_leaks
from tests.chaos.proxy import FaultProxy
from tests.support.partition import PartitionableEnsemble
from tests.support.zk import ZkCluster

_OWN_READ_FAILURES = (ConnectionLoss, SessionExpiredError, OperationTimeoutError)  # the harness's, not the library's

REPO = Path(__file__).resolve().parents[2]
TARGETS = ("resource-barrier", "global-barrier", "kazoo")
BEHAVIOURS = ("normal", "slow", "fail", "hang")
APIS = ("threads", "asyncio")


def worker_env() -> dict[str, str]:
    """The worker processes' environment: faulthandler on (SIGABRT dumps stacks); with
    ``CHAOS_WORKER_PYTHONPATH``, the workers import the library from there (e.g. an older commit's
    ``worker_lib``, to see a scenario find what a fix closed) while the harness runs this tree's."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONFAULTHANDLER": "1"}
    other = os.environ.get("CHAOS_WORKER_PYTHONPATH")
    if other:
        env["PYTHONPATH"] = other
    return env


@dataclass(frozen=True)
class Settings:
    """One campaign's knobs. ``bound`` is the stated liveness bound after the last fault healed."""

    target: str = "resource-barrier"
    workers: int = 5
    resources: int = 20
    session_timeout: float = 2.0
    interval: float = 0.5
    tick: float = 0.1
    stop_timeout: float = 1.0  # --stop-timeout of every worker (a hanging stop callback is cut off here)
    slow_delay: float = 0.8  # a slow stop callback's duration: longer than the interval
    bad_stop_share: float = 0.4  # share of spawns that get a slow, failing or hanging stop callback
    slack: float = 4.0  # the "few seconds" of the bound: process start, reconnects, ZooKeeper round trips
    api: str = "threads"  # the workers' --api: rebalanser.Client ("threads") or rebalanser.aio.Client ("asyncio")

    def __post_init__(self) -> None:
        if self.target not in TARGETS:
            raise ValueError(f"unknown target {self.target!r}: one of {TARGETS}")
        if self.api not in APIS:
            raise ValueError(f"unknown api {self.api!r}: one of {APIS}")

    @property
    def kazoo(self) -> bool:
        return self.target == "kazoo"

    @property
    def stop_bound(self) -> float:
        return 0.0 if self.kazoo else max(self.stop_timeout, self.slow_delay)

    @property
    def bound(self) -> float:
        """Session timeout + rebalance interval + stop callback time + slack."""
        return self.session_timeout + self.interval + self.stop_bound + self.slack

    @property
    def window(self) -> float:
        """Observation window for liveness: long enough for every owner to tick a few times."""
        return max(0.6, 5 * self.tick)


@dataclass
class Recovery:
    ok: bool
    recovered_ns: int = 0  # when the final owner of the last resource to settle began working on it
    problems: list[str] = field(default_factory=list)
    waited: float = 0.0


class StallMeter:
    """Measures how long this host stalled (a 50 ms sleep that overslept by more than 100 ms): on a
    shared, overloaded machine, time in which no process could run is not the library's to account
    for. Liveness is checked against the bound plus the stall measured during the step."""

    PERIOD, GRACE = 0.05, 0.1

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stalls: list[tuple[int, float]] = []  # (monotonic ns at the end of the stall, seconds)
        self._stopped = threading.Event()
        threading.Thread(target=self._run, daemon=True, name="stall-meter").start()

    def _run(self) -> None:
        while not self._stopped.is_set():
            before = time.monotonic()
            time.sleep(self.PERIOD)
            over = time.monotonic() - before - self.PERIOD
            if over > self.GRACE:
                with self._lock:
                    self._stalls.append((time.monotonic_ns(), over))
                    if len(self._stalls) > 100_000:
                        del self._stalls[:50_000]

    def between(self, start_ns: int, end_ns: int) -> float:
        with self._lock:
            return sum(s for t, s in self._stalls if start_ns <= t <= end_ns)

    def stop(self) -> None:
        self._stopped.set()


class ChaosWorker:
    """One worker process (the ``rebalanser worker`` CLI or the kazoo adapter) behind its proxy."""

    def __init__(
        self, member_id: str, proxy: FaultProxy, behaviour: str, log_dir: Path, log_name: str | None = None
    ) -> None:
        self.member_id, self.proxy, self.behaviour, self.log_dir = member_id, proxy, behaviour, log_dir
        self.log_name = log_name or member_id  # a second process with the same id logs under its own name
        self.proc: subprocess.Popen[str] | None = None
        self.paused = False
        self.stopped_by_harness = False
        self._reader: threading.Thread | None = None
        self.incarnation = 0
        self.spawned_ns = 0  # when the process was started
        self.first_event_ns = 0  # the instant of its first event (its session, once ZooKeeper answered)

    def start(self, module: str, args: list[str], ledger: Ledger, incarnation: int) -> None:
        self.incarnation = incarnation
        self.spawned_ns = time.monotonic_ns()
        err = open(self.log_dir / f"{self.log_name}.{incarnation}.err", "a")  # noqa: SIM115 - child owns it
        self.proc = subprocess.Popen(
            [sys.executable, "-m", module, *args], stdout=subprocess.PIPE, stderr=err,
            stdin=subprocess.DEVNULL, text=True, cwd=REPO,
            env=worker_env(),
        )
        err.write(f"# {self.member_id} incarnation {incarnation} pid {self.proc.pid}: {' '.join(args)}\n")
        err.close()
        self._reader = threading.Thread(target=self._read, args=(self.proc, ledger), daemon=True)
        self._reader.start()

    def _read(self, proc: subprocess.Popen[str], ledger: Ledger) -> None:
        assert proc.stdout is not None
        with open(self.log_dir / f"{self.log_name}.jsonl", "a") as out:
            for line in proc.stdout:
                try:
                    event = json.loads(line)
                except ValueError:
                    out.write(line)
                    continue
                event["_pid"] = proc.pid
                if not self.first_event_ns:
                    self.first_event_ns = int(event.get("ts") or time.monotonic_ns())
                out.write(json.dumps(event) + "\n")
                ledger.ingest(event)

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc is not None else 0

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive:
            assert self.proc is not None
            self.proc.send_signal(sig)

    def pause(self) -> None:
        self.signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        self.signal(signal.SIGCONT)
        self.paused = False

    def kill(self) -> None:
        self.stopped_by_harness = True
        if self.paused:
            self.resume()
        self.signal(signal.SIGKILL)
        self.wait(30)

    def terminate(self, timeout: float) -> int | None:
        """SIGTERM and wait; returns the exit code, or None (then kills) if it did not exit in time."""
        self.stopped_by_harness = True
        if self.paused:
            self.resume()
        self.signal(signal.SIGTERM)
        try:
            return self.wait(timeout)
        except subprocess.TimeoutExpired:
            self.dump_stacks()
            self.kill()
            return None

    @property
    def err_log(self) -> Path:
        return self.log_dir / f"{self.log_name}.{self.incarnation}.err"

    def dump_stacks(self) -> None:
        """For a post-mortem: every thread's stack into the err log (faulthandler on SIGABRT); the
        process dies of it."""
        if not self.alive:
            return
        self.stopped_by_harness = True
        self.resume()
        self.signal(signal.SIGABRT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.wait(5)

    def wait(self, timeout: float) -> int:
        assert self.proc is not None
        code = self.proc.wait(timeout)
        if self._reader is not None:
            self._reader.join(10)
        return code


class Fleet:
    """``settings.workers`` members ``w0``..``wN-1`` of one group, plus the group's resources."""

    def __init__(
        self, cluster: ZkCluster, settings: Settings, log_dir: Path, rng: random.Random,
        partition: PartitionableEnsemble | None = None,
    ) -> None:
        """``partition``: the ensemble's server-to-server links, when they can be cut."""
        self.cluster, self.settings, self.log_dir, self.rng = cluster, settings, log_dir, rng
        self.partition = partition
        log_dir.mkdir(parents=True, exist_ok=True)
        self.group = f"/chaos/{settings.target}-{uuid.uuid4().hex[:8]}"
        self.ledger = Ledger(recent_seconds=30.0)
        self.workers: dict[str, ChaosWorker] = {}
        self.proxies: dict[str, FaultProxy] = {}
        self.resources: set[str] = set()
        self.pool = [f"r{i:02d}" for i in range(2 * settings.resources)]
        self.spawns = 0
        self.anomalies: list[str] = []
        self.stalls = StallMeter()
        self.last_server_fault = -1e9  # monotonic time the last ZooKeeper server fault ended
        self.extras: list[ChaosWorker] = []  # processes that are not members of the fleet (duplicate ids)
        self.started: list[ChaosWorker] = []  # every process the fleet started, in order (see late_start)
        self.planted: set[str] = set()  # fakes the harness put into the group on purpose (see zk_leaks)
        self.renamed_claims: dict[str, int] = {}  # claim path -> czxid of a live claim whose data was tampered
        self.seen: dict[str, list[bytes]] = {}  # record kind -> values really written before (stale records)
        self.zk = self._admin_client()
        self.zk.start(timeout=60)
        self.admin = Admin(self.zk)

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> Recovery:
        for name in self.pool[: self.settings.resources]:
            self.add_resource(name)
        started = time.monotonic_ns()
        for i in range(self.settings.workers):
            self.spawn(f"w{i}")
        return self.wait_recovered(started, cap=60 + 5 * self.settings.workers)

    def close(self) -> None:
        for worker in self.workers.values():
            if worker.paused:
                worker.resume()
        for proxy in self.proxies.values():
            proxy.restore()
        for worker in [*self.workers.values(), *self.extras]:
            if worker.alive:
                worker.signal(signal.SIGTERM)
        for worker in [*self.workers.values(), *self.extras]:
            if worker.proc is not None:
                try:
                    worker.wait(20)
                except subprocess.TimeoutExpired:
                    worker.kill()
        for proxy in self.proxies.values():
            proxy.close()
        self.stalls.stop()
        with contextlib.suppress(Exception):
            self.zk.stop()
            self.zk.close()

    SERVER_FAULT_SPACING = 10.0

    def server_fault_allowed(self) -> bool:
        """ZooKeeper server faults are spaced: after one healed, the ensemble serves for 10 s before the
        next (see docs/chaos.md: back-to-back leader kills exposed a ZooKeeper session anomaly)."""
        return time.monotonic() - self.last_server_fault >= self.SERVER_FAULT_SPACING

    def dump_stacks(self) -> None:
        for worker in self.workers.values():
            worker.dump_stacks()

    def reset(self) -> Recovery:
        """Last resort after a liveness failure: kill every worker and start them afresh."""
        for proxy in self.proxies.values():
            proxy.restore()
        for worker in [*self.workers.values(), *self.extras]:
            if worker.alive:
                worker.kill()
        if self.partition is not None:
            self.partition.heal()
        for server in self.cluster.servers:
            server.resume()
            server.start()
        started = time.monotonic_ns()
        for member_id in list(self.workers):
            self.spawn(member_id, "normal")
        return self.wait_recovered(started, cap=60 + 5 * self.settings.workers)

    def replace_hung(self) -> list[str]:
        """What a liveness probe does for a pod whose stop callback never returns: such a worker stands
        aside (out of the group, holding nothing) for good, and with every spawn drawing a behaviour,
        a long campaign would end with every worker aside and nobody to work. At most one worker is
        left hung on standby (a member out of the group is a state worth keeping under faults); the
        others are killed and started afresh, and the group must settle before the next step."""
        aside = self.ledger.on_standby()
        hung = [w for w in self.workers.values() if w.alive and w.behaviour == "hang" and w.pid in aside]
        replaced = [w.member_id for w in hung[1:]]
        if not replaced:
            return []
        started = time.monotonic_ns()
        for worker in hung[1:]:
            worker.kill()
            self.spawn(worker.member_id)
        recovery = self.wait_recovered(started, cap=60 + 5 * self.settings.workers)
        if not recovery.ok:
            raise RuntimeError(f"the fleet did not settle after replacing hung workers {replaced}: "
                               f"{recovery.problems}")
        return replaced

    # -- workers -------------------------------------------------------------------------------

    def pick_behaviour(self, rng: random.Random) -> str:
        if self.settings.kazoo or rng.random() >= self.settings.bad_stop_share:
            return "normal"
        return rng.choice(BEHAVIOURS[1:])

    def spawn(self, member_id: str, behaviour: str | None = None) -> ChaosWorker:
        old = self.workers.get(member_id)
        if old is not None and old.alive:
            raise RuntimeError(f"{member_id} is still running")
        proxy = self.proxies.get(member_id)
        if proxy is None:
            proxy = self.proxies[member_id] = FaultProxy([s.address for s in self.cluster.servers])
        proxy.restore()
        behaviour = behaviour or self.pick_behaviour(self.rng)
        worker = ChaosWorker(member_id, proxy, behaviour, self.log_dir)
        self.spawns += 1
        worker.start(self.module, self.args(member_id, proxy.hosts, behaviour), self.ledger, self.spawns)
        self.workers[member_id] = worker
        self.started.append(worker)
        return worker

    def spawn_extra(self, member_id: str, behaviour: str = "normal") -> ChaosWorker:
        """A process that is not a member of the fleet (e.g. a second one with a live member's id),
        behind a proxy of its own; its events go into the same ledger."""
        name = f"{member_id}~{len(self.extras)}"
        proxy = self.proxies[name] = FaultProxy([s.address for s in self.cluster.servers])
        worker = ChaosWorker(member_id, proxy, behaviour, self.log_dir, log_name=name)
        self.spawns += 1
        worker.start(self.module, self.args(member_id, proxy.hosts, behaviour), self.ledger, self.spawns)
        self.extras.append(worker)
        self.started.append(worker)
        return worker

    def retire_extra(self, worker: ChaosWorker) -> None:
        """Forgets an extra process that has ended, and closes its proxy."""
        if worker in self.extras:
            self.extras.remove(worker)
        proxy = self.proxies.pop(worker.log_name, None)
        if proxy is not None:
            proxy.close()

    @property
    def module(self) -> str:
        return "bench.adapters.kazoo_worker" if self.settings.kazoo else "rebalanser.cli"

    def args(self, member_id: str, hosts: str, behaviour: str) -> list[str]:
        s = self.settings
        args = [
            "worker", "--zk", hosts, "--group", self.group, "--id", member_id, "--json",
            "--algorithm", "resource-barrier" if s.kazoo else s.target,
            "--session-timeout", str(s.session_timeout), "--min-interval", str(s.interval),
            "--tick", str(s.tick), "--log-level", os.environ.get("CHAOS_WORKER_LOG_LEVEL", "INFO"),
            "--create-group",
        ]
        if s.kazoo:
            return args
        args += ["--stop-timeout", str(s.stop_timeout), "--api", s.api]
        if behaviour == "slow":
            args += ["--simulate-stop-delay", str(s.slow_delay)]
        elif behaviour == "slow-start":  # the explorer's busy start callback (never drawn by pick_behaviour)
            args += ["--simulate-start-delay", str(s.slow_delay)]
        elif behaviour in ("fail", "hang"):
            args += ["--simulate-stop", behaviour]
        return args

    def live(self) -> dict[str, int]:
        """id -> pid of every worker process that is running (paused ones included)."""
        return {w.member_id: w.pid for w in self.workers.values() if w.alive}

    def in_group(self) -> dict[str, int]:
        """Like :meth:`live`, less the workers that announced a standby (out of the group until a stop
        callback of theirs returns): they hold no share and no member node."""
        aside = self.ledger.on_standby()
        return {member: pid for member, pid in self.live().items() if pid not in aside}

    def crashed(self) -> list[ChaosWorker]:
        """Workers whose process ended without the harness stopping it."""
        return [w for w in self.workers.values() if w.proc is not None and not w.alive and not w.stopped_by_harness]

    def running(self) -> list[ChaosWorker]:
        return [w for w in self.workers.values() if w.alive]

    def coordinator(self) -> ChaosWorker | None:
        """The live worker whose latest role event says coordinator, the most recent one if several
        (not the highest epoch: an administrator who re-creates ``G/epoch`` starts epochs afresh)."""
        live = self.live()
        best: tuple[int, str] | None = None
        for (member_id, pid), event in self.ledger.latest_roles().items():
            if live.get(member_id) == pid and event["role"] == "coordinator":
                candidate = (int(event["ts"]), member_id)
                best = candidate if best is None or candidate > best else best
        return self.workers[best[1]] if best else None

    def followers(self) -> list[ChaosWorker]:
        leader = self.coordinator()
        return [w for w in self.running() if w is not leader]

    def owned_by(self, worker: ChaosWorker) -> set[str]:
        """What the worker ticked in the last observation window."""
        end = time.monotonic_ns()
        ticks = self.ledger.ticks_between(end - int(self.settings.window * 1e9), end)
        return {e["resource"] for e in ticks if e["id"] == worker.member_id and e.get("_pid") == worker.pid}

    # -- resources -----------------------------------------------------------------------------

    def add_resource(self, name: str) -> None:
        """An administrator's write, retried across ZooKeeper faults, never blocking for long (kazoo
        queues requests while it reconnects: an unbounded wait would hang the harness)."""
        self.admin.create(f"{self.group}/resources/{name}", makepath=True)
        self.resources.add(name)

    def delete_resource(self, name: str) -> None:
        self.admin.delete(f"{self.group}/resources/{name}")
        self.resources.discard(name)

    # -- recovery and checks -------------------------------------------------------------------

    def wait_recovered(self, heal_ns: int, cap: float, windows: int = 2) -> Recovery:
        """Waits (bounded by ``cap`` seconds) until, in two (``windows``) consecutive observation windows
        that all begin after ``heal_ns``, every resource is ticked by exactly one live worker and loads are
        balanced. ``recovered_ns`` is when the last resource's final owner began working on it."""
        window_ns = int(self.settings.window * 1e9)
        lag_ns = 300_000_000  # events still in flight through the pipes
        started = time.monotonic()
        problems: list[str] = ["no observation window after the heal yet"]
        good_since: int | None = None
        # Time in which the host (and so every process) was measured stalled extends the wait.
        while time.monotonic() - started < cap + self.stalls.between(heal_ns, time.monotonic_ns()):
            dead = self.crashed()
            if dead:
                codes = ", ".join(f"{w.member_id} (exit {w.proc.returncode if w.proc else '?'})" for w in dead)
                return Recovery(False, 0, [f"worker process died on its own: {codes}"], time.monotonic() - started)
            end = time.monotonic_ns() - lag_ns
            begin = end - window_ns
            if begin > heal_ns:
                ticks = self.ledger.ticks_between(begin, end)
                live = self.in_group()
                problems = window_problems(ticks, set(self.resources), live, begin, end)
                if problems:
                    good_since = None
                else:
                    good_since = begin if good_since is None else good_since
                    if end - good_since >= windows * window_ns:
                        owners = window_owners(ticks, self.resources)
                        starts = self.ledger.final_episode_starts(owners)
                        recovered = max([*starts.values(), heal_ns])
                        return Recovery(True, recovered, [], time.monotonic() - started)
            time.sleep(0.1)
        return Recovery(False, 0, problems, time.monotonic() - started)

    STARTUP = 1.0  # seconds a worker process takes from exec to its first event on an idle machine

    def late_start(self, since_ns: int, until_ns: int) -> float:
        """The longest time beyond :attr:`STARTUP` that a process started between ``since_ns`` and
        ``until_ns`` took to report its first event. A restarted worker's share waits for its start,
        and on a shared machine the interpreter's start is CPU work that waits for its turn like any
        other: the host stall meter, a thread that sleeps, does not see that. Like a measured stall, it
        is the host's time, not the library's."""
        worst = 0.0
        for worker in self.started:
            if since_ns <= worker.spawned_ns <= until_ns:
                began = worker.first_event_ns or until_ns
                worst = max(worst, (began - worker.spawned_ns) / 1e9 - self.STARTUP)
        return worst

    READ_PATIENCE = 60.0  # seconds the checker's own reads may keep failing before it gives up

    def _admin_client(self) -> KazooClient:
        """The harness's own client: reconnects at least every second (kazoo's default back-off grows
        to an hour, which outlasts a leader election by far)."""
        retry = KazooRetry(max_tries=-1, delay=0.1, max_delay=1.0)
        return KazooClient(hosts=self.cluster.hosts, timeout=30, connection_retry=retry)

    def renew_admin_session(self) -> None:
        """A fresh client, and so a fresh session, for the harness (its session expired, or its client
        was closed); a start that times out leaves a closed client, renewed again on the next failure."""
        old = self.zk
        with contextlib.suppress(Exception):
            old.stop()
            old.close()
        self.zk = self._admin_client()
        self.admin = Admin(self.zk)
        with contextlib.suppress(Exception):
            self.zk.start(timeout=10)

    def leak_problems(self, timeout: float) -> list[str]:
        """ZooKeeper holds no leaked ephemeral node (bounded wait: a killed process's session may
        still be expiring). The harness's own failures to read (its connection lost, its session
        expired, e.g. during a leader kill) are not findings: it reads again, through a fresh session
        if its own is gone, for up to :attr:`READ_PATIENCE` seconds."""
        deadline = time.monotonic() + timeout
        failing_since: float | None = None
        while True:
            try:
                live = set(self.in_group())
                if self.settings.kazoo:
                    problems = kazoo_leaks(self.zk, self.group, live)
                else:
                    problems = zk_leaks(self.zk, self.group, live, set(self.resources), self.planted,
                                        self.renamed_claims)
                failing_since = None
            except (*_OWN_READ_FAILURES, self.zk.handler.timeout_exception) as exc:
                now = time.monotonic()
                failing_since = now if failing_since is None else failing_since
                if now - failing_since > self.READ_PATIENCE:
                    return [f"could not read ZooKeeper for {self.READ_PATIENCE:.0f} s: {exc!r}"]
                if isinstance(exc, SessionExpiredError):  # kazoo's ConnectionClosedError is one too
                    self.renew_admin_session()
                time.sleep(0.2)
                continue
            except KazooException as exc:
                problems = [f"could not read ZooKeeper: {exc!r}"]
            if not problems or time.monotonic() > deadline:
                return problems
            time.sleep(0.2)
