"""The evidence checkers must be able to fail: they are specified on synthetic event streams."""

from tests.support.invariants import liveness_problems, overlaps, token_regressions


def tick(worker: str, resource: str, ts: int, token: int, pid: int = 1) -> dict[str, object]:
    return {"event": "tick", "id": worker, "resource": resource, "ts": ts, "token": token, "_pid": pid}


def test_interleaved_ticks_of_two_owners_are_an_overlap() -> None:
    events = [tick("a", "r", 1, 5), tick("b", "r", 2, 6, pid=2), tick("a", "r", 3, 5)]
    assert len(overlaps(events)) == 1


def test_a_clean_handover_is_not_an_overlap() -> None:
    events = [tick("a", "r", 1, 5), tick("a", "r", 2, 5), tick("b", "r", 3, 6, pid=2)]
    assert overlaps(events) == []


def test_a_smaller_token_after_a_larger_one_is_a_regression() -> None:
    events = [tick("a", "r", 1, 7), tick("b", "r", 3, 6, pid=2)]
    assert len(token_regressions(events)) == 1


def test_liveness_flags_missing_doubled_and_dead_owners() -> None:
    events = [tick("a", "r1", 10, 1), tick("b", "r1", 11, 2, pid=2), tick("c", "r2", 12, 3, pid=3)]
    problems = liveness_problems(events, {"r1", "r2", "r3"}, live_pids={1, 2}, start=0, end=100)
    assert any("r3: never" in p for p in problems)
    assert any(p.startswith("r1: worked on by") for p in problems)
    assert any("dead worker" in p for p in problems)
