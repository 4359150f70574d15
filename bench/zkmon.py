"""The ZooKeeper server's own counters (``mntr``), and a description of the machine."""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
from typing import Any

from tests.support.zk import ZkCluster, four_letter

#: Counters read before and after every fault (cumulative on the server).
COUNTERS = {
    "packets_received": "zk_packets_received",  # every request packet, pings included
    "bytes_received": "zk_bytes_received_count",  # bytes of every request packet
    "writes": "zk_cnt_updatelatency",  # write requests processed (a multi counts once)
    "reads": "zk_cnt_readlatency",  # read requests processed
    "notify_created": "zk_sum_node_created_watch_count",  # watchers triggered, per event type
    "notify_deleted": "zk_sum_node_deleted_watch_count",
    "notify_changed": "zk_sum_node_changed_watch_count",
    "notify_children": "zk_sum_node_children_watch_count",
}
GAUGES = {"watches": "zk_watch_count", "znodes": "zk_znode_count", "data_bytes": "zk_approximate_data_size"}


def mntr(cluster: ZkCluster) -> dict[str, float]:
    raw = cluster.mntr()
    values: dict[str, float] = {}
    for name, key in {**COUNTERS, **GAUGES}.items():
        try:
            values[name] = float(raw.get(key, "0"))
        except ValueError:
            values[name] = 0.0
    return values


def mntr_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    delta = {name: after[name] - before[name] for name in COUNTERS}
    delta["notifications"] = sum(delta[k] for k in ("notify_created", "notify_deleted", "notify_changed",
                                                    "notify_children"))
    return delta


def zk_version(cluster: ZkCluster) -> str:
    text = four_letter(cluster.servers[0].client_port, "srvr")
    match = re.search(r"version: ([^\s,-]+)", text)
    return match.group(1) if match else "unknown"


def _run(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout.rstrip()
    except (OSError, subprocess.SubprocessError):
        return ""


def machine(cluster: ZkCluster) -> dict[str, Any]:
    model = ""
    try:
        with open("/proc/cpuinfo") as info:
            model = next((line.split(":", 1)[1].strip() for line in info if line.startswith("model name")), "")
    except OSError:
        pass
    java = _run(["java", "-version"]) or subprocess.run(
        ["java", "-version"], capture_output=True, text=True).stderr.splitlines()[0]
    return {
        "nproc": _run(["nproc"]) or str(os.cpu_count()),
        "cpu_model": model,
        "free_h": _run(["free", "-h"]),
        "loadavg": open("/proc/loadavg").read().split()[:3],
        "kernel": platform.release(),
        "python": sys.version.split()[0],
        "kazoo": _version("kazoo"),
        "zookeeper": zk_version(cluster),
        "java": java.splitlines()[0] if java else "",
    }


def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "unknown"
