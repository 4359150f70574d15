"""Bytes the coordinator writes to ``G/assignment`` per rebalance, against what moved.

    python -m bench.assignment_bytes [--members 10] [--resources 50000]

Real ZooKeeper, real :class:`rebalanser.client.Client` members (in this process, so one probe counts
every request they send; see :class:`bench.multiworker.Probe`). Each scenario runs twice on a fresh
group: with the library's layout (lists over 256 names in content-addressed chunks) and with every
changed member's list written whole, inline, as before chunks (the encoder's inline threshold raised
past any list: the same coordinator and members otherwise). Changes, one at a time: 10 resources
added, 10 removed, a member joins, a member leaves.

``moved`` and ``changed`` (members whose list changed) come from the members' callbacks, not from
the library's counters: the owner of every resource before and after the change.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient
from rebalanser import Client, Options, wire

from bench.multiworker import Probe
from bench.scenarios import create_resources
from bench.zkserver import start_standalone
from tests.support.recorder import Recorder

CHANGES = ("add 10 resources", "remove 10 resources", "member joins", "member leaves")


@dataclass
class Group:
    zk: KazooClient
    hosts: str
    path: str
    resources: set[str]
    members: dict[str, tuple[Client, Recorder]] = field(default_factory=dict)

    def join(self, member_id: str) -> None:
        holder = Recorder()
        client = Client(Options(self.hosts, self.path, member_id=member_id, create_group=True,
                                session_timeout=10, min_interval=0.2),
                        holder)
        client.start()
        self.members[member_id] = (client, holder)

    def leave(self, member_id: str) -> None:
        client, _ = self.members.pop(member_id)
        client.stop()

    def owners(self) -> dict[str, str]:
        return {r: m for m, (_, h) in self.members.items() for r in _held(h)}

    def settled(self, quiet: float, timeout: float) -> dict[str, str]:
        """Every resource held by exactly one member, balanced, unchanged for ``quiet`` seconds."""
        deadline, last, since = time.monotonic() + timeout, None, time.monotonic()
        while time.monotonic() < deadline:
            held = [_held(h) for _, h in self.members.values()]
            sizes = [len(h) for h in held]
            whole = sum(sizes) == len(self.resources) and set().union(*held) == self.resources
            state = tuple(held)
            if state != last:
                last, since = state, time.monotonic()
            elif whole and max(sizes) - min(sizes) <= 1 and time.monotonic() - since >= quiet:
                return self.owners()
            time.sleep(0.05)
        counts = [len(_held(h)) for _, h in self.members.values()]
        raise TimeoutError(f"not settled in {timeout:.0f} s: held {counts}")

    def close(self) -> None:
        for member_id in list(self.members):
            self.leave(member_id)


def _held(recorder: Recorder) -> frozenset[str]:
    with recorder.lock:
        return frozenset(recorder.owned)


def _change(group: Group, change: str, step: int) -> None:
    if change == "add 10 resources":
        names = [f"zz-{step:03d}-{i}" for i in range(10)]
        for name in names:
            group.zk.create(f"{group.path}/resources/{name}")
        group.resources |= set(names)
    elif change == "remove 10 resources":
        names = sorted(group.resources)[:: max(1, len(group.resources) // 10)][:10]
        for name in names:
            group.zk.delete(f"{group.path}/resources/{name}")
        group.resources -= set(names)
    elif change == "member joins":
        group.join(f"j{step}")
    else:
        group.leave(sorted(group.members)[-1])


@contextlib.contextmanager
def _layout(whole: bool) -> Iterator[None]:
    """``whole``: every list inline (the layout before chunks), by the encoder's own parameter."""
    original = wire.encode_assignment
    if whole:
        wire.encode_assignment = partial(original, inline_names=1 << 30)
    try:
        yield
    finally:
        wire.encode_assignment = original


def run_layout(hosts: str, zk: KazooClient, probe: Probe, members: int, resources: int, whole: bool,
               log: Callable[[str], None]) -> list[dict[str, Any]]:
    path = f"/bench-bytes/{'whole' if whole else 'chunked'}-{uuid.uuid4().hex[:8]}"
    group = Group(zk, hosts, path, set())
    rows: list[dict[str, Any]] = []
    with _layout(whole):
        try:
            for i in range(members):
                group.join(f"m{i:02d}")
            group.resources = set(create_resources(zk, path, resources))
            before = group.settled(quiet=1.0, timeout=300 + resources / 200)
            for step, change in enumerate(CHANGES):
                start = probe.snapshot()["requests"].get("assignment_write_bytes", 0)
                _change(group, change, step)
                after = group.settled(quiet=1.0, timeout=120 + resources / 500)
                written = probe.snapshot()["requests"].get("assignment_write_bytes", 0) - start
                rows.append(_row(change, before, after, written, whole))
                log(f"    {'whole' if whole else 'chunked':8s} {change:20s} moved {rows[-1]['moved']:5d}  "
                    f"changed {rows[-1]['changed']:3d}  {written / 1024:8.1f} KiB")
                before = after
        finally:
            group.close()
            _drop(zk, path)
    return rows


def _drop(zk: KazooClient, path: str) -> None:
    """Deletes the group: its large directories in batched multis (one delete per round trip would
    take minutes at 50,000 resources), then the rest."""
    for directory in (f"{path}/owners", f"{path}/resources"):
        children = zk.get_children(directory) if zk.exists(directory) else []
        for start in range(0, len(children), 1000):
            txn = zk.transaction()
            for child in children[start : start + 1000]:
                txn.delete(f"{directory}/{child}")
            txn.commit()
    zk.delete(path, recursive=True)


def _row(change: str, before: dict[str, str], after: dict[str, str], written: int, whole: bool) -> dict[str, Any]:
    moved = sum(1 for r, m in after.items() if before.get(r) not in (None, m))
    added = sum(1 for r in after if r not in before)
    removed = sum(1 for r in before if r not in after)
    lists: dict[str, tuple[set[str], set[str]]] = {}
    for index, owners in enumerate((before, after)):
        for resource, member in owners.items():
            lists.setdefault(member, (set(), set()))[index].add(resource)
    changed = sum(1 for old, new in lists.values() if old != new)
    return {"change": change, "layout": "whole" if whole else "chunked", "moved": moved + added + removed,
            "changed": changed, "bytes": written}


def run(members: int = 10, resources: int = 50_000, log: Callable[[str], None] = print,
        hosts: str | None = None) -> dict[str, Any]:
    """Both layouts, every change; ``hosts``: an existing ZooKeeper (else a fresh standalone one)."""
    probe = Probe("/bench-bytes")
    probe.install()
    with contextlib.ExitStack() as stack:
        if hosts is None:
            cluster = start_standalone(Path(stack.enter_context(tempfile.TemporaryDirectory())) / "zk")
            stack.callback(cluster.stop)
            hosts = cluster.hosts
        zk = KazooClient(hosts=hosts, timeout=30)
        zk.start(timeout=30)
        stack.callback(zk.stop)
        rows = [row for whole in (False, True) for row in run_layout(hosts, zk, probe, members, resources, whole, log)]
    return {"members": members, "resources": resources, "rows": rows}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--members", type=int, default=10)
    p.add_argument("--resources", type=int, default=50_000)
    args = p.parse_args(argv)
    print(json.dumps(run(args.members, args.resources), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())


# -- the report (bench/report.py) -------------------------------------------------------------------

BYTES_PER_UNIT = 2048  # the target: bytes per rebalance ≤ this x (members whose list changed + moved)


def _per_unit(row: Mapping[str, Any]) -> float:
    return float(row["bytes"]) / max(1, int(row["changed"]) + int(row["moved"]))


def targets(result: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    name = "bytes written per rebalance ∝ members whose list changed + moved"
    rows = (result or {}).get("rows", [])
    chunked = [r for r in rows if r["layout"] == "chunked"]
    if not chunked:
        return [{"target": name, "met": None, "value": "not measured", "detail": str((result or {}).get("error", ""))}]
    worst = max(chunked, key=_per_unit)
    whole = [r for r in rows if r["layout"] == "whole"]
    contrast = max(whole, key=_per_unit) if whole else None
    detail = f"worst: {worst['change']} at N={result['members']} R={result['resources']:,}"  # type: ignore[index]
    if contrast is not None:
        detail += (f"; every changed list written whole: up to {_per_unit(contrast) / 1024:.1f} KiB per unit "
                   f"({contrast['change']})")
    return [{"target": name, "met": _per_unit(worst) <= BYTES_PER_UNIT,
             "value": f"≤ {_per_unit(worst) / 1024:.2f} KiB x (changed + moved) in every rebalance",
             "detail": detail}]


def markdown_lines(result: Mapping[str, Any] | None) -> list[str]:
    lines = ["## Bytes written per rebalance", ""]
    if not result or not result.get("rows"):
        why = str((result or {}).get("error") or (result or {}).get("skipped") or "")
        return [*lines, f"Not measured in this run{': ' + why if why else ''}.", ""]
    lines += [
        f"`python -m bench.assignment_bytes`: N = {result['members']} members, R = {result['resources']:,} "
        "resources, real ZooKeeper and members, one change at a time. Bytes are the serialized write "
        "requests to `G/assignment` counted in the client; moved and changed lists come from the "
        "members' callbacks. `whole` is the same run with every changed list written whole, inline (the "
        "layout before chunks).",
        "",
        "| change | moved | lists changed | chunked | whole | chunked ÷ whole |",
        "|---|---|---|---|---|---|",
    ]
    by_layout = {(r["change"], r["layout"]): r for r in result["rows"]}
    for change in CHANGES:
        chunked, whole = by_layout.get((change, "chunked")), by_layout.get((change, "whole"))
        if chunked is None or whole is None:
            continue
        ratio = chunked["bytes"] / whole["bytes"] if whole["bytes"] else 0.0
        lines.append(f"| {change} | {chunked['moved']:,} | {chunked['changed']} | {chunked['bytes'] / 1024:.1f} KiB "
                     f"| {whole['bytes'] / 1024:.1f} KiB | {ratio:.2f} |")
    if result.get("note"):
        lines += ["", f"Note: {result['note']}."]
    return [*lines, ""]
