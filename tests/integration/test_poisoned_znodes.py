"""Poisoned znodes: values an administrator (or a buggy tool) writes into every znode the library reads.

Each poison is a value the library's own writer never produces: a number beyond every float
(``1e999``), JSON nested a hundred thousand levels deep, a zlib stream that inflates to half a GiB,
resource names that are not resource names. None of it may stop a member or a group: it is reported
(an ``error`` event / ``on_error``) and then ignored, or overwritten by the coordinator.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from prometheus_client import CollectorRegistry
from rebalanser.client import Client
from rebalanser.errors import CorruptDataError
from rebalanser.options import Options
from rebalanser.prometheus import PrometheusMetrics

from tests.integration.conftest import add_resources
from tests.support.recorder import Recorder
from tests.support.workers import Group, Worker, wait_for

pytestmark = pytest.mark.zk

RESOURCES = ["r0", "r1", "r2", "r3"]
GHOST = f"{'0' * 32}-ghost-{0:010d}"  # a well-formed member node name of a member long gone
DEEP = b"[" * 100_000 + b"]" * 100_000


def inline_blob(payload: bytes) -> bytes:
    """An assignment header holding its value inline (the format's ``RB1I`` kind)."""
    return b"RB1I" + zlib.compress(payload)


def assignment_payload(resources: list[str], epoch: object = 1, generation: object = 1) -> bytes:
    return json.dumps({"epoch": epoch, "generation": generation, "resources": resources,
                       "algorithm": "ResourceBarrier"}).encode().replace(b'"@INF@"', b"1e999")


def bomb(inflated: int) -> bytes:
    """An inline assignment header whose value inflates to ``inflated`` bytes of JSON whitespace."""
    compressor = zlib.compressobj(9)
    chunk = b" " * (1 << 20)
    parts = [b"RB1I"]
    for _ in range(inflated // len(chunk)):
        parts.append(compressor.compress(chunk))
    parts.append(compressor.compress(b"[]") + compressor.flush())
    return b"".join(parts)


# (case id, znode under G, data, whether a rejection must be reported)
POISONS: list[tuple[str, str, bytes, bool]] = [
    ("barrier-1e999", "barrier", b'{"phase":"stop","generation":1e999,"epoch":1}', True),
    ("barrier-deep", "barrier", DEEP, True),
    ("state-1e999", "state", b'{"generation":1e999,"epoch":1}', True),
    ("state-deep", "state", DEEP, True),
    ("state-generation-max-int", "state", b'{"generation":9223372036854775807}', True),
    ("assignment-inline-deep", f"assignment/{GHOST}", inline_blob(DEEP), True),
    ("assignment-epoch-1e999", f"assignment/{GHOST}", inline_blob(assignment_payload(["r0"], epoch="@INF@")), True),
    ("assignment-chunked-1e999", f"assignment/{GHOST}",
     b"RB1C" + zlib.compress(b'{"epoch":1,"generation":1e999,"count":1,"chunks":["c0000000000000000"]}'), True),
    ("assignment-chunked-deep", f"assignment/{GHOST}", b"RB1C" + zlib.compress(DEEP), True),
    ("stopped-generation-5000-digits", f"stopped/g{'9' * 5000}", b"", True),
    ("config-1e999", "config", b'{"minIntervalSeconds":1e999}', True),
    ("config-deep", "config", DEEP, True),
    ("resource-data-deep", "resources/r0", DEEP, False),
]


def plant(zk: KazooClient, group_path: str, where: str, data: bytes) -> str:
    path = f"{group_path}/{where}"
    if zk.exists(path) is None:
        zk.create(path, data, makepath=True)
    else:
        zk.set(path, data)
    return path


def rejections(handlers: list[Recorder], path: str) -> list[CorruptDataError]:
    found = []
    for handler in handlers:
        found += [e for e in list(handler.errors) if isinstance(e, CorruptDataError) and getattr(e, "path", "") == path]
    return found


def owners(handlers: list[Recorder]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for handler in handlers:
        for name in list(handler.owned):
            counts[name] = counts.get(name, 0) + 1
    return counts


@pytest.fixture
def registry() -> CollectorRegistry:
    """The clients' metrics: one registry per test, each member's series labelled with its id."""
    return CollectorRegistry()


def bad_data_reports(registry: CollectorRegistry, kind: str) -> float:
    return sum(registry.get_sample_value("rebalanser_bad_data_total", {"member": member, "kind": kind}) or 0.0
               for member in ("m1", "m2"))


@pytest.fixture
def clients(
    zk_hosts: str, group_path: str, registry: CollectorRegistry
) -> Iterator[Callable[[str, str], tuple[Client, Recorder]]]:
    started: list[Client] = []

    def start(member: str, algorithm: str = "resource-barrier") -> tuple[Client, Recorder]:
        handler = Recorder()
        from rebalanser.config import Algorithm

        client = Client(Options(zk_hosts, group_path, member_id=member, create_group=True,
                                session_timeout=2, min_interval=0.1,
                                algorithm=Algorithm.parse(algorithm),
                                metrics=PrometheusMetrics(registry, {"member": member})), handler)
        started.append(client)
        client.start(timeout=20)
        return client, handler

    yield start
    for client in started:
        client.stop(timeout=30)


@pytest.mark.parametrize("algorithm", ["resource-barrier", "global-barrier"])
@pytest.mark.parametrize("case, where, data, reported", POISONS, ids=[p[0] for p in POISONS])
def test_a_group_starts_and_works_over_poisoned_znodes(
    zk: KazooClient, group_path: str, clients: Callable[[str, str], tuple[Client, Recorder]],
    registry: CollectorRegistry, algorithm: str, case: str, where: str, data: bytes, reported: bool,
) -> None:
    """Members that start (or restart) into a group holding bad data: every one comes up and works."""
    kind = where.split("/")[0]
    add_resources(zk, group_path, RESOURCES)
    path = plant(zk, group_path, where, data)
    _, h1 = clients("m1", algorithm)
    _, h2 = clients("m2", algorithm)
    handlers = [h1, h2]
    wait_for(lambda: owners(handlers) == dict.fromkeys(RESOURCES, 1) and len(h1.owned) == len(h2.owned) == 2,
             30, lambda: f"not settled over poisoned {where}: {[sorted(h.owned) for h in handlers]}")
    if reported:
        wait_for(lambda: bool(rejections(handlers, path)), 10,
                 lambda: f"{where} was not reported; errors: {[repr(e)[:120] for h in handlers for e in h.errors]}")
        wait_for(lambda: bad_data_reports(registry, kind) == len(rejections(handlers, path)), 10,
                 lambda: f"the metric ({bad_data_reports(registry, kind)}) does not count every report once "
                 f"({len(rejections(handlers, path))})")
    else:
        assert not any(isinstance(e, CorruptDataError) for h in handlers for e in h.errors)


@pytest.mark.parametrize("where", ["state", f"assignment/{GHOST}"])
def test_the_coordinator_overwrites_poisoned_records(
    zk: KazooClient, group_path: str, clients: Callable[[str, str], tuple[Client, Recorder]], where: str
) -> None:
    add_resources(zk, group_path, RESOURCES)
    path = plant(zk, group_path, where, DEEP)
    _, handler = clients("m1", "resource-barrier")
    wait_for(lambda: handler.owned == set(RESOURCES), 30, lambda: f"owned {sorted(handler.owned)}")

    def repaired() -> bool:
        stat = zk.exists(path)
        return stat is None or zk.get(path)[0] != DEEP

    wait_for(repaired, 10, f"{where} still holds the poison")


def test_a_resource_name_that_is_no_name_in_an_assignment_is_rejected(
    zk: KazooClient, group_path: str, clients: Callable[[str, str], tuple[Client, Recorder]]
) -> None:
    """``a/b`` is no resource name: claiming it would loop on NoNode under ``G/owners/a`` for good."""
    add_resources(zk, group_path, ["r0"])
    client, handler = clients("m1", "resource-barrier")
    wait_for(lambda: handler.owned == {"r0"}, 20, "never assigned")
    path = f"{group_path}/assignment/{client.member_node}"
    zk.set(path, inline_blob(assignment_payload(["a/b", "r0"], generation=1000)))
    wait_for(lambda: bool(rejections([handler], path)), 10, "the assignment naming 'a/b' was not reported")
    add_resources(zk, group_path, ["r1"])
    wait_for(lambda: handler.owned == {"r0", "r1"}, 20, lambda: f"owned {sorted(handler.owned)}")
    assert client.owns("r0") and client.owns("r1")


def test_the_status_of_a_poisoned_group_lists_what_was_rejected(
    zk: KazooClient, zk_hosts: str, group_path: str
) -> None:
    """``rebalanser status`` (and the operator's status mirror, which reads the same way) over bad data."""
    add_resources(zk, group_path, RESOURCES)
    plant(zk, group_path, "state", DEEP)
    zk.create(f"{group_path}/clients/{GHOST}", b"", ephemeral=True, makepath=True)
    plant(zk, group_path, f"assignment/{GHOST}", inline_blob(assignment_payload(["r0"], epoch="@INF@")))
    out = subprocess.run([sys.executable, "-m", "rebalanser.cli", "status", "--zk", zk_hosts, "--group", group_path,
                          "--json"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    status = json.loads(out.stdout)
    assert status["members"] == ["ghost"] and status["lastRebalance"] is None and status["resources"] == 4
    assert any(r.startswith("G/state") for r in status["rejected"]), status["rejected"]
    assert any(r.startswith("assignment of ghost") for r in status["rejected"]), status["rejected"]


# -- real worker processes: the `error` event -----------------------------------------------------


def errors_at(worker: Worker, path: str) -> list[dict[str, object]]:
    return [e for e in worker.of("error") if e.get("path") == path and e.get("reason")]


def ticking_after(worker: Worker, ts: int) -> set[str]:
    return {str(e["resource"]) for e in worker.of("tick") if int(e["ts"]) > ts}


def test_workers_report_poison_written_under_them_and_keep_working(
    zk: KazooClient, zk_hosts: str, group_path: str, tmp_path: Path
) -> None:
    group = Group(zk_hosts, group_path, tmp_path, algorithm="global-barrier")
    try:
        add_resources(zk, group_path, RESOURCES)
        a, b = group.spawn("a"), group.spawn("b")
        group.wait_settled(set(RESOURCES), 30)
        barrier = plant(zk, group_path, "barrier", b'{"phase":"stop","generation":1e999,"epoch":1}')
        for worker in (a, b):
            wait_for(lambda w=worker: bool(errors_at(w, barrier)), 15,  # type: ignore[misc]
                     lambda w=worker: f"{w.member_id} reported no error for {barrier}: {w.snapshot()[-5:]}")
        reported = max(int(e["ts"]) for w in (a, b) for e in errors_at(w, barrier))  # type: ignore[call-overload]
        wait_for(lambda: all(ticking_after(w, reported) == w.owned() != set() for w in (a, b)), 15,
                 "the workers stopped working after the poison")
        add_resources(zk, group_path, ["r4"])  # the next rebalance overwrites the poisoned barrier, even one
        wait_for(lambda: barrier_completed(zk, barrier), 30,  # in which nobody stops
                 lambda: f"the rebalance for r4 left the poisoned barrier: {zk.get(barrier)[0]!r}")
        b.kill()
        group.spawn("b")  # a restarted member comes up fine
        group.spawn("c")
        group.wait_settled({*RESOURCES, "r4"}, 60)
        assert all(w.alive for w in group.live()) and len(group.live()) == 3
        # The restarted b waits out its killed namesake's session, so its join can start one more round after
        # the group first settles: wait for a round to complete rather than read the barrier mid-round.
        wait_for(lambda: barrier_completed(zk, barrier), 60,
                 lambda: f"no completed round overwrote the poisoned barrier: {zk.get(barrier)[0]!r}")
    finally:
        group.stop_all()


def barrier_completed(zk: KazooClient, barrier: str) -> bool:
    value = json.loads(zk.get(barrier)[0])
    return value["phase"] == "assigned" and isinstance(value["generation"], int)


def _vm_size(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmSize")


def test_a_zlib_bomb_in_an_assignment_is_rejected_within_a_memory_limit(
    zk: KazooClient, zk_hosts: str, group_path: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Like a pod with a memory limit: 384 MiB of headroom, and an assignment inflating to 512 MiB."""
    monkeypatch.setenv("MALLOC_ARENA_MAX", "2")  # keeps the worker's address space from growing by itself
    group = Group(zk_hosts, group_path, tmp_path)
    try:
        add_resources(zk, group_path, ["r0"])
        worker = group.spawn("a")
        group.wait_settled({"r0"}, 30)
        assert worker.proc is not None
        limit = _vm_size(worker.proc.pid) + (384 << 20)
        resource.prlimit(worker.proc.pid, resource.RLIMIT_AS, (limit, limit))
        node = next(iter(zk.get_children(f"{group_path}/assignment")))
        path = plant(zk, group_path, f"assignment/{node}", bomb(512 << 20))
        wait_for(lambda: bool(errors_at(worker, path)), 30,
                 lambda: f"the bomb was not reported: {worker.snapshot()[-5:]}")
        reported = max(int(e["ts"]) for e in errors_at(worker, path))  # type: ignore[call-overload]
        wait_for(lambda: ticking_after(worker, reported) == {"r0"}, 15, "the worker stopped working on r0")
        add_resources(zk, group_path, ["r1"])
        group.wait_settled({"r0", "r1"}, 30)
    finally:
        group.stop_all()


def test_one_change_to_an_assignment_read_many_times_unchanged_is_read_once(
    zk: KazooClient, group_path: str, clients: Callable[[str, str], tuple[Client, Recorder]]
) -> None:
    """Every barrier record makes a member read its assignment again, arming the watch on it again.
    kazoo keeps a node's watchers in a set until the watch fires, so a fresh watcher per read piled up,
    and one change then made the member read the node once per earlier read. A zlib bomb planted there
    in a chaos campaign cost ~0.4 s a read, 57 reads in a row: the member handled nothing else for 22 s."""
    add_resources(zk, group_path, ["r0"])
    client, handler = clients("m1", "resource-barrier")
    wait_for(lambda: handler.owned == {"r0"}, 20, "never assigned")
    barrier = f"{group_path}/barrier"
    for generation in range(10_001, 10_021):  # "assigned" records: each one is read, then the assignment
        record = json.dumps({"phase": "assigned", "generation": generation, "epoch": client.epoch}).encode()
        if zk.exists(barrier) is None:
            zk.create(barrier, record)
        else:
            zk.set(barrier, record)
        time.sleep(0.05)  # paces the writes so that the member reads most of them one by one
    path = f"{group_path}/assignment/{client.member_node}"
    zk.set(path, b"RB1C not a header")
    wait_for(lambda: bool(rejections([handler], path)), 10, "the bad assignment was not reported")
    add_resources(zk, group_path, ["r1"])  # the coordinator's next write replaces the bad record
    wait_for(lambda: handler.owned == {"r0", "r1"}, 20, lambda: f"owned {sorted(handler.owned)}")
    assert len(rejections([handler], path)) <= 2, (
        f"one bad write was read {len(rejections([handler], path))} times: a watcher per earlier read")
