"""ZooKeeper's floor: the fastest way this machine's server creates and deletes R ephemeral znodes.

    python -m bench.floor --resources 5000 --clients 1 [--clients 50] [--repeats 3] [--hosts HOST:PORT]

A claim is an ephemeral znode created by its owner's session and deleted at its release, so no claim
round can beat a plain kazoo client that creates (then deletes) the same number of ephemeral znodes
in pipelined ``multi``s, several in flight. That is the floor every claim and cold-start figure of
``make bench`` is divided by. Two floors per R: one client (one session, one process), and as many
clients as the group has members (spread over at most ``os.cpu_count()`` processes, each client a
session of its own with its share of the znodes; threads inside a process, processes so that one
interpreter lock is not the limit).

Each process is a child (``python -m bench.floor --child``) that connects its clients, says
``ready``, then creates on the harness's ``create`` line and deletes on its ``delete`` line, answering
with the monotonic instants it started and ended. A floor is the earliest start to the latest end
over the processes; the reported floor is the fastest of ``repeats`` runs (each on a fresh parent
path), every run kept.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient

from bench.cpu import process_cpu_s, server_pid

REPO = Path(__file__).resolve().parents[1]
BATCH = 1_000  # operations per multi
BATCHES = (100, 250, 1_000)  # each tried: the fastest multi size depends on R and the clients
IN_FLIGHT = 4  # multis in flight per client
DATA = b"m-000"  # about a claim's size


@dataclass
class Floor:
    resources: int
    clients: int
    processes: int
    in_flight: int = IN_FLIGHT
    runs: list[dict[str, float]] = field(default_factory=list)  # {batch, create_ms, delete_ms} per repeat and size

    @property
    def create_best_ms(self) -> float:
        return min(r["create_ms"] for r in self.runs)

    @property
    def delete_best_ms(self) -> float:
        return min(r["delete_ms"] for r in self.runs)

    def best_by_batch(self, step: str) -> dict[int, float]:
        """The fastest ``step`` (create or delete) for each multi size tried."""
        out: dict[int, float] = {}
        for r in self.runs:
            batch = int(r["batch"])
            out[batch] = min(out.get(batch, r[f"{step}_ms"]), r[f"{step}_ms"])
        return out

    def best_create_cpu(self) -> dict[str, float]:
        """The CPU seconds of the fastest create: the clients' processes' and the server's (if measured)."""
        best = min(self.runs, key=lambda r: r["create_ms"])
        return {k: best[k] for k in ("create_clients_cpu_s", "create_server_cpu_s") if k in best}

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "create_best_ms": self.create_best_ms, "delete_best_ms": self.delete_best_ms,
                **{f"best_{k}": v for k, v in self.best_create_cpu().items()},
                "create_best_by_batch": self.best_by_batch("create"),
                "delete_best_by_batch": self.best_by_batch("delete")}


# ------------------------------------------------------------------------------------- the client side


def pipelined(zk: KazooClient, paths: list[str], add: Callable[[Any, str], None], batch: int = BATCH,
              in_flight: int = IN_FLIGHT) -> None:
    """Sends ``paths`` in multis of ``batch`` operations, ``in_flight`` of them outstanding at a time;
    raises on any failed operation."""
    pending: list[Any] = []
    for start in range(0, len(paths), batch):
        txn = zk.transaction()
        for path in paths[start : start + batch]:
            add(txn, path)
        pending.append(txn.commit_async())
        if len(pending) >= in_flight:
            _check(pending.pop(0).get())
    for result in pending:
        _check(result.get())


def _check(results: list[Any]) -> None:
    failed = [r for r in results if isinstance(r, Exception)]
    if failed:
        raise RuntimeError(f"floor: an operation failed: {failed[0]!r}")


def create_all(zk: KazooClient, paths: list[str], batch: int = BATCH, in_flight: int = IN_FLIGHT) -> None:
    pipelined(zk, paths, lambda txn, p: txn.create(p, DATA, ephemeral=True), batch, in_flight)


def delete_all(zk: KazooClient, paths: list[str], batch: int = BATCH, in_flight: int = IN_FLIGHT) -> None:
    pipelined(zk, paths, lambda txn, p: txn.delete(p), batch, in_flight)


def _in_threads(jobs: list[Callable[[], None]]) -> tuple[int, int]:
    """Runs the jobs at once, one thread each; (start, end) on CLOCK_MONOTONIC, ns."""
    errors: list[BaseException] = []

    def guarded(job: Callable[[], None]) -> None:
        try:
            job()
        except BaseException as exc:  # reported to the harness, not lost in a thread
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(job,)) for job in jobs]
    start = time.monotonic_ns()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    end = time.monotonic_ns()
    if errors:
        raise errors[0]
    return start, end


def child(hosts: str, parent: str, first: int, count: int, clients: int, in_flight: int) -> int:
    """One floor process: ``clients`` sessions, znodes ``first`` .. ``first + count - 1`` between them."""
    zks = [KazooClient(hosts=hosts, timeout=30.0) for _ in range(clients)]
    for zk in zks:
        zk.start(timeout=30)
    names = [f"{parent}/r{i:07d}" for i in range(first, first + count)]
    shares = [names[i::clients] for i in range(clients)]
    print(json.dumps({"event": "ready"}), flush=True)
    for line in sys.stdin:
        step, batch = line.split()[0], int(line.split()[1])
        work = create_all if step == "create" else delete_all
        used = os.times()
        start, end = _in_threads([partial(work, zk, s, batch, in_flight) for zk, s in zip(zks, shares, strict=True)])
        after = os.times()
        cpu = after.user + after.system - used.user - used.system
        print(json.dumps({"event": step, "start": start, "end": end, "cpu": cpu}), flush=True)
    for zk in zks:
        zk.stop()
        zk.close()
    return 0


# ------------------------------------------------------------------------------------ the harness side


class Children:
    """The floor's processes for one (R, clients) pair, connected and waiting for a step."""

    def __init__(self, hosts: str, parent: str, resources: int, clients: int, in_flight: int,
                 python: str = sys.executable) -> None:
        self.processes = max(1, min(clients, os.cpu_count() or 1))
        per = [clients // self.processes + (1 if i < clients % self.processes else 0) for i in range(self.processes)]
        first, self.procs = 0, []
        for i, sessions in enumerate(per):
            count = resources * sessions // clients if i < self.processes - 1 else resources - first
            self.procs.append(subprocess.Popen(
                [python, "-m", "bench.floor", "--child", "--hosts", hosts, "--parent", parent,
                 "--first", str(first), "--count", str(count), "--clients", str(sessions),
                 "--in-flight", str(in_flight)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO))
            first += count
        for proc in self.procs:
            self._answer(proc, "ready")

    def _answer(self, proc: subprocess.Popen[str], event: str) -> dict[str, Any]:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"floor: a child process exited before '{event}' (code {proc.wait(10)})")
        answer: dict[str, Any] = json.loads(line)
        if answer.get("event") != event:
            raise RuntimeError(f"floor: expected '{event}', got {answer}")
        return answer

    def step(self, name: str, batch: int) -> tuple[float, float]:
        """Every process does ``name`` at once in multis of ``batch``: ms from the earliest start to the
        latest end, and the CPU seconds the processes used meanwhile."""
        for proc in self.procs:
            assert proc.stdin is not None
            proc.stdin.write(f"{name} {batch}\n")
            proc.stdin.flush()
        answers = [self._answer(proc, name) for proc in self.procs]
        took = (max(a["end"] for a in answers) - min(a["start"] for a in answers)) / 1e6
        return took, sum(float(a.get("cpu", 0.0)) for a in answers)

    def close(self) -> None:
        for proc in self.procs:
            if proc.stdin is not None:
                proc.stdin.close()
        for proc in self.procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


def measure(hosts: str, resources: int, clients: int, repeats: int = 3, batches: tuple[int, ...] = BATCHES,
            in_flight: int = IN_FLIGHT) -> Floor:
    """The floor for R znodes from ``clients`` sessions: each multi size of ``batches`` in each of ``repeats``
    runs, the fastest counting."""
    admin = KazooClient(hosts=hosts, timeout=30.0)
    admin.start(timeout=30)
    server = server_pid(hosts)
    floor: Floor | None = None
    try:
        for _ in range(repeats):
            parent = f"/bench-floor/{uuid.uuid4().hex[:8]}"
            admin.ensure_path(parent)
            children = Children(hosts, parent, resources, clients, in_flight)
            try:
                floor = floor or Floor(resources, clients, children.processes, in_flight)
                for batch in batches:
                    floor.runs.append(_create_and_delete(children, batch, server))
            finally:
                children.close()
            admin.delete(parent)
    finally:
        admin.stop()
        admin.close()
    assert floor is not None
    return floor


def _create_and_delete(children: Children, batch: int, server: int | None) -> dict[str, float]:
    """One create and delete in multis of ``batch``: their times, and the CPU seconds the create took
    from the clients' processes and from the server (when it runs on this machine)."""
    before = process_cpu_s(server)
    created, clients_cpu = children.step("create", batch)
    after = process_cpu_s(server)
    deleted, _ = children.step("delete", batch)
    run = {"batch": batch, "create_ms": round(created, 1), "delete_ms": round(deleted, 1),
           "create_clients_cpu_s": round(clients_cpu, 2)}
    if before is not None and after is not None:
        run["create_server_cpu_s"] = round(after - before, 2)
    return run


def measure_all(hosts: str, pairs: set[tuple[int, int]], repeats: int, log: Callable[[str], None] = print
                ) -> list[dict[str, Any]]:
    """A floor for each (R, clients) pair, smallest first; an error is recorded, never fatal."""
    out: list[dict[str, Any]] = []
    for resources, clients in sorted(pairs):
        try:
            floor = measure(hosts, resources, clients, repeats)
        except Exception as exc:
            log(f"    floor R={resources} clients={clients}: error {type(exc).__name__}: {exc}")
            out.append({"resources": resources, "clients": clients, "error": f"{type(exc).__name__}: {exc}"})
            continue
        log(f"    floor R={resources:,} from {clients} client(s) in {floor.processes} process(es): create "
            f"{floor.create_best_ms:.0f} ms, delete {floor.delete_best_ms:.0f} ms (best of {repeats})")
        out.append(floor.as_dict())
    return out


def lookup(floors: list[dict[str, Any]] | None, resources: int, clients: int) -> dict[str, Any] | None:
    """The floor measured for (R, clients), if any."""
    for f in floors or []:
        if f.get("resources") == resources and f.get("clients") == clients and "error" not in f:
            return f
    return None


def ratio(value_ms: float | None, floor_ms: float | None) -> float | None:
    if value_ms is None or not floor_ms:
        return None
    return round(value_ms / floor_ms, 2)


def pairs_of(results: dict[str, Any]) -> set[tuple[int, int]]:
    """The (R, clients) floors the results' claim and cold-start figures need: the claim book's R from
    one client; each cold start's R from one client and from N."""
    pairs: set[tuple[int, int]] = set()
    book = results.get("claimbook")
    if book and "error" not in book:
        pairs.add((book["claims"], 1))
    for run in (results.get("coldstart") or {}).get("runs", []):
        pairs |= {(run["resources"], 1), (run["resources"], run["members"])}
    return pairs


def attach_ratios(results: dict[str, Any]) -> None:
    """Each claim and cold-start figure divided by its floor, written beside it (``x_floor``)."""
    floors = results.get("floor")
    book = results.get("claimbook")
    if book and "error" not in book:
        one = lookup(floors, book["claims"], 1)
        if one is not None:
            book["x_floor"] = {"claim": ratio(book["claim_p50_ms"], one["create_best_ms"]),
                               "release": ratio(book["release_p50_ms"], one["delete_best_ms"])}
    for run in (results.get("coldstart") or {}).get("runs", []):
        one, many = lookup(floors, run["resources"], 1), lookup(floors, run["resources"], run["members"])
        for sample in run.get("samples", []):
            settle = sample.get("settle_after_last_join_s")
            if settle is None:
                continue
            sample["x_floor"] = {
                "one_client": ratio(1000 * settle, one["create_best_ms"] if one else None),
                "members_clients": ratio(1000 * settle, many["create_best_ms"] if many else None),
                # issue 30's target: settled within the N clients' floor + 0.7 s of the last join
                "over_members_floor_s": round(settle - many["create_best_ms"] / 1000, 2) if many else None}


def merged(old: list[dict[str, Any]] | None, fresh: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``fresh`` floors in place of the old ones of the same (R, clients)."""
    mine = {(f["resources"], f["clients"]) for f in fresh}
    return sorted([f for f in old or [] if (f["resources"], f["clients"]) not in mine] + fresh,
                  key=lambda f: (f["resources"], f["clients"]))


def markdown_lines(floors: list[dict[str, Any]] | None) -> list[str]:
    """The floor section of docs/benchmarks.md."""
    if not floors:
        return []
    lines = ["", "## ZooKeeper's floor: R ephemeral znodes created and deleted by plain clients", "",
             "The fastest this machine's server creates and deletes R ephemeral znodes (`bench/floor.py`): "
             "kazoo clients with nothing else to do, each its own session, multis of "
             f"{' / '.join(f'{b:,}' for b in BATCHES)} operations, {IN_FLIGHT} in flight per client; one client, "
             "and as many clients as the group has members (in at most one process per core). The fastest of "
             "every multi size and repeat; the fastest per multi size beside it, every run in "
             "`bench/results.json`; the CPU seconds that fastest create took in the clients' processes and in the "
             "server (user + system, from /proc). The claim and cold-start figures below are divided by these "
             "(`x floor`: 1.0 is as fast as ZooKeeper itself goes here).", "",
             "| R | clients | processes | create (best) | delete (best) | CPU of that create: clients / server "
             "| create by multi size | delete by multi size |",
             "|---|---|---|---|---|---|---|---|"]
    for f in floors:
        if "error" in f:
            lines.append(f"| {f['resources']:,} | {f['clients']} | - | {f['error']} | - | - | - | - |")
            continue
        lines.append(f"| {f['resources']:,} | {f['clients']} | {f['processes']} | {f['create_best_ms']:.0f} ms "
                     f"| {f['delete_best_ms']:.0f} ms | {_cpu(f)} | {_by_batch(f['create_best_by_batch'])} "
                     f"| {_by_batch(f['delete_best_by_batch'])} |")
    return [*lines, ""]


def _cpu(floor: dict[str, Any]) -> str:
    """``1.2 s / 1.9 s``: the CPU seconds of the fastest create (\"-\" where not measured: older results, a
    server on another machine)."""
    clients, server = floor.get("best_create_clients_cpu_s"), floor.get("best_create_server_cpu_s")
    if clients is None and server is None:
        return "-"
    return f"{clients if clients is not None else '-'} s / {server if server is not None else '-'} s"


def _by_batch(best: dict[Any, float]) -> str:
    """``100: 12 ms, 1,000: 9 ms`` (JSON turns the sizes into strings)."""
    return ", ".join(f"{int(b):,}: {ms:.0f} ms" for b, ms in sorted(best.items(), key=lambda x: int(x[0])))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.floor", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hosts", default="")
    p.add_argument("--resources", type=int, default=5_000)
    p.add_argument("--clients", type=int, action="append", help="repeatable (default: 1)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--batch", type=int, action="append", help=f"multi size, repeatable (default {BATCHES})")
    p.add_argument("--in-flight", type=int, default=IN_FLIGHT)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--parent", help=argparse.SUPPRESS)
    p.add_argument("--first", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--count", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return child(args.hosts, args.parent, args.first, args.count, (args.clients or [1])[0], args.in_flight)
    cluster = None
    hosts = args.hosts
    if not hosts:
        from bench.zkserver import start_standalone

        cluster = start_standalone(Path(tempfile.mkdtemp(prefix="bench-floor-")))
        hosts = cluster.hosts
    try:
        for clients in args.clients or [1]:
            floor = measure(hosts, args.resources, clients, args.repeats, tuple(args.batch or BATCHES), args.in_flight)
            print(json.dumps(floor.as_dict()), flush=True)
    finally:
        if cluster is not None:
            cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
