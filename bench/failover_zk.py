"""The confirmed-death failover's ZooKeeper part, timed against a real server (no Kubernetes).

    python -m bench.failover_zk [--repeats 5] [--resources 10000] [--members 50] [--zk HOSTS]

A group of ``--resources`` claims: a dead member's session holds its share (resources / members), another
session holds the rest. The time measured is one call of ``end_instances`` (what the operator's group step
runs once the pod event is in), from its first request to its return, with the operator's session already
connected. The dead member is made by the library's own ``create_member_node`` (so it carries whatever
the library records at join). Where the failover closes the session, ``closeMs`` is the attach and
the close within ``ms``. Prints one JSON line per repeat, then the median, and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient
from rebalanser.instance import instance_digest, new_instance
from rebalanser.membership import create_member_node
from rebalanser.paths import GroupPaths
from rebalanser_operator.failover.choice import EndedInstance, PodRef
from rebalanser_operator.failover.endmember import end_instances

from tests.support.zk import admin_client, purge, serving_cluster

BATCH = 500


def claim_all(zk: KazooClient, paths: GroupPaths, names: list[str]) -> None:
    for start in range(0, len(names), BATCH):
        tx = zk.transaction()
        for name in names[start:start + BATCH]:
            tx.create(paths.owner(name), b"", ephemeral=True)
        assert not any(isinstance(r, Exception) for r in tx.commit())


def one_run(hosts: str, group: str, resources: int, members: int) -> dict[str, float | int]:
    paths = GroupPaths.of(group)
    names = [f"r{i:06d}" for i in range(resources)]
    share = resources // members
    nonce = new_instance()
    pod = PodRef("shop", "w-1", "uid-w-1")
    with admin_client(hosts) as operator, admin_client(hosts) as others, admin_client(hosts) as dead:
        for container in (paths.root, *paths.containers()[1:]):
            operator.ensure_path(container)
        create_member_node(dead, paths, "w1", time.monotonic() + 10, instance_digest=instance_digest(nonce),
                           pod="w-1", pod_uid="uid-w-1", pod_namespace="shop", container="worker")
        claim_all(dead, paths, names[:share])
        claim_all(others, paths, names[share:])
        operator.sync(paths.root)
        closing = _timed_close()
        started = time.perf_counter()
        outcomes = end_instances(operator, group, pod, {EndedInstance("worker", nonce)}, owned=lambda _: True)
        elapsed = time.perf_counter() - started
        closing.restore()
        assert len(outcomes) == 1, outcomes
        left = sum(1 for n in names[:share] if operator.exists(paths.owner(n)) is not None)
        assert left == 0, f"{left} claims of the dead session left"
        purge(operator, group)
    split = {"closeMs": round(closing.seconds * 1000, 2)} if closing.seconds else {}
    return {"ms": round(elapsed * 1000, 2), **split, "deadClaims": share, "claims": resources}


class _timed_close:
    """Times the session close (the attach and the close) where the code has one (issue 28 on)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        try:
            from rebalanser_operator.failover.sessionclose import SessionCloser
        except ImportError:
            self._cls = None
            return
        self._cls, self._real = SessionCloser, SessionCloser.close

        def close(closer: Any, session_id: int, password: bytes) -> Any:
            started = time.perf_counter()
            try:
                return self._real(closer, session_id, password)
            finally:
                self.seconds += time.perf_counter() - started

        SessionCloser.close = close  # type: ignore[method-assign]

    def restore(self) -> None:
        if self._cls is not None:
            self._cls.close = self._real  # type: ignore[method-assign]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--resources", type=int, default=10_000)
    parser.add_argument("--members", type=int, default=50)
    parser.add_argument("--zk", help="an ensemble to use (default: a standalone server started here)")
    args = parser.parse_args()

    def run(hosts: str) -> None:
        times = []
        for i in range(args.repeats):
            result = one_run(hosts, f"/rebalanser-bench/failover-{os.getpid()}-{i}", args.resources, args.members)
            times.append(float(result["ms"]))
            print(json.dumps(result), flush=True)
        print(json.dumps({"medianMs": round(statistics.median(times), 2), "minMs": min(times), "maxMs": max(times),
                          "load": os.getloadavg()}), flush=True)

    if args.zk:
        run(args.zk)
        return
    with tempfile.TemporaryDirectory() as base, serving_cluster(Path(base) / "zk", size=1) as cluster:
        run(cluster.hosts)


if __name__ == "__main__":
    main()
