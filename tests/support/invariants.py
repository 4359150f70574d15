"""Invariant checkers that read only the workers' JSON evidence (never the library's own state)."""

from __future__ import annotations

import itertools
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

Event = dict[str, Any]


@dataclass(frozen=True)
class Episode:
    """One worker's uninterrupted ownership of one resource under one fencing token."""

    resource: str
    worker: str
    pid: int
    token: int
    first: int
    last: int


def episodes(events: list[Event]) -> dict[str, list[Episode]]:
    spans: dict[tuple[str, str, int, int], list[int]] = {}
    for e in events:
        if e["event"] != "tick":
            continue
        key = (e["resource"], e["id"], e.get("_pid", 0), e["token"])
        span = spans.setdefault(key, [e["ts"], e["ts"]])
        span[0], span[1] = min(span[0], e["ts"]), max(span[1], e["ts"])
    result: dict[str, list[Episode]] = defaultdict(list)
    for (resource, worker, pid, token), (first, last) in spans.items():
        result[resource].append(Episode(resource, worker, pid, token, first, last))
    for eps in result.values():
        eps.sort(key=lambda ep: ep.first)
    return result


def overlaps(events: list[Event]) -> list[str]:
    """Pairs of episodes of one resource by different owners that overlap in time (must be none)."""
    found = []
    for resource, eps in episodes(events).items():
        for before, after in itertools.pairwise(eps):
            if after.first <= before.last:
                found.append(f"{resource}: {before.worker}/{before.token} until {before.last} overlaps "
                             f"{after.worker}/{after.token} from {after.first}")
    return found


def handover_gaps(events: list[Event]) -> dict[str, float]:
    """Per resource, the shortest time in seconds between one owner's last tick and the next owner's
    first tick; negative when their episodes overlapped (resources that never changed owner are absent)."""
    gaps: dict[str, float] = {}
    for resource, eps in episodes(events).items():
        for before, after in itertools.pairwise(eps):
            if (before.worker, before.pid) != (after.worker, after.pid):
                gap = (after.first - before.last) / 1e9
                gaps[resource] = min(gaps.get(resource, gap), gap)
    return gaps


def token_regressions(events: list[Event]) -> list[str]:
    """Successive owners of a resource must carry strictly increasing fencing tokens."""
    found = []
    for resource, eps in episodes(events).items():
        for before, after in itertools.pairwise(eps):
            if after.token <= before.token:
                found.append(
                    f"{resource}: token {after.token} of {after.worker} after {before.token} of {before.worker}"
                )
    return found


def owners_in_window(events: list[Event], start: int, end: int) -> dict[str, set[tuple[str, int]]]:
    """resource -> {(worker, pid)} that ticked it within [start, end]."""
    owners: dict[str, set[tuple[str, int]]] = defaultdict(set)
    for e in events:
        if e["event"] == "tick" and start <= e["ts"] <= end:
            owners[e["resource"]].add((e["id"], e.get("_pid", 0)))
    return owners


def liveness_problems(
    events: list[Event], resources: set[str], live_pids: set[int], start: int, end: int
) -> list[str]:
    """In [start, end], every resource ticked by exactly one worker, and that worker is live."""
    owners = owners_in_window(events, start, end)
    problems = [f"{r}: never worked on" for r in sorted(resources - set(owners))]
    for resource, who in sorted(owners.items()):
        if resource not in resources:
            problems.append(f"{resource}: worked on but not a resource any more ({who})")
        elif len(who) != 1:
            problems.append(f"{resource}: worked on by {sorted(who)}")
        elif next(iter(who))[1] not in live_pids:
            problems.append(f"{resource}: worked on by a dead worker {who}")
    return problems


def first_full_coverage(events: list[Event], resources: set[str], after: int) -> int | None:
    """The first instant after ``after`` by which every resource has been ticked (by its new owner)."""
    seen: set[str] = set()
    for e in events:
        if e["event"] == "tick" and e["ts"] >= after and e["resource"] in resources:
            seen.add(e["resource"])
            if seen == resources:
                return int(e["ts"])
    return None


def tick_gaps(events: list[Event], resources: set[str], start: int, end: int) -> dict[str, int]:
    """resource -> the longest time in [start, end] without a tick on it (by anyone), in ns."""
    last = dict.fromkeys(resources, start)
    longest = dict.fromkeys(resources, 0)
    for e in events:
        if e["event"] == "tick" and e["resource"] in last and start <= e["ts"] <= end:
            resource = e["resource"]
            longest[resource] = max(longest[resource], int(e["ts"]) - last[resource])
            last[resource] = int(e["ts"])
    for resource in resources:
        longest[resource] = max(longest[resource], end - last[resource])
    return longest


def minimum_moved(held: dict[str, int], members_after: set[str], total: int) -> int:
    """The fewest resources any balanced assignment over ``members_after`` must take from the members
    that stay, when member ``m`` held ``held[m]`` resources before (the lower bound a join can reach).

    Balanced means counts differ by at most one; the ``total % n`` larger quotas best go to the
    staying members that hold the most.
    """
    if not members_after:
        return 0
    base, extra = divmod(total, len(members_after))
    staying = sorted((m for m in held if m in members_after), key=lambda m: -held[m])
    moved = 0
    for rank, member in enumerate(staying):
        quota = base + (1 if rank < extra else 0)
        moved += max(0, held[member] - quota)
    return moved


def balanced_counts(total: int, members: int) -> list[int]:
    """Resource counts of ``members`` members holding ``total`` resources evenly (largest first)."""
    base, extra = divmod(total, members)
    return [base + (1 if i < extra else 0) for i in range(members)]
