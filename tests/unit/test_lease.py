"""The lease and the evidence that renews it (pure logic, no ZooKeeper)."""

from __future__ import annotations

import time

from rebalanser.lease import RELAY_SHARE, LeaderEvidence, Lease, LeaseView, now_ns

S = 1_000_000_000  # one second in ns
RELAY = S  # T = 4 s: relay window T/4


def test_the_handshake_is_proven_at_once_and_resets_the_evidence_of_an_earlier_connection() -> None:
    evidence = LeaderEvidence()
    assert evidence.connected(1, 10 * S) == 10 * S
    evidence.answered(1, 11 * S, 11 * S + 5, RELAY)
    assert evidence.connected(1, 10 * S) == 10 * S, "the same connection again changes nothing"
    assert evidence.connected(2, 20 * S) == 20 * S
    # A sync of connection 2 cannot prove the pending sync of connection 1: it went to another server.
    assert evidence.answered(2, 30 * S, 30 * S + 5, RELAY) == 20 * S


def test_an_answered_sync_is_proven_only_by_a_later_sync_sent_a_relay_window_after_its_answer() -> None:
    evidence = LeaderEvidence()
    evidence.connected(1, 0)
    assert evidence.answered(1, 1 * S, 1 * S + 10, RELAY) == 0  # nothing proves it yet
    assert evidence.answered(1, 2 * S, 2 * S + 10, RELAY) == 0  # sent 1 s - 10 ns after its answer: too early
    assert evidence.answered(1, 2 * S + 10, 2 * S + 20, RELAY) == 1 * S
    assert evidence.answered(1, 3 * S + 20, 3 * S + 30, RELAY) == 2 * S + 10


def test_the_proven_instant_never_moves_back() -> None:
    evidence = LeaderEvidence()
    evidence.connected(1, 5 * S)
    evidence.answered(1, 1 * S, 1 * S + 1, RELAY)  # sent before the handshake's instant
    assert evidence.answered(1, 3 * S, 3 * S + 1, RELAY) == 5 * S


def test_unanswered_or_foreign_answers_prove_nothing() -> None:
    evidence = LeaderEvidence()
    evidence.connected(3, 0)
    assert evidence.answered(2, 1 * S, 1 * S + 1, RELAY) == 0  # an older connection's answer
    assert evidence.answered(3, 2 * S, 1 * S, RELAY) == 0  # answered before it was sent: ignored
    assert evidence.answered(3, 9 * S, 9 * S + 1, RELAY) == 0, "neither was kept as pending"


def test_steady_probing_keeps_the_proven_instant_within_a_relay_window_and_a_period_of_the_newest_send() -> None:
    """Probes every T/10 answered within ``rtt``: the proven instant trails the newest send by less than
    T/4 + T/10 + rtt (the bound the lease length is planned with in docs/protocol.md)."""
    timeout = 4 * S
    period, relay = timeout // 10, int(timeout * RELAY_SHARE)
    evidence = LeaderEvidence()
    evidence.connected(1, 0)
    rtt = 2_000_000
    worst = 0
    for i in range(1, 100):
        sent = i * period
        proven = evidence.answered(1, sent, sent + rtt, relay)
        if sent > relay + 2 * period:
            worst = max(worst, sent - proven)
    assert relay < worst < relay + period + rtt


def test_the_lease_runs_from_the_proven_instant_for_its_share_of_the_timeout() -> None:
    lease = Lease(0.8)
    start = now_ns()
    lease.renew(7, start, 4.0)
    assert lease.view == LeaseView(7, start + int(3.2 * S))
    assert lease.valid(7) and not lease.valid(8)
    lease.renew(7, start - S, 4.0)  # older evidence never shortens it
    assert lease.view.expires_ns == start + int(3.2 * S)
    lease.renew(9, start - 10 * S, 4.0)  # a new session replaces it
    assert lease.view == LeaseView(9, start - int(6.8 * S)) and not lease.valid(9)
    lease.revoke()
    assert not lease.valid(9) and lease.remaining() == 0.0


def test_the_lease_clock_counts_suspended_time_where_the_platform_allows() -> None:
    clock = getattr(time, "CLOCK_BOOTTIME", None)
    before = now_ns()
    if clock is not None:
        assert abs(now_ns() - time.clock_gettime_ns(clock)) < S
    assert now_ns() >= before
