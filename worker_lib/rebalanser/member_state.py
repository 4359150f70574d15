"""Joining, the session and standby (pure logic; no I/O): where a member is in its group
(docs/protocol.md, "Membership", "A stop callback that does not return").

The state is the session the member's thread follows, the one it joined in (with its member node),
what it has announced (``on_session``), whether it was suspended, whether it ever joined, standby
(:mod:`standby`) and the wait for an earlier incarnation with our id. Each transition takes what
happened (a connection event, the answer of a read, an eviction) and returns the new state and the
effects the member's loop then carries out, in order, queued (never by recursion). An effect that asks
ZooKeeper something (:class:`EnsureGroup`, :class:`CheckSameId`, :class:`CreateNode`,
:class:`StandbyChores`) is answered by the next transition (:func:`group_checked`,
:func:`same_id_checked`, :func:`node_created`, :func:`standby_observed`).

Joining, one step at a time in the current session: (group root exists, or this is the first join of
a member asked to create its group) -> (no other live member uses our id) -> member node created -> in
sync with the group.

Rules kept here, so that they are tested without ZooKeeper:

- a join happens only in the session whose start the member's thread has processed and whose end it
  has not (a join step of an ended session never joins the next one early: never two member nodes in
  one session), and never twice in one session;
- ``connected`` is announced once per session;
- only the first join may create the group root, and only when the member was asked to
  (``Options.create_group``); otherwise a first join that finds no group ends the member
  (:class:`GroupMissing`), and a later one waits for the group to be created again;
- a group root marked deleted ends the member, after a graceful leave (:class:`GroupDeleted`);
- a member on standby rejoins only through standby's rules (:mod:`standby`);
- a member node of our id that outlives 2T + 5 s is another live member's: fatal.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum

from rebalanser import standby as sb
from rebalanser.member_events import Connection
from rebalanser.paths import MemberNode


class State(StrEnum):
    """Where a member is (:attr:`rebalanser.Client.state`)."""

    NOT_STARTED = "NotStarted"
    JOINING = "Joining"
    PENDING_ASSIGNMENT = "PendingAssignment"
    ASSIGNED = "Assigned"
    SUSPENDED = "Suspended"
    STOPPING = "Stopping"
    STOPPED = "Stopped"
    ABORTED = "Aborted"


ENDING = (State.STOPPING, State.STOPPED, State.ABORTED)  # nothing is owned, nothing joins in these states


class Found(StrEnum):
    """What a join found at the group root (:func:`rebalanser.containers.check_group`)."""

    EXISTS = "exists"
    MISSING = "missing"
    DELETED = "deleted"  # the root carries the deletion mark


# -- effects -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Notify:
    """Report the session state ``on_session(state)``."""

    state: str


@dataclass(frozen=True)
class Enter:
    """The member's :class:`State` becomes ``state`` (unless it is ending)."""

    state: State


@dataclass(frozen=True)
class Note:
    """Log this (nothing else to do); ``warning``: at level WARNING, else INFO."""

    message: str
    warning: bool = False


@dataclass(frozen=True)
class StopCoordinating:
    """Stop the coordinator instance this member runs, if any."""


@dataclass(frozen=True)
class EndSessionWork:
    """The session is gone: stop all work; nothing is left to release (``resource_state.session_ended``)."""


@dataclass(frozen=True)
class Expired:
    """The session expired and the policy is ``shutdown``: abort."""


@dataclass(frozen=True)
class Evicted:
    """Report that our member node was deleted by someone else."""


@dataclass(frozen=True)
class StopAllWork:
    """Stop all work and release every claim (``resource_state.stop_all`` then releasing)."""


@dataclass(frozen=True)
class Stuck:
    """Report the resources whose overrunning stop callback still runs (the member steps aside)."""

    resources: frozenset[str]


@dataclass(frozen=True)
class DropAssignment:
    """Nothing is wanted any more: stop all work, release every claim the session may hold."""


@dataclass(frozen=True)
class Join:
    """Take one join step in the current session (then :func:`join_step`)."""


@dataclass(frozen=True)
class StandbyChores:
    """Carry out standby's chores (:func:`standby.chores`), then :func:`standby_observed`; ``joining``:
    a join step waits for their outcome."""

    joining: bool


@dataclass(frozen=True)
class RetryStandbyLater:
    """Standby's chores again in T/4 (one timer at a time)."""


@dataclass(frozen=True)
class JoinWhenCallbacksClear:
    """Take a join step once every overrunning callback has returned."""


@dataclass(frozen=True)
class EnsureGroup:
    """See whether the group exists (creating its root only if ``create_root``), then :func:`group_checked`."""

    create_root: bool
    session: int


@dataclass(frozen=True)
class AwaitGroup:
    """The group is gone: take a join step once it exists again (never re-create it)."""


@dataclass(frozen=True)
class GroupMissing:
    """The first join found no group and may not create it: the member ends (``GroupNotFoundError``)."""


@dataclass(frozen=True)
class GroupDeleted:
    """The group is marked deleted: the member leaves gracefully and ends (``GroupDeletedError``)."""


@dataclass(frozen=True)
class CheckSameId:
    """See whether a node with our member id from an earlier session is still there (watching
    ``G/clients`` when ``watch``), then :func:`same_id_checked`."""

    session: int
    watch: bool


@dataclass(frozen=True)
class JoinTimer:
    """Take a join step ``after`` seconds from now (the wait for an earlier incarnation ends)."""

    after: float


@dataclass(frozen=True)
class CancelJoinTimer:
    """The wait for an earlier incarnation is over: no join step from its timer."""


@dataclass(frozen=True)
class DuplicateId:
    """Another live member uses our id: abort."""


@dataclass(frozen=True)
class CreateNode:
    """Create our member node, then :func:`node_created`."""

    session: int


@dataclass(frozen=True)
class Joined:
    """A new member node in ``session``: no more join steps from the wait for an earlier incarnation;
    follow it afresh (no barrier stop answered, no assignment applied); keep every claim the session
    may hold (to be read again)."""

    node: MemberNode
    session: int


@dataclass(frozen=True)
class ReleasePending:
    """Release the claims still to release (a failure leaves them pending)."""


@dataclass(frozen=True)
class SyncWithGroup:
    """Read everything a member follows (own node, election, barrier, assignment) for member node
    ``node``, arming each watch; the join is complete after it."""

    node: MemberNode


@dataclass(frozen=True)
class Reclaim:
    """Claim every wanted resource again."""


Effect = (
    Notify | Enter | Note | StopCoordinating | EndSessionWork | Expired | Evicted | StopAllWork | Stuck
    | DropAssignment | Join | StandbyChores | RetryStandbyLater | JoinWhenCallbacksClear | EnsureGroup | AwaitGroup
    | GroupMissing | GroupDeleted
    | CheckSameId | JoinTimer | CancelJoinTimer | DuplicateId | CreateNode | Joined | ReleasePending | SyncWithGroup
    | Reclaim
)


# -- the state ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Member:
    """Never mutated: each transition returns a new one."""

    # The session whose start (CONNECTED) this member's thread has processed and whose end (LOST) it
    # has not: the only one it may join (kazoo may already be in a newer one while the events of the
    # older one's end still wait in the queue).
    session: int = 0
    joined: int = 0  # the session this member joined in (0: not joined)
    node: MemberNode | None = None  # our member node (None: none, or left on standby or evicted)
    announced: int = 0  # the session on_session("connected"/"reconnected") was reported for
    suspended: bool = False  # the connection was suspended since the last reconnection
    ever_joined: bool = False  # only the first join may create the group root
    create_group: bool = False  # ... and only when the options ask for it (else a first join ends on no group)
    standby: sb.Standby = sb.IN_GROUP
    same_id_until: float = 0.0  # while waiting for an earlier incarnation with our id to go

    def in_session(self, current: int) -> bool:
        """Connected (``current``: kazoo's session now) in the session this member joined in."""
        return bool(self.joined) and current == self.joined


START = Member()


def start(create_group: bool) -> Member:
    """Where a member starts; ``create_group``: its first join may create the group root."""
    return replace(START, create_group=create_group)
Step = tuple[Member, list[Effect]]


# -- the session -------------------------------------------------------------------------------


def connection(state: Member, event: Connection, session: int, current: int, shutdown: bool) -> Step:
    """kazoo reported ``event`` about ``session``; ``current`` is kazoo's session now; ``shutdown``:
    the expiry policy ends the member."""
    if event is Connection.SUSPENDED:
        return replace(state, suspended=True), [Enter(State.SUSPENDED), Notify("suspended")]
    if event is Connection.LOST:
        effects: list[Effect] = [Notify("expired"), StopCoordinating(), EndSessionWork()]
        return replace(state, session=0, joined=0), effects + ([Expired()] if shutdown else [])
    if not session or session != current:
        # Already over (kazoo is disconnected, or in a newer session): the events of its end, and the
        # next CONNECTED, are queued behind this one.
        return state, [Note(f"connected in session {session:#x}, which is no longer current: "
                            "waiting for what follows")]
    if session != state.joined:
        effects = []
        if session != state.announced:  # a join step still waiting does not announce it again
            effects.append(Notify("connected" if not state.joined else "reconnected"))
        return replace(state, session=session, announced=session), [*effects, Join()]
    state = replace(state, session=session)
    if not state.suspended:
        return state, []
    return resync(replace(state, suspended=False), [Notify("reconnected")])


def resync(state: Member, effects: list[Effect]) -> Step:
    """The same session after a disconnection: kazoo dropped every watch with the connection, so
    everything is read again (each watch armed again), and pending releases are tried again. The
    claims held are not re-read here: the re-check thread has done that at the handshake, beside
    this loop (:mod:`rebalanser.claimcheck`)."""
    if state.node is None or not state.joined:
        return state, [*effects, ReleasePending(), Join()]  # dropped before the node existed (or on standby)
    return state, [*effects, ReleasePending(), SyncWithGroup(state.node), Reclaim()]


# -- joining -----------------------------------------------------------------------------------


def join_step(state: Member, current: int, ending: bool) -> Step:
    """One step of joining, in kazoo's session ``current``. It never blocks: where it has to wait
    (standby, the group's return, an earlier incarnation) an effect arranges for another step."""
    if not current or current != state.session or current == state.joined or ending:
        return state, []
    if state.standby.aside:
        return state, [Enter(State.JOINING), StandbyChores(joining=True)]
    return state, [Enter(State.JOINING), EnsureGroup(_may_create(state), current)]


def _may_create(state: Member) -> bool:
    return state.create_group and not state.ever_joined


def group_checked(state: Member, found: Found | bool, session: int) -> Step:
    """What the join found at the group root (True/False: exists or not)."""
    found = Found.EXISTS if found is True else Found.MISSING if found is False else found
    if found is Found.DELETED:
        return deletion_marked(state)
    if found is Found.MISSING:
        return state, [_no_group(state)]
    return state, [CheckSameId(session, watch=False)]


def deletion_marked(state: Member) -> Step:
    """The group root was read with the deletion mark (its watch, or the join's read): leave and end."""
    return state, [GroupDeleted()]


def _no_group(state: Member) -> Effect:
    """A first join ends on a missing group; once joined, a vanished group is waited for."""
    return AwaitGroup() if state.ever_joined else GroupMissing()


def same_id_checked(state: Member, stale: bool, session: int, now: float, timeout: float) -> Step:
    """Whether a node with our id from an earlier session is still there, at monotonic ``now``;
    ``timeout`` is the session timeout T. Ephemeral nodes of an earlier session of ours are never taken
    for current ones: the server expires them (PIP-57) within 2T + 5 s; one that outlives that belongs
    to another live member."""
    if not stale:
        return replace(state, same_id_until=0.0), [CancelJoinTimer(), CreateNode(session)]
    if not state.same_id_until:
        until = now + 2 * timeout + 5
        return replace(state, same_id_until=until), [
            Note(f"an earlier incarnation's node is still in the group; waiting up to {until - now:.0f}s for "
                 "ZooKeeper to expire its session before joining", warning=True),
            Notify("waiting"), JoinTimer(until - now), CheckSameId(session, watch=True)]
    if now >= state.same_id_until:
        return state, [DuplicateId()]
    return state, [CheckSameId(session, watch=True)]


def same_id_rechecked(state: Member, stale: bool, session: int) -> Step:
    """The second look, with ``G/clients`` watched: still there, the watch or the timer goes on."""
    if stale:
        return state, []
    return replace(state, same_id_until=0.0), [CancelJoinTimer(), CreateNode(session)]


def node_created(state: Member, node: MemberNode | None, session: int) -> Step:
    """Our member node was created (None: the group went meanwhile)."""
    if node is None:
        return state, [_no_group(state)]
    state = replace(state, joined=session, node=node, ever_joined=True, same_id_until=0.0)
    # What an eviction or standby could not release (the same session may hold it) goes first.
    return state, [Joined(node, session), ReleasePending(), Enter(State.PENDING_ASSIGNMENT), SyncWithGroup(node)]


# -- leaving the group without leaving the session ---------------------------------------------


def evicted(state: Member) -> Step:
    """Someone deleted our member node (e.g. the whole group) while our session lives: our claims may
    be gone too; stop all work at once, then join again."""
    return replace(state, joined=0, node=None), [Evicted(), StopCoordinating(), StopAllWork(), Join()]


def step_aside(state: Member, stuck: frozenset[str]) -> Step:
    """We are to work on resources whose ``on_revoked`` overran its timeout and still runs: the member
    leaves the group gracefully (its resources move at once) and joins again, in the same session,
    once every overrunning callback has returned (:mod:`standby`)."""
    standby, _ = sb.step_aside(state.standby, state.node.name if state.node is not None else None)
    state = replace(state, joined=0, node=None, standby=standby)
    return state, [Stuck(stuck), Notify("standby"), StopCoordinating(), DropAssignment(),
                   StandbyChores(joining=False), Enter(State.JOINING), JoinWhenCallbacksClear()]


def standby_observed(state: Member, node_gone: bool, releases_left: bool, callbacks_blocked: bool,
                     joining: bool) -> Step:
    """After standby's chores (see :func:`standby.observed`); a join step goes on once standby is over."""
    standby, chores = sb.observed(state.standby, node_gone, releases_left, callbacks_blocked)
    state = replace(state, standby=standby)
    effects: list[Effect] = []
    for chore in chores:
        match chore:
            case sb.RetryLater():
                effects.append(RetryStandbyLater())
            case sb.Rejoin():
                effects.append(Notify("rejoining"))
                if joining:
                    effects.append(EnsureGroup(_may_create(state), state.session))
    return state, effects
