"""CPU seconds of processes, read from ``/proc``: the budget a figure's wall time cannot beat.

    pid = listener_pid(2181)             # the local process serving that TCP port (None: not local)
    before = process_cpu_s(pid)
    ...
    used = process_cpu_s(pid) - before   # user + system seconds, every thread of the process

Two cores running a ZooKeeper server and the Python processes that talk to it can finish no sooner
than the CPU they all use, divided by two: :func:`cpu_bound_s`. A cold start's settle time is held
against its floor that way too (bench/coldstart.py, bench/floor.py).
"""

from __future__ import annotations

import os
from pathlib import Path

PROC = Path("/proc")


def process_cpu_s(pid: int | None) -> float | None:
    """User + system CPU seconds process ``pid`` has used (every thread); None if it is not there."""
    if pid is None:
        return None
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks  # utime, stime: fields 14 and 15 of stat(5)


def cpu_bound_s(*used: float | None) -> float | None:
    """The least wall time this machine's cores need for ``used`` CPU seconds (None if any is unknown)."""
    if any(u is None for u in used):
        return None
    return round(sum(u for u in used if u is not None) / (os.cpu_count() or 1), 2)


def listener_pid(port: int) -> int | None:
    """The local process listening on TCP ``port`` (None: none, or not this machine's)."""
    inodes = _listening_inodes(port)
    if not inodes:
        return None
    wanted = {f"socket:[{inode}]" for inode in inodes}
    for proc in PROC.iterdir():
        if proc.name.isdigit() and _links(proc / "fd") & wanted:
            return int(proc.name)
    return None


def _links(fds: Path) -> set[str]:
    """What a process's file descriptors point at (those it lets us read; one closed meanwhile is left out)."""
    try:
        entries = list(fds.iterdir())
    except OSError:
        return set()
    links = set()
    for fd in entries:
        try:
            links.add(os.readlink(fd))
        except OSError:
            continue
    return links


def _listening_inodes(port: int) -> set[str]:
    """Socket inodes in state LISTEN (0A) on ``port``, IPv4 and IPv6."""
    inodes: set[str] = set()
    for table in ("tcp", "tcp6"):
        try:
            rows = (PROC / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            if cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(cols[9])
    return inodes


def server_pid(hosts: str) -> int | None:
    """The local ZooKeeper server of a one-server connect string (``127.0.0.1:2181``), if local."""
    first = hosts.split(",")[0].split("/")[0]
    host, _, port = first.rpartition(":")
    if host not in ("127.0.0.1", "localhost", "::1", "[::1]") or not port.isdigit():
        return None
    return listener_pid(int(port))
