"""What TLS costs a ZooKeeper client: time from ``KazooClient.start()`` to a session, plain TCP vs TLS
vs mutual TLS, and a read's round trip on each, against one real server (Netty, PEM stores).

    python -m bench.tls_connect [--connects 30] [--reads 300]     # prints one JSON object

Certificates are made for the run (``tests/support/tls.py``); the first connection of each kind (the
JVM warming its TLS code) is measured apart from the rest.
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
from rebalanser.tls import TlsOptions

from tests.support.tls import Pki
from tests.support.zk import serving_cluster


def _client(hosts: str, tls: TlsOptions | None) -> KazooClient:
    return KazooClient(hosts=hosts, timeout=10, **(tls.kazoo_arguments() if tls is not None else {}))


def measure(hosts: str, tls: TlsOptions | None, connects: int, reads: int) -> dict[str, Any]:
    times = []
    for _ in range(connects + 1):
        client = _client(hosts, tls)
        started = time.perf_counter()
        client.start(timeout=60)
        times.append(time.perf_counter() - started)
        client.stop()
        client.close()
    client = _client(hosts, tls)
    client.start(timeout=60)
    try:
        latencies = []
        for _ in range(reads):
            started = time.perf_counter()
            client.get("/")
            latencies.append(time.perf_counter() - started)
    finally:
        client.stop()
        client.close()
    warm = sorted(times[1:])
    return {
        "first_connect_ms": round(times[0] * 1e3, 2),
        "connect_p50_ms": round(statistics.median(warm) * 1e3, 2),
        "connect_p90_ms": round(warm[int(0.9 * (len(warm) - 1))] * 1e3, 2),
        "read_p50_ms": round(statistics.median(latencies) * 1e3, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--connects", type=int, default=30)
    parser.add_argument("--reads", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        pki = Pki.create(base / "pki")
        mutual = TlsOptions.from_directory(str(pki.client_dir("bench")))
        result: dict[str, Any] = {"load_before": os.getloadavg()[0]}
        with serving_cluster(base / "zk", tls=pki.server_tls(base / "stores", client_auth="none")) as cluster:
            result["plain"] = measure(cluster.hosts, None, args.connects, args.reads)
            result["tls"] = measure(cluster.secure_hosts, TlsOptions(ca=mutual.ca), args.connects, args.reads)
        with serving_cluster(base / "zk-mutual", tls=pki.server_tls(base / "stores-mutual")) as cluster:
            result["mutual_tls"] = measure(cluster.secure_hosts, mutual, args.connects, args.reads)
        result["load_after"] = os.getloadavg()[0]
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
