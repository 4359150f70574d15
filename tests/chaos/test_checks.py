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


def test_only_the_failovers_close_of_a_live_member_excuses_its_overlap() -> None:
    """``outside-deleter@failover`` closes the session of a member that lives: it may work until it
    learns of the expiry (within T) beside the owner that took its resource after the close; not after
    it learned, not on another fault's step, not for another member, not beside a smaller token."""
    from tests.chaos.checks import Episode
    from tests.chaos.faults import closed_by_mistake
    from tests.chaos.step import FaultRecord

    lease = 2_000 * MS
    close = FaultRecord("outside-deleter", "w3", 100 * MS, 108 * MS,
                        "the failover ended live m-w3-1: its session closed")
    expired = {"event": "session", "id": "w3", "state": "expired", "ts": 175 * MS, "_pid": 3}
    book = ledger(expired)

    def pair(old_last: int, new_token: int = 24, worker: str = "w3") -> tuple[Episode, Episode]:
        return (Episode("r09", worker, 3, 23, 0, 10 * MS, old_last * MS, 20),
                Episode("r09", "w1", 1, new_token, 1, 127 * MS, 600 * MS, 6))

    assert closed_by_mistake([close], book, "r09", *pair(160), lease)
    assert not closed_by_mistake([close], book, "r09", *pair(180), lease), "work after it learned"
    assert not closed_by_mistake([close], book, "r09", *pair(160, new_token=22), lease), "a smaller token"
    assert not closed_by_mistake([close], book, "r09", *pair(160, worker="w4"), lease), "another member"
    other = FaultRecord("outside-deleter", "w3", 100 * MS, 108 * MS, "an administrator deleted the claim")
    assert not closed_by_mistake([other], book, "r09", *pair(160), lease), "not a session close"
    assert not closed_by_mistake([close], ledger(), "r09", *pair(160), lease), "it never learned"
    assert not closed_by_mistake([close], book, "r09", *pair(160), 50 * MS), "past the lease"
