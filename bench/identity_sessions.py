"""The operator's ZooKeeper sessions with many groups and Secrets, counted by the server (issue 29, item 2).

    python -m bench.identity_sessions [--groups 200] [--namespaces 4] [--out FILE] [--without-identity N]

Starts one real ZooKeeper server with the default per-address connection cap (``maxClientCnxns`` left
out: 60), then applies ``--groups`` ResourceGroups, each with a credentials Secret of its own, spread over
``--namespaces`` namespaces, through the operator's own step (``apply_spec``, what the kopf handlers run;
the Kubernetes side is the tests' recording stand-in, the ZooKeeper side is real). Counted afterwards:
the sessions the *server* holds (``cons``: one line per connection with a session id, the probe's own
connection excluded), how many groups are Synced, and how long the applies took.

With the operator's identity the count must stay 1 whatever the number of groups. ``--without-identity
N`` also runs today's behaviour (one session per set of credentials) for N groups, to show the cap: past
about 60 sessions the server refuses connections and groups stay ZooKeeperUnreachable.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Any

from rebalanser_operator.apply.actions import RetryLater, apply_spec
from rebalanser_operator.identity import OperatorIdentity
from rebalanser_operator.runtime import LoopOptions, OperatorContext
from rebalanser_operator.tenancy import AllowedEnsembles, PathRoots, Tenancy
from rebalanser_operator.zkpool import DigestCredentials

from e2e.lab.zk import four_letter, make_cluster
from tests.operator.support import RecordingKube

OPERATOR = OperatorIdentity.digest("rebalanser-operator", os.urandom(24).hex())


def server_sessions(port: int) -> int | None:
    """Connections with a session, as the server lists them (``cons``); the probe has none. None when the
    server answers nothing: the probe itself was refused, the address being at its connection cap."""
    reply = four_letter(port, "cons")
    if not reply.strip():
        return None
    return len([line for line in reply.splitlines() if re.search(r"sid=0x[0-9a-f]+", line)])


def run(groups: int, namespaces: int, identity: OperatorIdentity | None, port: int, hosts: str,
        connect_wait: float) -> dict[str, Any]:
    before = server_sessions(port) or 0
    kube = RecordingKube()
    top = f"/bench-{os.urandom(4).hex()}"
    tenancy = Tenancy(path_roots=PathRoots.parse([f"{top}/{{namespace}}"]), ensembles=AllowedEnsembles.parse([hosts]),
                      cluster_id="bench")
    own: dict[str, Any] = {"identity": identity} if identity is not None else {}
    ctx = OperatorContext(kube=kube, options=LoopOptions(connect_wait=connect_wait), tenancy=tenancy, **own)
    synced = 0
    reasons: dict[str, int] = {}
    started = time.monotonic()
    try:
        for i in range(groups):
            namespace, name = f"ns-{i % namespaces}", f"g-{i}"
            kube.secrets[f"zk-{i}"] = DigestCredentials(f"tenant-{i}", os.urandom(12).hex())
            rt = ctx.group(namespace, name, f"uid-{i}")
            raw = {"zookeeper": {"connect": hosts, "credentialsSecretRef": {"name": f"zk-{i}"}},
                   "resources": [f"r{j}" for j in range(4)]}
            body = {"apiVersion": "rebalanser.io/v1alpha1", "kind": "ResourceGroup", "metadata": {"name": name}}
            try:
                apply_spec(ctx, rt, raw, generation=1, body=body)
            except RetryLater:
                pass
            if rt.sync is not None and rt.sync.ok:
                synced += 1
            else:
                reason = rt.sync.reason if rt.sync is not None else "?"
                reasons[reason] = reasons.get(reason, 0) + 1
        elapsed = time.monotonic() - started
        sessions = server_sessions(port)
        return {"identity": identity is not None, "groups": groups, "namespaces": namespaces, "synced": synced,
                "not_synced": reasons, "pool_connections": ctx.pool.connections(),
                "server_sessions": sessions - before if sessions is not None else "cap reached: cons refused",
                "apply_seconds": round(elapsed, 2)}
    finally:
        ctx.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--groups", type=int, default=200)
    parser.add_argument("--namespaces", type=int, default=4)
    parser.add_argument("--without-identity", type=int, default=0, metavar="N")
    parser.add_argument("--out")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as base:
        cluster = make_cluster(Path(base), size=1)
        server = cluster.servers[0]
        config = server.config.read_text().replace("maxClientCnxns=0\n", "")  # the default cap: 60
        server.config.write_text(config)
        cluster.start()
        try:
            rows = [run(args.groups, args.namespaces, OPERATOR, server.client_port, cluster.hosts, 5.0)]
            print(json.dumps(rows[-1]))
            if args.without_identity:
                rows.append(run(args.without_identity, args.namespaces, None, server.client_port, cluster.hosts, 1.0))
                print(json.dumps(rows[-1]))
            refused = server.log_tail(200000).count("Too many connections")
            rows.append({"server_log_too_many_connections": refused, "maxClientCnxns": "default (60)"})
            print(json.dumps(rows[-1]))
        finally:
            cluster.stop()
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
