"""A batch of lost claims (:meth:`ResourceWork.claims_lost`) whose reads are interrupted forgets none of
them: each is handled again at the next report, so none stays owned without a claim (found by the
explorer: ``reconnect-start`` #24 ``drop``, a resource never worked on again)."""

from __future__ import annotations

import threading
from typing import Any, cast

import pytest
from kazoo.exceptions import ConnectionLoss
from rebalanser import member_events as ev
from rebalanser import resource_state as rs
from rebalanser import resource_work as rw
from rebalanser.callbacks import CallbackRunner
from rebalanser.claims import ClaimBook
from rebalanser.handler import Handler
from rebalanser.lease import Lease
from rebalanser.metrics import NoMetrics


class Book:
    """The claim book's two calls that ``claims_lost`` makes; ``cut`` names a claim whose read fails."""

    def __init__(self, held: dict[str, int]) -> None:
        self.held = dict(held)
        self.cut: str | None = None
        self.forgotten: list[str] = []

    def still_held(self, resource: str, token: int) -> bool:
        if resource == self.cut:
            raise ConnectionLoss()
        return False  # deleted by someone else

    def forget(self, resource: str, token: int) -> bool:
        if self.held.get(resource) != token:
            return False
        del self.held[resource]
        self.forgotten.append(resource)
        return True


def _unreachable(*_: Any) -> Any:
    raise AssertionError("not used here")


def work_over(book: Book, posted: list[ev.Event]) -> rw.ResourceWork:
    work = rw.ResourceWork(Handler(), NoMetrics(), Lease(0.8), CallbackRunner("test-callbacks"), (1.0, 1.0),
                           rw.Context(book=lambda: cast(ClaimBook, book), prober=lambda: None,
                                      session_timeout=lambda: 4.0, seat=lambda: rw.Seat("n", 7),
                                      moved=threading.Event(), post=posted.append, report=lambda _e: None))
    work.set_table(rs.Resources(owned={"r1": (5, 7, "n"), "r2": (5, 7, "n")}))
    return work


def test_claims_lost_together_are_stopped_in_one_callback() -> None:
    book, posted = Book({"r1": 5, "r2": 5}), []
    work = work_over(book, posted)
    work.claim_deleted("r1", 5)
    work.claim_deleted("r2", 5)
    effects = work.claims_lost()
    assert rs.StopCallback(frozenset({"r1", "r2"})) in effects
    assert work.claims_lost() == [], "the second report's event finds them handled"


def test_a_batch_whose_read_is_interrupted_forgets_nothing_and_is_handled_at_the_next_report() -> None:
    book, posted = Book({"r1": 5, "r2": 5}), []
    work = work_over(book, posted)
    work.claim_deleted("r1", 5)
    work.claim_deleted("r2", 5)
    book.cut = "r2"  # r1 is read (gone), then the connection drops on r2's read
    with pytest.raises(ConnectionLoss):
        work.claims_lost()
    assert book.forgotten == [], "a claim forgotten but never stopped stays owned and is never claimed again"
    assert set(work.table.owned) == {"r1", "r2"}
    book.cut = None
    effects = work.claims_lost()  # the next report (the re-check after reconnecting), or its event
    assert rs.StopCallback(frozenset({"r1", "r2"})) in effects
    assert sorted(book.forgotten) == ["r1", "r2"]
    assert set(work.table.stopping) == {"r1", "r2"}
