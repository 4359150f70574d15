"""Standby (pure logic; no I/O): a member out of the group until every overrunning stop callback
has returned (docs/protocol.md, "A stop callback that does not return").

States: in the group (``aside`` False) and aside (``aside`` True, with the member node it left while
that node has not been seen gone). An aside member has chores before it may join again: release every
claim its session may still hold, and see the member node it left deleted. Each transition returns the
new state and the effects the member's loop then carries out in order, queued (never by recursion):

- :class:`Release` (the pending releases), :class:`DeleteNode` (the node left),
- :class:`RetryLater` (the chores again in T/4: one timer at a time),
- :class:`Rejoin` (report ``rejoining`` and join in the same session with a new member node).

Rules kept here, so that they are tested without ZooKeeper: never two member nodes in one session (no
rejoin while the node left still exists), and no claim kept on standby (no rejoin while a release is
pending; a failed one is tried again every T/4, as is a failed delete of the node).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Release:
    """Release every claim still to release."""


@dataclass(frozen=True)
class DeleteNode:
    """Delete the member node left on standby (its assignment node and stop marker with it)."""

    name: str


@dataclass(frozen=True)
class RetryLater:
    """Do the chores again in T/4."""


@dataclass(frozen=True)
class Rejoin:
    """Standby is over: report ``rejoining`` and join again."""


Effect = Release | DeleteNode | RetryLater | Rejoin


@dataclass(frozen=True)
class Standby:
    aside: bool = False
    node: str = ""  # the member node left, not yet seen gone


IN_GROUP = Standby()
Step = tuple[Standby, list[Effect]]


def step_aside(state: Standby, node: str | None) -> Step:
    """The member leaves the group (its work is stopped and its claims are to be released)."""
    state = Standby(True, node or state.node)
    return state, chores(state)


def chores(state: Standby) -> list[Effect]:
    """What an aside member still has to do (nothing in the group)."""
    if not state.aside:
        return []
    return [Release(), DeleteNode(state.node)] if state.node else [Release()]


def observed(state: Standby, node_gone: bool, releases_left: bool, callbacks_blocked: bool) -> Step:
    """After the chores: whether the node left is gone, whether releases are still pending and whether
    a callback still overruns. Standby ends only when all three are done."""
    if not state.aside:
        return state, []
    state = Standby(True, "" if node_gone else state.node)
    if state.node or releases_left:
        return state, [RetryLater()]
    if callbacks_blocked:
        return state, []  # the callback runner posts the next step when the last one returns
    return IN_GROUP, [Rejoin()]
