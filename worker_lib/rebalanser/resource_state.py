"""A member's per-resource state: one phase per resource, changed only by pure transitions.

Phases (a resource not in the table has nothing to do):

- ``WANTED``: in this member's assignment and not held for work: to be claimed.
- ``OWNED``: claimed by this member's session and handed to ``on_assigned``; only here may
  :meth:`Client.owns` be True.
- ``STOPPING``: taken from ``OWNED``; ``on_revoked`` runs now (``owns`` is already False). What
  follows is fixed when the stop is decided: ``WANTED`` again (the lease ran out), ``RELEASING``
  (no longer assigned, or leaving) or nothing (a barrier stop or a lost session: the claim stays
  until the next assignment says whether the resource moved, or goes with the session).
- ``RELEASING``: not wanted; the claim this session may hold on it is to be deleted.

Each transition returns the new table and the effects the member then executes in order
(:class:`Claim`, :class:`StartCallback`, :class:`StopCallback`, :class:`Release`): the transitions
do no I/O, the member loop does. After executing a :class:`StopCallback` the member applies
:func:`stopped`; after a :class:`Claim` it applies :func:`claimed` with what it won, and after a
:class:`Release` that went through, :func:`released`. A :class:`StartCallback` runs only for claims
verified on the current connection; the others are taken back by :func:`not_started`.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum


class Phase(StrEnum):
    WANTED = "Wanted"
    OWNED = "Owned"
    STOPPING = "Stopping"
    RELEASING = "Releasing"


class After(StrEnum):
    """What a resource becomes once its stop callback has returned."""

    WANTED = "Wanted"
    RELEASING = "Releasing"
    NOTHING = "Nothing"


Ownership = tuple[int, int, str]
"""An owned resource's ``(token, session_id, member_node)``: its fencing token, the session that holds
its claim and the member znode under which it was claimed. A plain tuple of atoms on purpose: the
garbage collector stops tracking those, so tens of thousands of owned resources add nothing to the
full collections that pause every thread of the program (an instance per resource added 20 ms)."""


# -- effects -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Claim:
    """Claim these resources (those not won stay ``WANTED``)."""

    names: frozenset[str]


@dataclass(frozen=True)
class StartCallback:
    """Call ``on_assigned`` with these resources and their tokens."""

    tokens: Mapping[str, int]


@dataclass(frozen=True)
class StopCallback:
    """Call ``on_revoked`` for these resources (all ``STOPPING``), then apply :func:`stopped`."""

    names: frozenset[str]


@dataclass(frozen=True)
class Release:
    """Delete this session's claims on these resources."""

    names: frozenset[str]


Effect = Claim | StartCallback | StopCallback | Release


# -- the table ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Resources:
    """Every resource this member deals with, each in exactly one phase (stored by phase). Never
    mutated: each transition returns a new one."""

    wanted: frozenset[str] = frozenset()
    owned: Mapping[str, Ownership] = field(default_factory=dict)
    stopping: Mapping[str, After] = field(default_factory=dict)
    releasing: frozenset[str] = frozenset()

    def phase(self, name: str) -> Phase | None:
        if name in self.owned:
            return Phase.OWNED
        if name in self.wanted:
            return Phase.WANTED
        if name in self.stopping:
            return Phase.STOPPING
        if name in self.releasing:
            return Phase.RELEASING
        return None

    def phases(self) -> dict[str, Phase]:
        """Every resource and its phase (for tests and diagnostics)."""
        table = dict.fromkeys(self.releasing, Phase.RELEASING)
        table.update(dict.fromkeys(self.stopping, Phase.STOPPING))
        table.update(dict.fromkeys(self.wanted, Phase.WANTED))
        table.update(dict.fromkeys(self.owned, Phase.OWNED))
        return table


EMPTY = Resources()
Step = tuple[Resources, list[Effect]]


def _stop(table: Resources, names: Collection[str], after: After) -> tuple[dict[str, Ownership], dict[str, After]]:
    owned = {r: o for r, o in table.owned.items() if r not in names}
    stopping = dict(table.stopping)
    stopping.update(dict.fromkeys(names, after))
    return owned, stopping


def assign(table: Resources, desired: Collection[str], held: Iterable[str]) -> Step:
    """A new assignment: ``desired`` is what this member should own now, ``held`` the claims its
    session holds (or may hold). Owned resources no longer desired are stopped, then released;
    claims held without work and not desired are released; desired resources not owned are claimed.
    A resource waiting for release that is desired again is claimed (released first when this
    assignment releases anything)."""
    desired = frozenset(desired)
    gone = frozenset(r for r in table.owned if r not in desired)
    owned, stopping = _stop(table, gone, After.RELEASING)
    busy = owned.keys() | stopping.keys()
    kept = frozenset(held) - desired - busy
    wanted = desired - busy
    effects: list[Effect] = []
    if gone:
        effects.append(StopCallback(gone))
    if gone or kept:
        effects.append(Release(table.releasing | gone | kept))
    effects.append(Claim(wanted))
    return Resources(wanted, owned, stopping, (table.releasing | kept) - wanted), effects


def claim_targets(table: Resources, released: Collection[str] | None) -> Claim:
    """What to claim now: every wanted resource, or (``released`` given) those of them whose claim
    another session has just released."""
    if released is None:
        return Claim(table.wanted)
    return Claim(table.wanted & frozenset(released))


def claimed(table: Resources, tokens: Mapping[str, int], session_id: int, member_node: str) -> Step:
    """The claims won: wanted resources become owned, and are started."""
    won = {r: t for r, t in tokens.items() if r in table.wanted}
    if not won:
        return table, []
    owned = dict(table.owned)
    owned.update({r: (t, session_id, member_node) for r, t in won.items()})
    table = Resources(table.wanted - won.keys(), owned, table.stopping, table.releasing)
    return table, [StartCallback(dict(sorted(won.items())))]


def stop_all(table: Resources, after: After) -> Step:
    """Stops work on every owned resource; what follows each is ``after``. Wanted resources stay
    wanted only when ``after`` is ``WANTED`` (the lease ran out); otherwise they are dropped."""
    names = frozenset(table.owned)
    owned, stopping = _stop(table, names, after)
    wanted = table.wanted if after is After.WANTED else frozenset()
    effects: list[Effect] = [StopCallback(names)] if names else []
    if after is After.RELEASING and (names or table.releasing):
        effects.append(Release(table.releasing | names))  # ``names`` are RELEASING once stopped
    return Resources(wanted, owned, stopping, table.releasing), effects


def stopped(table: Resources, names: Collection[str]) -> Resources:
    """The stop callback for ``names`` has returned (or overrun): each goes where its stop said."""
    stopping = dict(table.stopping)
    wanted, releasing = set(table.wanted), set(table.releasing)
    for name in names:
        after = stopping.pop(name, None)
        if after is After.WANTED:
            wanted.add(name)
        elif after is After.RELEASING:
            releasing.add(name)
    return Resources(frozenset(wanted), table.owned, stopping, frozenset(releasing))


def pending_release(table: Resources) -> Release | None:
    """Releases still to do (retried after a reconnection)."""
    return Release(table.releasing) if table.releasing else None


def released(table: Resources, names: Collection[str]) -> Resources:
    """The claims on ``names`` are gone (released, or never held)."""
    return Resources(table.wanted, table.owned, table.stopping, table.releasing - frozenset(names))


def claims_lost(table: Resources, names: Collection[str]) -> Step:
    """Someone else deleted our claims on ``names``: owned ones stop at once and become wanted again
    (claimed anew, with a new token, if the assignment still names them); nothing of them is left to
    release (a stop already under way that was to release one now releases nothing)."""
    names = frozenset(names)
    gone = frozenset(r for r in table.owned if r in names)
    owned, stopping = _stop(table, gone, After.WANTED)
    for name in names & (stopping.keys() - gone):
        if stopping[name] is After.RELEASING:
            stopping[name] = After.NOTHING
    effects: list[Effect] = [StopCallback(gone)] if gone else []
    return Resources(table.wanted, owned, stopping, table.releasing - names), effects


def not_started(table: Resources, names: Collection[str]) -> Resources:
    """Owned resources whose start was called off (their claim was not verified on the current
    connection, or was found gone): wanted again, with no stop callback, since ``on_assigned`` never
    ran for them. Whatever claim the session still holds on one is re-taken after reading it."""
    names = frozenset(r for r in names if r in table.owned)
    owned = {r: o for r, o in table.owned.items() if r not in names}
    return Resources(table.wanted | names, owned, table.stopping, table.releasing)


def session_ended(table: Resources) -> Step:
    """The session is gone, and every claim with it: stop all work; nothing is left to release."""
    table, effects = stop_all(table, After.NOTHING)
    return Resources(table.wanted, table.owned, table.stopping, frozenset()), effects
