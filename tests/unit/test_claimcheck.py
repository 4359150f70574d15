"""Which claims are verified on the current connection (rebalanser.claimcheck.Verified): pure rules."""

from __future__ import annotations

from rebalanser.claimcheck import Verified


class Connections:
    def __init__(self) -> None:
        self.latest = 0

    def __call__(self) -> int:
        return self.latest


def test_a_claim_is_verified_only_on_the_connection_it_was_read_on() -> None:
    connections = Connections()
    verified = Verified(connections)
    assert not verified.valid("r", 7)  # never read
    connections.latest = 1
    verified.mark({"r": 7}, 1)
    assert verified.valid("r", 7)
    assert not verified.valid("r", 8), "another claim (token) on the same resource is not verified by it"
    connections.latest = 2  # a handshake: nothing verified on connection 1 counts any more
    assert not verified.valid("r", 7)
    assert verified.unverified({"r": 7, "s": 7}) == {"r": 7, "s": 7}
    verified.mark({"r": 7}, 2)
    assert verified.valid("r", 7) and verified.unverified({"r": 7, "s": 7}) == {"s": 7}


def test_a_claim_read_on_a_connection_already_replaced_stays_unverified_and_asks_for_a_re_check() -> None:
    connections = Connections()
    verified = Verified(connections)
    asked: list[bool] = []
    verified.on_stale(lambda: asked.append(True))
    connections.latest = 2
    verified.mark({"r": 7}, 1)  # its read was sent on connection 1, which has gone meanwhile
    assert not verified.valid("r", 7) and asked == [True]
    verified.mark({"r": 7}, 2)
    assert verified.valid("r", 7) and asked == [True]


def test_nothing_is_verified_before_the_first_connection() -> None:
    verified = Verified()
    verified.mark({"r": 7}, 0)
    assert not verified.valid("r", 7)


def test_a_revoked_claim_is_no_longer_verified_until_read_again() -> None:
    connections = Connections()
    connections.latest = 1
    verified = Verified(connections)
    verified.mark({"r": 7, "s": 7}, 1)
    verified.revoke(["r"])  # its watch fired: deleted or replaced
    assert not verified.valid("r", 7) and verified.valid("s", 7)
    verified.mark({"r": 7}, 1)
    assert verified.valid("r", 7)


def test_an_answer_that_comes_after_the_claims_deletion_was_reported_does_not_verify_it() -> None:
    """The re-check's ``setWatches`` (or a read) is answered after the deleted claim's watch fired and was
    handled: marking the whole request's claims must not verify the deleted one again."""
    connections = Connections()
    connections.latest = 1
    verified = Verified(connections)
    verified.gone("r", 7)  # its watch fired while the request was out
    verified.mark({"r": 7, "s": 7}, 1)  # the request's answer: every claim it covered
    assert not verified.valid("r", 7) and verified.valid("s", 7)
    assert verified.unverified({"r": 7, "s": 7}) == {"r": 7}
    verified.mark({"r": 9}, 1)  # claimed again: a new node, a new token
    assert verified.valid("r", 9)


def test_a_read_sent_after_the_report_that_finds_the_claim_verifies_it_again() -> None:
    """Its watch fired because someone set its data (the claim node is still there, still ours, the
    same token): a read sent after that report finds it, and verifies it again. A read sent before the
    report (``since`` older than it), or a mark without ``since``, still never does."""
    connections = Connections()
    connections.latest = 1
    verified = Verified(connections)
    before = verified.reports()
    verified.gone("r", 7)  # its watch fired: deleted, replaced or changed
    verified.mark({"r": 7}, 1, since=before)  # a read sent before the report
    assert not verified.valid("r", 7)
    verified.mark({"r": 7}, 1)  # no since: as before
    assert not verified.valid("r", 7)
    after = verified.reports()
    verified.mark({"r": 7}, 1, since=after)  # a read sent after the report found it
    assert verified.valid("r", 7)
    verified.gone("r", 7)  # its data changed again (a tamper's repair), and the read crossed it
    verified.mark({"r": 7}, 1, since=after)
    assert not verified.valid("r", 7)
    verified.mark({"r": 7}, 1, since=verified.reports())
    assert verified.valid("r", 7)
    assert verified.reported("r", 7) is False and verified.reported("s", 7) is False
    verified.gone("r", 7)
    assert verified.reported("r", 7) and not verified.reported("r", 8)


def test_the_claims_verified_on_the_current_connection_are_picked_out() -> None:
    connections = Connections()
    verified = Verified(connections)
    verified.mark({"r": 7}, 1)
    assert verified.current({"r": 7}) == {}  # before the first connection
    connections.latest = 1
    verified.mark({"s": 7, "t": 9}, 1)
    assert verified.current({"r": 7, "s": 7, "t": 8, "u": 7}) == {"r": 7, "s": 7}
    connections.latest = 2
    assert verified.current({"r": 7, "s": 7}) == {}
