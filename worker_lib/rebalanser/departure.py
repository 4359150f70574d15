"""The departure-grace policy: how long the coordinator keeps a departed member's resources for it.

A member that vanished without leaving (its session ended: a crash, a partition) may come back soon
under the same id; for ``grace`` seconds after the coordinator first saw it gone its resources are
reserved (not handed to anyone else). A member that left gracefully (it deleted its own assignment)
gets no grace. Pure functions of what the coordinator has read; times are monotonic seconds.
"""

from __future__ import annotations

from collections.abc import Mapping, Set

Departed = Mapping[str, float]  # member id -> when the coordinator first saw it gone


def reserve(
    departed: Departed, known: Set[str], live: Set[str], graceful: Set[str], now: float, grace: float
) -> tuple[dict[str, float], list[str]]:
    """The departures to remember and the member ids whose resources stay reserved now.

    ``known``: the member ids that own resources in the current layout; ``live``: the members now;
    ``graceful``: those of ``known - live`` that left gracefully. A member back (live) or owning
    nothing is forgotten; with no grace nothing is remembered."""
    if grace <= 0:
        return {}, []
    kept = {mid: since for mid, since in departed.items() if mid not in live and mid in known}
    for mid in sorted(known - live - graceful):
        kept.setdefault(mid, now)
    return kept, [mid for mid, since in kept.items() if now < since + grace]


def next_deadline(departed: Departed, grace: float, now: float) -> float | None:
    """How long to wait at most before the first reservation runs out (None: no reservation);
    never less than 50 ms, so an expired one does not spin the waiting loop."""
    if not departed:
        return None
    first = min(departed.values()) + grace
    return max(0.05, first - now)


def expired(departed: Departed, grace: float, now: float) -> bool:
    """True once some reservation has run out (a rebalance hands its resources on)."""
    return any(now >= since + grace for since in departed.values())
