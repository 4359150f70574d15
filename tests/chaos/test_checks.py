"""The chaos checkers must be able to fail: specified on synthetic evidence."""

from __future__ import annotations

from typing import Any

from tests.chaos.checks import Ledger, window_problems

MS = 1_000_000


def tick(worker: str, resource: str, ts_ms: int, token: int, pid: int = 0) -> dict[str, Any]:
    return {"event": "tick", "id": worker, "resource": resource, "ts": ts_ms * MS, "token": token,
            "_pid": pid or hash(worker) % 1000}


def assigned(worker: str, resources: list[str], ts_ms: int, token: int, pid: int = 0) -> dict[str, Any]:
    return {"event": "assigned", "id": worker, "resources": resources, "ts": ts_ms * MS, "token": token,
            "_pid": pid or hash(worker) % 1000}


def ledger(*events: dict[str, Any]) -> Ledger:
    book = Ledger()
    for event in events:
        book.ingest(event)
    return book


def test_interleaved_owners_overlap() -> None:
    book = ledger(tick("a", "r", 1, 5), tick("b", "r", 2, 6), tick("a", "r", 3, 5))
    assert len(book.overlaps()) == 1
    assert book.overlaps() == [], "each overlap is reported once"


def test_a_clean_handover_is_not_an_overlap() -> None:
    book = ledger(tick("a", "r", 1, 5), tick("a", "r", 2, 5), tick("b", "r", 3, 6))
    assert book.overlaps() == [] and book.token_regressions() == []


def test_ownership_regained_later_is_a_new_episode_not_an_overlap() -> None:
    """kazoo: token always 0; a owns r, b owns it, then a again: three episodes, no overlap."""
    book = ledger(
        assigned("a", ["r"], 0, 0), tick("a", "r", 1, 0), tick("a", "r", 2, 0),
        assigned("b", ["r"], 3, 0), tick("b", "r", 4, 0),
        assigned("a", ["r"], 5, 0), tick("a", "r", 6, 0),
    )
    assert book.overlaps() == []


def test_a_paused_owner_that_resumes_without_a_new_assignment_overlaps() -> None:
    book = ledger(assigned("a", ["r"], 0, 0), tick("a", "r", 1, 0), assigned("b", ["r"], 3, 0),
                  tick("b", "r", 4, 0), tick("a", "r", 5, 0), tick("b", "r", 6, 0))
    assert len(book.overlaps()) == 1


def test_tokens_must_grow_across_owners_and_never_shrink() -> None:
    assert len(ledger(tick("a", "r", 1, 7), tick("b", "r", 3, 7)).token_regressions()) == 1
    assert len(ledger(tick("a", "r", 1, 7), tick("b", "r", 3, 6)).token_regressions()) == 1
    regained = ledger(assigned("a", ["r"], 0, 7), tick("a", "r", 1, 7), assigned("a", ["r"], 2, 7),
                      tick("a", "r", 3, 7))
    assert regained.token_regressions() == [], "the same owner re-granted the same claim (lease renewed)"


def test_window_flags_missing_doubled_dead_stale_and_unbalanced() -> None:
    live = {"a": 1, "b": 2, "c": 3}
    ticks = [tick("a", "r1", 1, 1, pid=1), tick("b", "r1", 2, 2, pid=2), tick("a", "gone", 3, 1, pid=1),
             tick("d", "r2", 4, 1, pid=9), tick("a", "r4", 5, 1, pid=1)]
    problems = window_problems(ticks, {"r1", "r2", "r3", "r4"}, live, 0, 10 * MS)
    text = "\n".join(problems)
    assert "r3: never" in text and "r1: worked on by" in text and "dead worker" in text
    assert "gone: worked on but not a resource" in text and "unbalanced" in text


def test_window_accepts_a_balanced_exclusive_assignment() -> None:
    live = {"a": 1, "b": 2}
    ticks = [tick("a", "r1", 1, 1, pid=1), tick("b", "r2", 2, 2, pid=2), tick("a", "r3", 3, 3, pid=1)]
    assert window_problems(ticks, {"r1", "r2", "r3"}, live, 0, 10 * MS) == []


def session(worker: str, state: str, ts_ms: int, pid: int) -> dict[str, Any]:
    return {"event": "session", "id": worker, "state": state, "ts": ts_ms * MS, "_pid": pid}


def test_a_worker_is_on_standby_from_its_standby_event_until_it_rejoins_whatever_its_connection_does() -> None:
    book = ledger(session("a", "connected", 1, 7), session("a", "standby", 2, 7), session("a", "suspended", 3, 7),
                  session("a", "connected", 4, 7), session("b", "standby", 2, 8), session("b", "rejoining", 5, 8))
    assert book.on_standby() == {7}
