"""Chunked assignments on a real ZooKeeper: a member reads only the chunks it lacks, and a header
read just before the coordinator replaced it (and deleted its chunks) is read again, not taken for
corrupt data."""

from __future__ import annotations

from kazoo.client import KazooClient
from rebalanser import storage, write_plan
from rebalanser.config import Algorithm
from rebalanser.paths import GroupPaths
from rebalanser.write_plan import WritePlan
from rebalanser.writer import FencedWriter

MEMBER = "w0-0000000001"


def commit(zk: KazooClient, paths: GroupPaths, plan: WritePlan) -> None:
    """The plan's writes through the coordinator's fenced writer (fenced by a fresh epoch node), then
    the stale chunks deleted, as the coordinator does."""
    zk.ensure_path(paths.epoch)
    writer = FencedWriter(zk, paths.epoch, zk.exists(paths.epoch).version)
    writer.ops = list(plan.ops)
    writer.commit()


def delete_stale(zk: KazooClient, paths: GroupPaths, plan: WritePlan) -> None:
    for stale in plan.stale_parts:
        node, chunk = stale.split("/")
        zk.delete(paths.assignment_part(node, chunk))


def assign(paths: GroupPaths, before: WritePlan | None, names: list[str], generation: int) -> WritePlan:
    written, parts = (before.written, before.parts) if before else ({}, {})
    return write_plan.plan(paths, written, parts, {MEMBER: tuple(sorted(names))}, generation, 1,
                           Algorithm.RESOURCE_BARRIER, False, ())


def test_a_member_reads_only_the_chunks_it_lacks(zk: KazooClient, group_path: str) -> None:
    paths = GroupPaths.of(group_path)
    zk.ensure_path(paths.assignment)
    names = [f"res-{i:05d}" for i in range(20_000)]
    first = assign(paths, None, names, 1)
    commit(zk, paths, first)
    cache: storage.ChunkCache = {}
    data, _ = zk.get(paths.member_assignment(MEMBER))
    assert storage.decode_assignment(zk, paths, MEMBER, data, cache).resources == tuple(names)
    second = assign(paths, first, [*names[:-3], "zz-new"], 2)
    commit(zk, paths, second)
    delete_stale(zk, paths, second)
    reused = set(first.parts[MEMBER]) & set(second.parts[MEMBER])
    assert len(reused) > 100
    for chunk in reused:  # gone from ZooKeeper: only a reader that kept them can decode the value
        zk.delete(paths.assignment_part(MEMBER, chunk))
    data, _ = zk.get(paths.member_assignment(MEMBER))
    value = storage.decode_assignment(zk, paths, MEMBER, data, cache)
    assert value.generation == 2 and value.resources == tuple(sorted([*names[:-3], "zz-new"]))
    assert set(cache) == set(second.parts[MEMBER]), "chunks no longer named are dropped from the cache"


def test_a_header_replaced_while_it_was_read_is_read_again(zk: KazooClient, group_path: str) -> None:
    paths = GroupPaths.of(group_path)
    zk.ensure_path(paths.assignment)
    names = [f"res-{i:05d}" for i in range(5_000)]
    first = assign(paths, None, names, 1)
    commit(zk, paths, first)
    old, _ = zk.get(paths.member_assignment(MEMBER))
    second = assign(paths, first, [f"other-{i:05d}" for i in range(5_000)], 2)
    commit(zk, paths, second)
    delete_stale(zk, paths, second)  # every chunk the old header names is gone
    value = storage.decode_assignment(zk, paths, MEMBER, old)
    assert value.generation == 2 and value.resources[0] == "other-00000"
