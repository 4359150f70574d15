"""Orphans: resources no live member owns, and the plan that hands them out without waiting.

A resource is an orphan when its owner in the coordinator's layout is neither a live member nor a
departed member whose resources are reserved for it (:mod:`departure`), or when it has no owner at
all. Nobody works on an orphan, so the rebalance interval (which batches moves between live members
during churn) does not hold it back: the coordinator hands orphans out in its next write, and only
the moves that restore balance between live members wait for the interval.

The hand-out plan keeps every live (and reserved) member's resources where they are and gives each
orphan to the live member holding the fewest at that point (ties by id), so it takes nothing from a
live member: under Global Barrier it needs no stop. It is as balanced as possible without taking
anything away; when it is not fully balanced, the full rebalance follows once the interval allows.

Pure: no I/O, no clock. Deterministic whatever the order of the input collections.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, Set

from rebalanser.assignment import Plan


def orphaned(
    resources: Iterable[str], current: Mapping[str, str], live: Iterable[str], reserved: Iterable[str] = ()
) -> list[str]:
    """The orphans among ``resources``, sorted: owned in ``current`` by no live and no reserved member
    id, or not owned at all."""
    keepers = set(live) | set(reserved)
    return sorted(r for r in set(resources) if current.get(r) not in keepers)


def any_orphaned(
    resources: Iterable[str], current: Mapping[str, str], keepers: Set[str], known: Set[str] = frozenset()
) -> bool:
    """Whether some resource not in ``known`` is an orphan (its owner in ``current`` is not among
    ``keepers``, the live and reserved member ids); stops at the first one."""
    return any(current.get(r) not in keepers and r not in known for r in resources)


def hand_out(
    members: Iterable[str], resources: Iterable[str], current: Mapping[str, str], reserved: Iterable[str] = ()
) -> Plan:
    """Every resource's owner after handing the orphans out: live and reserved members keep what they
    own (of ``resources``); each orphan goes to the live member with the fewest resources at that
    point, ties to the smallest id. With no live member nothing is assigned. ``moved`` is 0: no
    resource leaves a live owner."""
    live = sorted(set(members))
    if not live:
        return Plan({}, 0)
    keepers = set(live) | set(reserved)
    names = sorted(set(resources))
    owners = {r: current[r] for r in names if current.get(r) in keepers}
    load = dict.fromkeys(live, 0)
    for owner in owners.values():
        if owner in load:
            load[owner] += 1
    heap = [(count, member) for member, count in load.items()]
    heapq.heapify(heap)
    for resource in (r for r in names if r not in owners):
        count, member = heap[0]
        owners[resource] = member
        heapq.heapreplace(heap, (count + 1, member))
    return Plan(owners, 0)
