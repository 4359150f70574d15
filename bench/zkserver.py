"""The benchmark's own ZooKeeper server: the test support's configuration, a larger heap.

``tests.support.zk`` starts servers with a 256 MB heap, enough for the test suite but not for a group
of 100,000 resources with 200 members (every claim is a znode, every member reads its assignment):
the server dies with ``OutOfMemoryError``. Same config, same jars, same flags otherwise.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests.support.zk import ZkCluster, ZkServer, make_cluster

HEAP = "2g"


def start_server(server: ZkServer, heap: str = HEAP) -> None:
    if server.proc is not None and server.proc.poll() is None:
        return
    log = open(server.data_dir / "server.log", "ab")  # noqa: SIM115 - owned by the child
    java = shutil.which("java") or "java"
    server.proc = subprocess.Popen(
        [
            java, f"-Xmx{heap}", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
            "-Dzookeeper.admin.enableServer=false",
            "-Dzookeeper.4lw.commands.whitelist=*",
            f"-Dlogback.configurationFile={server.data_dir / 'logback.xml'}",
            "-cp", f"{server.lib}/*",
            "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(server.config),
        ],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
    )
    log.close()


def start_standalone(base: Path, heap: str = HEAP) -> ZkCluster:
    cluster = make_cluster(base, size=1)
    for server in cluster.servers:
        start_server(server, heap)
    cluster.wait_serving()
    return cluster
