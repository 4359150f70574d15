"""How much room the self-fencing lease leaves on a healthy ensemble, and how it ends after a cut.

    python -m bench.lease                     # T = 4 s, tick 500 ms, 30 s healthy, then a cut
    python -m bench.lease --timeout 10 --tick 2000 --seconds 60

One in-process member (a real ``Client``) joins through a follower of a three-server ensemble
(tests/support/partition.py), so every renewal goes through the leader. The lease's remaining time is
sampled every 5 ms (the library's own view: a measurement, not a verdict), then the follower is cut
off from the other two servers and the time from the cut to the end of the lease is measured.
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from rebalanser.client import Client
from rebalanser.lease import now_ns
from rebalanser.options import Options

from tests.support.partition import partitionable_ensemble
from tests.support.zk import admin_client


def measure(timeout: float, tick_ms: int, seconds: float, base: Path) -> dict[str, Any]:
    with partitionable_ensemble(base, tick_ms=tick_ms, sync_limit=10) as ensemble:
        follower = ensemble.followers()[0]
        with admin_client(ensemble.leader().address) as admin:
            admin.create("/bench-lease/resources/r0", makepath=True)
        client = Client(Options(follower.address, "/bench-lease", create_group=True,
                                session_timeout=timeout, min_interval=0.1))
        client.start()
        try:
            lease = client._loop._lease
            remaining: list[float] = []
            renewals: list[int] = []
            lapses = 0
            last_end = lease.view.expires_ns
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                now, view = now_ns(), lease.view
                if view.expires_ns != last_end:
                    renewals.append(now)
                    last_end = view.expires_ns
                left = (view.expires_ns - now) / 1e9
                lapses += left <= 0
                remaining.append(left)
                time.sleep(0.005)
            gaps = [(b - a) / 1e9 for a, b in itertools.pairwise(renewals)]
            cut = now_ns()
            ensemble.isolate(follower.myid)
            lease_left_at_cut = (lease.view.expires_ns - cut) / 1e9
            time.sleep(max(0.0, lease_left_at_cut) + 0.2)
            ended_after_cut = (lease.view.expires_ns - cut) / 1e9
            ensemble.heal()
        finally:
            client.stop(10)
    return {
        "session_timeout_s": timeout, "tick_ms": tick_ms, "healthy_seconds": seconds,
        "lease_remaining_s": {"min": round(min(remaining), 3), "median": round(statistics.median(remaining), 3),
                              "max": round(max(remaining), 3)},
        "samples_with_lapsed_lease": lapses,
        "renewal_interval_s": {"median": round(statistics.median(gaps), 3), "max": round(max(gaps), 3),
                               "count": len(gaps)},
        "lease_ended_after_cut_s": round(ended_after_cut, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--timeout", type=float, default=4.0, help="session timeout T (s)")
    parser.add_argument("--tick", type=int, default=500, help="ZooKeeper tickTime (ms)")
    parser.add_argument("--seconds", type=float, default=30.0, help="healthy observation window (s)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-lease-") as base:
        print(json.dumps(measure(args.timeout, args.tick, args.seconds, Path(base))))


if __name__ == "__main__":
    main()
