"""The comparison baseline: kazoo's ``SetPartitioner`` recipe behind the same worker CLI contract.

``python -m bench.adapters.kazoo_worker worker --zk HOSTS --group PATH --id ID --json ...`` emits the
same JSON events as ``rebalanser worker`` (README.md, "The worker CLI"), so the same checkers and benchmarks run
against both. Resources are read from ``G/resources`` (re-read on change: kazoo's recipe takes a
fixed set, so a change of resources restarts the partitioner). kazoo has no fencing token: ticks
carry ``token: 0``. Partitions are released when the recipe says so; a unit of work happens only
while the partitioner reports ACQUIRED and the resource is in its set, the recipe's own check.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.recipe.partitioner import SetPartitioner


def emit(member: str, event: str, ts: int | None = None, **fields: Any) -> None:
    record = {"event": event, "id": member, "ts": ts if ts is not None else time.monotonic_ns(), **fields}
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


class KazooWorker:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.member = args.id
        self.zk = KazooClient(hosts=args.zk, timeout=args.session_timeout)
        self.stop = threading.Event()
        self.resources_changed = threading.Event()
        self.owned: list[str] = []

    def on_state(self, state: str) -> None:
        names = {KazooState.SUSPENDED: "suspended", KazooState.LOST: "lost", KazooState.CONNECTED: "connected"}
        emit(self.member, "session", state=names.get(state, str(state)))

    def resources(self) -> list[str]:
        path = f"{self.args.group}/resources"
        self.zk.ensure_path(path)
        return sorted(self.zk.get_children(path, watch=lambda _e: self.resources_changed.set()))

    def run(self) -> None:
        self.zk.add_listener(self.on_state)
        self.zk.start(timeout=30)
        emit(self.member, "role", role="follower", epoch=0)
        while not self.stop.is_set():
            self.resources_changed.clear()
            partitioner = SetPartitioner(
                self.zk, f"{self.args.group}/kazoo-partitioner", set=self.resources(),
                identifier=self.member, time_boundary=self.args.min_interval,
            )
            self.drive(partitioner)
        self.zk.stop()
        self.zk.close()

    def drive(self, partitioner: SetPartitioner) -> None:
        while not self.stop.is_set():
            if partitioner.failed:
                self.revoke()
                return
            if partitioner.release:
                self.revoke()
                partitioner.release_set()
            elif partitioner.acquired:
                if not self.owned:
                    self.owned = sorted(partitioner)
                    if self.owned:
                        emit(self.member, "assigned", resources=self.owned, token=0)
                if self.resources_changed.is_set():
                    self.revoke()
                    partitioner.finish()
                    return
                self.tick(partitioner)
                self.stop.wait(self.args.tick)
            elif partitioner.allocating:
                partitioner.wait_for_acquire(timeout=1)
        self.revoke()
        partitioner.finish()

    def tick(self, partitioner: SetPartitioner) -> None:
        for resource in self.owned:
            ts = time.monotonic_ns()
            if partitioner.acquired and resource in partitioner:
                emit(self.member, "tick", ts=ts, resource=resource, token=0)

    def revoke(self) -> None:
        if self.owned:
            emit(self.member, "revoked", resources=self.owned)
            self.owned = []


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="kazoo-worker")
    sub = p.add_subparsers(dest="command", required=True)
    w = sub.add_parser("worker")
    w.add_argument("--zk", required=True)
    w.add_argument("--group", required=True)
    w.add_argument("--id", required=True)
    w.add_argument("--algorithm", default="resource-barrier")  # accepted for CLI compatibility
    w.add_argument("--create-group", action="store_true")  # accepted too: the partitioner makes its paths
    w.add_argument("--session-timeout", type=float, default=10.0)
    w.add_argument("--min-interval", type=float, default=2.0, help="SetPartitioner time_boundary")
    w.add_argument("--tick", type=float, default=0.1)
    w.add_argument("--json", action="store_true")
    w.add_argument("--log-level", default="WARNING")
    args, _unknown = p.parse_known_args(argv)
    worker = KazooWorker(args)
    for sig in (signal.SIGTERM, signal.SIGINT):
        # set from a thread: the handler may interrupt the main thread inside the Event's own lock
        signal.signal(sig, lambda *_: threading.Thread(target=worker.stop.set, daemon=True).start())
    worker.run()
    emit(args.id, "stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
