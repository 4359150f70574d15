"""Sticky, balanced, minimal-movement assignment: a pure function, no I/O.

Guarantees (for any input):

* every resource is assigned to exactly one member (when there is at least one member);
* balanced: the number of resources per member differs by at most one;
* sticky: a resource keeps its current owner whenever that owner is still a member and not over its
  quota; the members that keep ``q + 1`` resources are those that already hold the most, so the number
  of resources that change owner is the minimum any balanced assignment can achieve;
* deterministic: the same input gives the same output, whatever the order of the input collections.

``reserved`` members (departed members inside their grace window) keep their resources and count in
the balance, but receive nothing new; their resources are simply not worked on until they return or
the grace window ends.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from itertools import islice


@dataclass(frozen=True)
class Plan:
    owners: dict[str, str]  # resource -> member
    moved: int  # resources that had a live owner before and have another one now
    #: member -> its resources, sorted (every member :func:`assign` was given); None: built from ``owners``
    lists: dict[str, list[str]] | None = field(default=None, compare=False, repr=False)

    def by_member(self, members: Iterable[str]) -> dict[str, list[str]]:
        """Each of ``members``' resources, sorted (an empty list for one with none), and those of any other
        member that holds some."""
        result: dict[str, list[str]] = {m: [] for m in members}
        if self.lists is not None:
            result.update({m: list(rs) for m, rs in self.lists.items() if rs or m in result})
            return result
        for resource, member in self.owners.items():
            result.setdefault(member, []).append(resource)
        for resources in result.values():
            resources.sort()
        return result


class SortedNames(list[str]):
    """Resource names already sorted and unique (a coordinator's listing, checked once when listed):
    :func:`sorted_names` takes them as they are without comparing them again."""


def assign(
    members: Iterable[str],
    resources: Iterable[str],
    current: Mapping[str, str],
    reserved: Iterable[str] = (),
) -> Plan:
    """Computes the new owner of every resource.

    ``members`` are the live member ids, ``resources`` every resource, ``current`` the previous owner
    of each resource (entries for unknown resources or departed members are ignored).
    """
    live = sorted(set(members))
    held = sorted(set(reserved) - set(live))
    everyone = live + held
    names = sorted_names(resources)
    if not live:
        return Plan({}, 0, {})
    kept, unheld = _holdings(everyone, names, current)
    quota = _quotas(live, held, kept, len(names))
    lists, released = _trim(kept, quota)
    _fill(lists, sorted(released + unheld), live, quota)  # sorted runs: merged, not sorted from scratch
    owners: dict[str, str] = {}
    for member, resources_of in lists.items():
        owners.update(dict.fromkeys(resources_of, member))
    return Plan(owners, len(released), lists)


def sorted_names(resources: Iterable[str]) -> list[str]:
    """``resources`` sorted, without duplicates. :class:`SortedNames`, or a list that already is sorted
    and unique (checked: one pass of comparisons instead of a set and a sort), is taken as it is."""
    if isinstance(resources, SortedNames):
        return resources
    if isinstance(resources, list) and all(map(str.__lt__, resources, islice(resources, 1, None))):
        return resources
    return sorted(set(resources))


def _holdings(everyone: list[str], names: list[str], current: Mapping[str, str]
              ) -> tuple[dict[str, list[str]], list[str]]:
    """What each member holds now (in name order), and the names nobody among ``everyone`` holds."""
    kept: dict[str, list[str]] = {m: [] for m in everyone}
    if not current:  # a group's first assignment: nobody holds anything yet
        return kept, names
    unheld: list[str] = []
    holder = kept.get
    for owner, resource in zip(map(current.get, names), names, strict=True):  # the lookups in C, not a call each
        holder(owner, unheld).append(resource)  # type: ignore[arg-type]  # a None owner: unheld
    return kept, unheld


def _quotas(live: list[str], held: list[str], kept: dict[str, list[str]], total: int) -> dict[str, int]:
    """Capacity of each member: q or q+1, the +1 going to those already holding the most.

    Reserved members count as members for the arithmetic but never exceed what they hold.
    """
    n = len(live) + len(held)
    base, extra = divmod(total, n)
    ranked = sorted(live + held, key=lambda m: (-len(kept[m]), m))
    quota = {m: base + (1 if i < extra else 0) for i, m in enumerate(ranked)}
    for m in held:
        quota[m] = min(quota[m], len(kept[m]))
    return quota


def _trim(kept: dict[str, list[str]], quota: dict[str, int]) -> tuple[dict[str, list[str]], list[str]]:
    """What each member keeps (up to its quota, in name order), and what it gives up."""
    lists: dict[str, list[str]] = {}
    released: list[str] = []
    for member, resources in kept.items():
        keep = quota[member]
        lists[member] = resources[:keep]
        released.extend(resources[keep:])
    return lists, released


def _fill(lists: dict[str, list[str]], pool: list[str], live: list[str], quota: dict[str, int]) -> None:
    """Hands ``pool`` (sorted: every resource nobody keeps) to the live members below their quota."""
    load = {m: len(lists[m]) for m in live}
    # Reserved members' quota may have shrunk to what they hold; hand the rest round the live ones,
    # still q or q+1 at most (rounding left over by reserved members goes to live members).
    open_members = [m for m in live if load[m] < quota[m]]
    # Each open member in turn takes the next run of the pool up to its quota (a slice each: 100,000
    # resources are handed out in a few hundred operations, not one Python step per resource).
    taken = 0
    grown: set[str] = set()
    for member in open_members:
        run = pool[taken : taken + quota[member] - load[member]]
        if run:
            lists[member].extend(run)
            grown.add(member)
        load[member] += len(run)
        taken += len(run)
    for resource in pool[taken:]:
        member = min(live, key=lambda m: (load[m], m))
        lists[member].append(resource)
        grown.add(member)
        load[member] += 1
    for member in grown:
        lists[member].sort()  # what it kept, then what it was handed: two sorted runs, merged
