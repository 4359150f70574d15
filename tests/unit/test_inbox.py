"""The member's event queue (:mod:`rebalanser.inbox`): releases queued in a burst are claimed in one
batch, and the first event of another kind comes next, in its place."""

from __future__ import annotations

from rebalanser import member_events as ev
from rebalanser.inbox import Inbox


def test_a_burst_of_releases_is_one_batch_and_the_next_event_keeps_its_place() -> None:
    inbox = Inbox()
    for event in (ev.ClaimReleased("a"), ev.ClaimReleased("b"), ev.ClaimReleased("c"), ev.BarrierChanged(),
                  ev.ClaimReleased("d")):
        inbox.post(event)
    first = inbox.next()
    assert first == ev.ClaimReleased("a")
    assert inbox.releases("a") == {"a", "b", "c"}
    assert inbox.next() == ev.BarrierChanged()
    assert inbox.next() == ev.ClaimReleased("d")


def test_a_release_of_every_waiting_resource_makes_the_batch_every_one() -> None:
    inbox = Inbox()
    inbox.post(ev.ClaimReleased(None))
    inbox.post(ev.ClaimReleased("b"))
    assert inbox.releases("a") is None
    inbox.post(ev.ClaimReleased("b"))
    assert inbox.releases(None) is None
    assert inbox.releases("z") == {"z"}
