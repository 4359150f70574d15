"""The coordinator's write plan on its own: which writes a rebalance makes, in which order."""

from __future__ import annotations

import random

from rebalanser import wire, write_plan
from rebalanser.config import Algorithm
from rebalanser.paths import GroupPaths
from rebalanser.writer import Op

PATHS = GroupPaths.of("/g")
A, B, C = "aa-w0-0000000001", "bb-w1-0000000002", "cc-w2-0000000003"


def kinds(ops: list[Op]) -> list[tuple[str, str]]:
    return [(op.kind, op.path.removeprefix(PATHS.assignment + "/")) for op in ops]


def make(written: dict[str, tuple[str, ...]], parts: dict[str, list[str]], desired: dict[str, tuple[str, ...]],
         force: bool = False, still: tuple[str, ...] = ()) -> write_plan.WritePlan:
    return write_plan.plan(PATHS, written, parts, desired, 7, 3, Algorithm.RESOURCE_BARRIER, force, still)


def test_a_new_member_gets_its_node_created_then_its_header_set() -> None:
    plan = make({}, {}, {A: ("r1",)})
    assert kinds(plan.ops) == [("create", A), ("set", A)]
    assert plan.written == {A: ("r1",)} and plan.parts == {A: []} and plan.stale_parts == []


def test_an_unchanged_member_is_not_written_unless_forced() -> None:
    assert make({A: ("r1",)}, {A: []}, {A: ("r1",)}).ops == []
    assert kinds(make({A: ("r1",)}, {A: []}, {A: ("r1",)}, force=True).ops) == [("set", A)]


def test_a_departed_member_still_stored_is_deleted_parts_first_and_one_gone_already_is_not() -> None:
    written = {A: ("r1",), B: ("r2",), C: ("r3",)}
    parts = {A: [], B: ["p000000000006-00000"], C: []}
    plan = make(written, parts, {A: ("r1", "r2", "r3")}, still=(B,))
    assert kinds(plan.ops) == [("set", A), ("delete", f"{B}/p000000000006-00000"), ("delete", B)]
    assert plan.departed == [B, C], "both are forgotten once committed, the gone one too"


def test_a_large_assignment_goes_in_chunks_created_before_the_header_and_old_chunks_go_after_the_commit() -> None:
    rng = random.Random(1)
    names = tuple(sorted(f"r{rng.getrandbits(64):016x}" for _ in range(60_000)))
    plan = make({A: ()}, {A: ["c0000000000000000"]}, {A: names})
    ops = kinds(plan.ops)
    assert len(ops) > 2 and ops[-1] == ("set", A)
    assert all(kind == "create" and path.startswith(f"{A}/c") for kind, path in ops[:-1])
    assert plan.parts[A] == [path.split("/")[1] for _, path in ops[:-1]]
    assert plan.stale_parts == [f"{A}/c0000000000000000"]


def test_a_move_rewrites_the_chunks_it_touches_and_keeps_the_others() -> None:
    """Bytes per rebalance follow what moved: 20 resources move from A to B, 10,000 each."""
    a, b = [f"a{i:05d}" for i in range(10_000)], [f"b{i:05d}" for i in range(10_000)]
    first = make({}, {}, {A: tuple(a), B: tuple(b)})
    moving = a[::500]
    after: dict[str, tuple[str, ...]] = {A: tuple(x for x in a if x not in moving), B: tuple(sorted(b + moving))}
    second = write_plan.plan(PATHS, first.written, first.parts, after, 8, 3, Algorithm.RESOURCE_BARRIER, False, ())
    whole = sum(op.size for op in first.ops)
    moved = sum(op.size for op in second.ops)
    created = [op for op in second.ops if op.kind == "create"]
    assert len(created) <= 2 * len(moving), f"{len(created)} chunks written for {len(moving)} moved resources"
    assert moved < whole / 4, f"{moved} bytes written to move {len(moving)} of 20,000 (a full write: {whole})"
    kept = set(first.parts[A]) & set(second.parts[A])
    assert len(kept) >= len(first.parts[A]) - len(moving), "untouched chunks are reused, not rewritten"
    assert {p.split("/")[1] for p in second.stale_parts} == (set(first.parts[A]) | set(first.parts[B])) - (
        set(second.parts[A]) | set(second.parts[B]))


def test_the_plan_does_not_change_what_it_was_given() -> None:
    written, parts = {A: ("r1",)}, {A: ["p1"]}
    make(written, parts, {A: ("r2",), B: ("r3",)})
    assert written == {A: ("r1",)} and parts == {A: ["p1"]}


def test_a_generation_without_a_stop_marks_every_assignment_it_writes() -> None:
    plan = write_plan.plan(PATHS, {A: ("r1",)}, {A: []}, {A: ("r1", "r2"), B: ()}, 7, 3, Algorithm.GLOBAL_BARRIER,
                           False, (), stop=False)
    headers = [op for op in plan.ops if op.kind == "set"]
    decoded = [wire.decode_assignment_header(op.data).inline for op in headers]
    assert [(a.member, a.stop) for a in decoded if a is not None] == [(A, False), (B, False)]
