"""Bench worker: several group members in one process, emitting the worker JSON events (README.md, "The worker CLI").

    python -m bench.multiworker --impl rebalanser|kazoo --zk HOSTS --group PATH --ids a,b,c \
        [--algorithm resource-barrier] [--session-timeout 2] [--min-interval 1] [--tick 0.05]

Every member is a real, independent ZooKeeper session: a :class:`rebalanser.client.Client` (``--impl
rebalanser``) or the kazoo ``SetPartitioner`` baseline of :mod:`bench.adapters.kazoo_worker` (``--impl
kazoo``). Several members share one interpreter so that 200 members fit on a 2-core machine; each
event carries its own member ``id``. A process with one member is a plain one-member worker.

Differences from ``rebalanser worker --json`` (bench-only, the same for both implementations):

* Work is reported once per ownership episode: the first unit of work on a resource after it was
  assigned, gated by the implementation's own ownership check (``Client.owns`` / the partitioner's
  ``acquired`` state and set). One ``ticks`` event lists every resource worked on in one pass, with
  ``ts`` taken after the pass (an upper bound for each of them). Ticking 100,000 resources 20 times a
  second would measure the JSON pipe, not the library.
* The work loop wakes as soon as resources are assigned (kazoo: as soon as the partition is acquired)
  and otherwise polls every ``--tick`` seconds.
* ``--trace`` (``bench.split``): every write request and every read of an assignment, state, member
  or barrier path a member sends is also one ``zk`` event (``op``, ``kind`` of path, ``n`` operations),
  every watch notification one ``notified`` event (``kind``), and every reply to a traced write one
  ``reply`` event (``op``, ``kind``, ``n``, read off the socket before kazoo decodes it), each with the
  member's id and the instant it was sent or read: the time line of a rebalance, member by member, and
  how long the server took to answer apart from how long the member took to go on.
* ``SIGUSR1`` makes the process print one ``stats`` event: its ZooKeeper requests counted in the
  client (kazoo's ``ConnectionHandler._submit``; pings and the lease probe separately), the watch
  notifications it received by kind of path, CPU seconds and RSS (now and peak).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import resource
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from kazoo.protocol import connection as kazoo_connection
from kazoo.protocol.serialization import Watch

import bench.adapters.kazoo_worker as kazoo_worker

WRITE_TYPES = {1, 2, 5, 7, 13, 14, 15, 16, 19, 20, 21}  # create, delete, set, setACL, check, multi, ...
PING_TYPE = 11
SYNC_TYPE = 9
SESSION_TYPES = {-11, 100, 101, 102}  # close, auth, setWatches, SASL
TRACED_WRITES = {1: "create", 2: "delete", 5: "set", 13: "check", 14: "multi", 15: "create", 19: "create"}
TRACED_READS = {4: "get", 8: "children", 12: "children", 103: "ephemerals"}
KIND_ORDER = ("assignment", "state", "barrier", "stopped", "claims", "resources", "config", "members")


class Out:
    """One JSON object per line on stdout, atomically (many threads emit)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def emit(self, member: str, event: str, ts: int | None = None, **fields: Any) -> None:
        record = {"event": event, "id": member, "ts": ts if ts is not None else time.monotonic_ns(), **fields}
        line = json.dumps(record, separators=(",", ":")) + "\n"
        with self._lock:
            sys.stdout.write(line)
            sys.stdout.flush()


OUT = Out()
PROBE: list[Probe | None] = [None]  # this process's probe, once main() made it


class Probe:
    """Counts ZooKeeper requests and watch notifications of every client in this process."""

    def __init__(self, group: str, trace: bool = False, label: str = "") -> None:
        self.group = group.rstrip("/")
        self.lock = threading.Lock()
        self.requests: Counter[str] = Counter()
        self.watches: Counter[str] = Counter()
        self.trace, self.label = trace, label
        self.members: dict[int, str] = {}  # id() of a member's KazooClient -> member id (--trace)

    def member_of(self, client: Any) -> str:
        return self.members.get(id(client), self.label)

    def traced(self, client: Any, request: Any) -> None:
        """The ``zk`` event of a write, or of a read of a path a rebalance is announced on."""
        kind = request.type
        if kind in WRITE_TYPES:
            op = TRACED_WRITES.get(kind, str(kind))
        elif kind in TRACED_READS:
            op = TRACED_READS[kind]
        else:
            return
        paths = _paths(request)
        where = self.kind_of_request(paths)
        if op in TRACED_READS.values() and where not in ("assignment", "state", "members", "barrier") \
                and op != "ephemerals":  # a release's read of our own claims
            return
        OUT.emit(self.member_of(client), "zk", op=op, kind=where, n=len(paths))

    def replied(self, client: Any, request: Any) -> None:
        """The ``reply`` event of a traced write: when its answer was read off the connection."""
        paths = _paths(request)
        OUT.emit(self.member_of(client), "reply", op=TRACED_WRITES.get(request.type, str(request.type)),
                 kind=self.kind_of_request(paths), n=len(paths))

    def kind_of_request(self, paths: list[str]) -> str:
        """The kind of a request by the paths it names: the first of :data:`KIND_ORDER` among them (a
        fenced multi is its writes', not its epoch check's)."""
        kinds = {self.kind_of_path(path) for path in paths}
        return next((k for k in KIND_ORDER if k in kinds), "other")

    def kind_of_path(self, path: str) -> str:
        rel = path[len(self.group) :] if path.startswith(self.group) else path
        parts = rel.strip("/").split("/")
        head = parts[0] if parts else ""
        if head == "kazoo-partitioner":
            sub = parts[1] if len(parts) > 1 else ""
            return {"party": "members", "locks": "claims"}.get(sub, "other")
        return {
            "clients": "members", "epoch": "members", "owners": "claims", "assignment": "assignment",
            "barrier": "barrier", "stopped": "barrier", "resources": "resources", "config": "config",
            "state": "state",
        }.get(head, "other")

    def count_request(self, request: Any, size: int) -> None:
        kind = request.type
        with self.lock:
            if kind == PING_TYPE:
                self.requests["ping"] += 1
            elif kind in SESSION_TYPES or kind is None:
                self.requests["session"] += 1
            elif kind in WRITE_TYPES:
                ops = len(request.operations) if kind == 14 else 1
                self.requests["write_requests"] += 1
                self.requests["write_ops"] += ops
                self.requests["write_bytes"] += size
                if any("/assignment/" in p for p in _paths(request)):
                    self.requests["assignment_write_bytes"] += size
            elif kind == SYNC_TYPE and request.path == self.group:
                self.requests["lease_probes"] += 1
            else:
                self.requests["read_requests"] += 1
                self.requests["read_bytes"] += size

    def count_watch(self, path: str) -> None:
        with self.lock:
            self.watches[self.kind_of_path(path)] += 1
            self.watches["total"] += 1

    def install(self) -> None:
        """Counts on kazoo's connection thread: each request as ``_submit`` sends it, with its size as
        the one ``_write`` of its frame (the request is serialized once, by kazoo, as without the probe:
        the harness's own cost stays out of the figures it measures)."""
        handler = kazoo_connection.ConnectionHandler
        submit, write, read_watch = handler._submit, handler._write, handler._read_watch_event
        probe = self
        sending = threading.local()  # the request whose frame the connection thread writes next

        def counted_submit(self: Any, request: Any, timeout: Any, xid: Any = None) -> Any:
            sending.request = request
            try:
                if probe.trace:
                    probe.traced(self.client, request)
            except Exception:  # counting must never break the client
                logging.getLogger(__name__).debug("request not traced", exc_info=True)
            try:
                return submit(self, request, timeout, xid)
            finally:
                sending.request = None

        def counted_write(self: Any, msg: Any, timeout: Any) -> Any:
            request = getattr(sending, "request", None)
            if request is not None:
                sending.request = None
                try:
                    probe.count_request(request, len(msg) - 4)  # the frame's length prefix aside
                except Exception:
                    logging.getLogger(__name__).debug("request not counted", exc_info=True)
            return write(self, msg, timeout)

        def counted_watch(self: Any, buffer: Any, offset: int) -> Any:
            try:
                watch, _ = Watch.deserialize(buffer, offset)
                probe.count_watch(watch.path)
                if probe.trace:
                    OUT.emit(probe.member_of(self.client), "notified", kind=probe.kind_of_path(watch.path),
                             type=watch.type)
            except Exception:
                logging.getLogger(__name__).debug("watch not counted", exc_info=True)
            return read_watch(self, buffer, offset)

        read_response = handler._read_response

        def traced_response(self: Any, header: Any, buffer: Any, offset: int) -> Any:
            # --trace: a traced write's reply as it is read (before kazoo decodes it and wakes the caller)
            pending = self.client._pending
            request = pending[0][0] if probe.trace and pending else None
            if request is not None and getattr(request, "type", None) in TRACED_WRITES:
                try:
                    probe.replied(self.client, request)
                except Exception:
                    logging.getLogger(__name__).debug("reply not traced", exc_info=True)
            return read_response(self, header, buffer, offset)

        handler._submit = counted_submit
        handler._write = counted_write
        handler._read_watch_event = counted_watch
        handler._read_response = traced_response

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            return {"requests": dict(self.requests), "watches": dict(self.watches)}


def _paths(request: Any) -> list[str]:
    """The paths a request writes (a multi's: each operation's)."""
    operations = getattr(request, "operations", None)
    if operations is not None:
        return [str(getattr(op, "path", "")) for op in operations]
    return [str(getattr(request, "path", ""))]


def memory_kb() -> dict[str, int]:
    """VmRSS now and VmHWM (peak) of this process. Not ``ru_maxrss``: Linux carries the parent's
    peak over fork and exec into it, so it reports the harness's memory, not ours."""
    found = {}
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(("VmRSS:", "VmHWM:")):
                found[line.split(":")[0]] = int(line.split()[1])
    return {"rss_kb": found.get("VmRSS", 0), "maxrss_kb": found.get("VmHWM", 0)}


# ------------------------------------------------------------------------------------ rebalanser


class Work:
    """The work loop of every rebalanser member in this process: first unit of work per episode."""

    def __init__(self, tick: float) -> None:
        self.tick = tick
        self.lock = threading.Lock()  # a unit of work and a revocation never interleave
        self.pending: dict[str, dict[str, int]] = {}  # member -> resource -> token, not yet worked on
        self.clients: dict[str, Any] = {}
        self.wake = threading.Event()

    def assigned(self, member: str, resources: Mapping[str, int]) -> None:
        with self.lock:
            self.pending.setdefault(member, {}).update(resources)
            by_token: dict[int, list[str]] = {}
            for name, token in resources.items():
                by_token.setdefault(token, []).append(name)
            for token, names in sorted(by_token.items()):
                OUT.emit(member, "assigned", resources=sorted(names), token=token)
        self.wake.set()

    def revoked(self, member: str, resources: Sequence[str]) -> None:
        with self.lock:
            pending = self.pending.get(member, {})
            for name in resources:
                pending.pop(name, None)
            OUT.emit(member, "revoked", resources=list(resources))

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            self.wake.wait(self.tick)
            self.wake.clear()
            with self.lock:
                for member, pending in self.pending.items():
                    if not pending:
                        continue
                    client = self.clients.get(member)
                    if client is None:
                        continue
                    done = [r for r in list(pending) if client.owns(r)]
                    if done:
                        ts = time.monotonic_ns()
                        tokens = sorted({pending[r] for r in done})
                        for r in done:
                            del pending[r]
                        OUT.emit(member, "ticks", ts=ts, resources=done, tokens=tokens)


def run_rebalanser(args: argparse.Namespace, ids: list[str], stop: threading.Event) -> list[threading.Thread]:
    from rebalanser.client import Client
    from rebalanser.config import Algorithm
    from rebalanser.handler import Handler
    from rebalanser.options import Options

    work = Work(args.tick)

    class BenchHandler(Handler):
        def __init__(self, member: str) -> None:
            self.member = member

        def on_assigned(self, resources: Mapping[str, int]) -> None:
            work.assigned(self.member, resources)

        def on_revoked(self, resources: Sequence[str]) -> None:
            work.revoked(self.member, resources)

        def on_role(self, role: str, epoch: int) -> None:
            OUT.emit(self.member, "role", role=role, epoch=epoch)

        def on_session(self, state: str) -> None:
            OUT.emit(self.member, "session", state=state)

        def on_error(self, error: Exception) -> None:
            logging.getLogger("bench.worker").error("%s %s: %s", self.member, type(error).__name__, error)

    clients = []
    # An older library (bench.compare runs a git ref's) may lack an option: it is left out, not refused.
    known = {f.name for f in dataclasses.fields(Options)}
    optional = {"create_group": True, **({"initial_quiet": args.initial_quiet} if args.initial_quiet is not None
                                         else {})}
    for member in ids:
        options = Options(
            hosts=args.zk, group=args.group, member_id=member, algorithm=Algorithm.parse(args.algorithm),
            session_timeout=args.session_timeout, min_interval=args.min_interval,
            **{k: v for k, v in optional.items() if k in known},
        )
        client = Client(options, BenchHandler(member))
        work.clients[member] = client
        clients.append(client)
    worker = threading.Thread(target=work.run, args=(stop,), name="bench-work", daemon=True)
    worker.start()
    offsets = [float(x) for x in args.start_at.split(",")] if args.start_at else []
    base = await_go(args.go, args.label or ids[0]) if args.go else time.time()

    def start(index: int, client: Any) -> None:
        if index < len(offsets):
            time.sleep(max(0.0, base + offsets[index] - time.time()))
        client.start(timeout=120)

    probe = PROBE[0]  # a member's requests are told apart by its kazoo client (made by its start)

    def start_mapped(index: int, client: Any, member: str) -> None:
        start(index, client)
        if probe is not None:
            with probe.lock:
                # Client.zk since the member loop's split; an older library (bench.compare) had _zk
                probe.members[id(getattr(client, "zk", None) or getattr(client, "_zk", None))] = member

    start_all([lambda i=i, c=c, m=m: start_mapped(i, c, m) for i, (c, m) in enumerate(zip(clients, ids, strict=True))])
    return [threading.Thread(target=c.stop, name="bench-stop", daemon=True) for c in clients]


def await_go(path: str, label: str) -> float:
    """Says ``loaded``, then waits for the harness's go file: the wall-clock instant it holds is when
    every process of the run starts its members (interpreter start-up is not the library's time)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    OUT.emit(label, "loaded", cpu=usage.ru_utime + usage.ru_stime)
    while True:
        try:
            with open(path) as go:
                return float(go.read())
        except (FileNotFoundError, ValueError):
            time.sleep(0.01)


def start_all(starts: list[Any]) -> None:
    """Starts members concurrently (each start blocks until that member has joined)."""
    threads = [threading.Thread(target=s, daemon=True) for s in starts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


# ----------------------------------------------------------------------------------------- kazoo


class BenchKazooWorker(kazoo_worker.KazooWorker):
    """The adapter's worker, reporting the first unit of work per acquisition (see module doc)."""

    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__(args)
        self.worked: set[str] = set()

    def tick(self, partitioner: Any) -> None:
        pending = [r for r in self.owned if r not in self.worked]
        if not pending:
            return
        current = set(partitioner)
        done = [r for r in pending if partitioner.acquired and r in current]
        if done:
            ts = time.monotonic_ns()
            self.worked.update(done)
            OUT.emit(self.member, "ticks", ts=ts, resources=done, tokens=[0])

    def revoke(self) -> None:
        self.worked.clear()
        super().revoke()


def run_kazoo(args: argparse.Namespace, ids: list[str], stop: threading.Event) -> list[threading.Thread]:
    kazoo_worker.emit = OUT.emit  # the adapter's events go through the same atomic writer
    workers = []
    for member in ids:
        member_args = argparse.Namespace(
            zk=args.zk, group=args.group, id=member, session_timeout=args.session_timeout,
            min_interval=args.min_interval, tick=args.tick,
        )
        workers.append(BenchKazooWorker(member_args))
    runners = [threading.Thread(target=w.run, name=f"kazoo-{w.member}", daemon=True) for w in workers]
    for r in runners:
        r.start()

    def stopper(w: BenchKazooWorker, r: threading.Thread) -> None:
        w.stop.set()
        r.join(60)

    return [threading.Thread(target=stopper, args=(w, r), daemon=True) for w, r in zip(workers, runners, strict=True)]


# ----------------------------------------------------------------------------------------- kafka


def run_kafka(args: argparse.Namespace, ids: list[str], stop: threading.Event) -> list[threading.Thread]:
    from bench.adapters.kafka_worker import run_kafka as start

    return start(args, ids, OUT.emit)


# ------------------------------------------------------------------------------------------ main


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.multiworker")
    p.add_argument("--impl", choices=["rebalanser", "kazoo", "kafka"], default="rebalanser",
                   help="kafka: --zk is the broker, --group the topic and group, --algorithm the protocol "
                   "(bench.adapters.kafka_worker)")
    p.add_argument("--zk", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--ids", required=True, help="comma-separated member ids")
    p.add_argument("--label", default="", help="process label for stats events")
    p.add_argument("--algorithm", default="resource-barrier")
    p.add_argument("--session-timeout", type=float, default=2.0)
    p.add_argument("--min-interval", type=float, default=1.0)
    p.add_argument("--tick", type=float, default=0.05)
    p.add_argument("--initial-quiet", type=float, help="rebalanser's start-up window (default: the library's)")
    p.add_argument("--start-at", default="", help="comma-separated seconds, one per member of --ids: when "
                   "each starts, after the go instant (a staggered start across processes)")
    p.add_argument("--go", default="", help="a file the harness writes a wall-clock instant into: members "
                   "start then (see --start-at)")
    p.add_argument("--trace", action="store_true", help="zk and notified events (see the module doc)")
    p.add_argument("--log-level", default=os.environ.get("BENCH_LOG_LEVEL", "WARNING"),
                   help="default: $BENCH_LOG_LEVEL or WARNING (INFO shows the coordinator's timings)")
    args = p.parse_args(argv)
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(threadName)s %(name)s: %(message)s")
    ids = [i for i in args.ids.split(",") if i]
    label = args.label or ids[0]
    probe = Probe(args.group, args.trace, label)
    PROBE[0] = probe
    probe.install()
    stop = threading.Event()
    want_stats = threading.Event()
    def stopped() -> None:
        stop.set()
        want_stats.set()  # wakes the loop below at once: a leave is measured from the signal

    # Events set from a thread: a handler may interrupt the main thread inside an Event's own lock.
    def stopping(*_: Any) -> None:
        threading.Thread(target=stopped, daemon=True).start()

    signal.signal(signal.SIGTERM, stopping)
    signal.signal(signal.SIGINT, stopping)
    signal.signal(signal.SIGUSR1, lambda *_: threading.Thread(target=want_stats.set, daemon=True).start())

    def emit_stats() -> None:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        OUT.emit(label, "stats", members=len(ids), cpu=usage.ru_utime + usage.ru_stime, **memory_kb(),
                 **probe.snapshot())

    runners = {"rebalanser": run_rebalanser, "kazoo": run_kazoo, "kafka": run_kafka}
    run = runners[args.impl]
    stoppers = run(args, ids, stop)
    OUT.emit(label, "ready", members=ids)
    # Stats are answered here, once the members run. Answering them from a thread of their own (so a
    # process still starting its members answers too) measured ~1 s slower rebalances at N=200 in
    # back-to-back runs; a process that cannot answer yet is counted in stats_missed instead.
    while not stop.is_set():
        if want_stats.wait(0.05) and not stop.is_set():
            want_stats.clear()
            emit_stats()
    for s in stoppers:
        s.start()
    for s in stoppers:
        s.join(60)
    for member in ids:
        OUT.emit(member, "stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
