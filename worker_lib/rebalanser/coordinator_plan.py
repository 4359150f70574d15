"""The coordinator's plan: what a rebalance assigns and which writes it makes, decided without I/O.

Pure: no ZooKeeper, no clock (the instants are inputs). The coordinator's driver
(:mod:`coordinator`) reads what is stored through its store (:mod:`coordinator_store`), asks this
module what to do, and has the store carry out the steps it returns, one after the other.

- :func:`propose` / :func:`propose_early`: who gets what, from the live members, the resources and
  the current owners (early: woken by orphans inside the interval, only the orphans are handed out
  at once, see :mod:`orphans`);
- :func:`decide`: from that proposal and what is stored, nothing to do (:class:`Idle`), one fenced
  write of the assignments (:class:`Assign`) or a Global Barrier round (:class:`BarrierRound`);
- :class:`Round`: the Global Barrier round as an explicit state machine;
- :func:`wait_until` and :func:`orphans_waiting`: when the next rebalance may start.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field

from rebalanser import orphans
from rebalanser.assignment import Plan, assign
from rebalanser.barrier import moves_nothing, takes_nothing_away
from rebalanser.config import Algorithm, GroupConfig
from rebalanser.errors import NotCoordinatorError
from rebalanser.paths import MemberNode, are_valid_resource_names, is_valid_resource_name
from rebalanser.wire import BarrierRecord, Blob, MemberAssignment, Phase, encode_assignment

Resources = tuple[str, ...]

MAX_FAILED_REBALANCES = 5  # in a row; then the coordinator resigns and the next term starts afresh
ROUND_WRITE_ATTEMPTS = 3  # writes of one Global Barrier round's assignments, re-planned in between


@dataclass
class Layout:
    """What the coordinator believes is stored: member node -> resources written for it."""

    written: dict[str, Resources] = field(default_factory=dict)
    parts: dict[str, list[str]] = field(default_factory=dict)  # member node -> part children
    owners: dict[str, str] = field(default_factory=dict)  # resource -> member id (intent)
    generation: int = 0
    epoch: int = 0  # the highest epoch an assignment record carries


@dataclass(frozen=True)
class Proposal:
    """One plan of a rebalance: the live members and resources it saw, and who gets what."""

    members: list[MemberNode]
    resources: list[str]
    live: frozenset[str]  # every member node listed, duplicates of an id included
    owners: dict[str, str]  # resource -> member id
    desired: dict[str, Resources]  # member node -> resources


# -- who gets what ------------------------------------------------------------------------------


def live_members(listed: Iterable[MemberNode]) -> list[MemberNode]:
    """One member per id: of duplicates, only the oldest listed works."""
    seen: dict[str, MemberNode] = {}
    for member in listed:
        seen.setdefault(member.member_id, member)
    return list(seen.values())


def valid_resources(names: Iterable[str]) -> tuple[list[str], int]:
    """The names that are valid resource names, and how many were not."""
    listed = list(names)
    if are_valid_resource_names(listed):  # the usual case, in one pass (100,000 names: a few ms)
        return listed, 0
    valid = [n for n in listed if is_valid_resource_name(n)]
    return valid, len(listed) - len(valid)


def _desired(plan: Plan, by_id: Mapping[str, MemberNode]) -> dict[str, Resources]:
    return {by_id[mid].name: tuple(rs) for mid, rs in plan.by_member(by_id).items() if mid in by_id}


def propose(
    listed: list[MemberNode], resources: list[str], owners: Mapping[str, str], reserved: Iterable[str]
) -> Proposal:
    """The full plan: every live member balanced (departed members in ``reserved`` keep theirs)."""
    members = live_members(listed)
    by_id = {m.member_id: m for m in members}
    plan = assign(by_id, resources, dict(owners), list(reserved))
    return Proposal(members, resources, frozenset(m.name for m in listed), dict(plan.owners), _desired(plan, by_id))


@dataclass(frozen=True)
class Ahead:
    """A group's first plan, made inside the start-up window while the coordinator waits for it to end
    (see :func:`plan_ahead`), and its assignments encoded as they will be written: the rebalance that
    ends the window reuses it when what it was made from is unchanged (else it plans afresh)."""

    listed: list[MemberNode]
    resources: list[str]
    proposal: Proposal
    encoded: dict[MemberAssignment, Blob]

    def fits(self, listed: list[MemberNode], resources: list[str], reserved: Collection[str]) -> bool:
        """Whether :func:`propose` of these inputs (and nothing assigned) is this plan."""
        return not reserved and listed == self.listed and resources == self.resources


def plan_ahead(
    listed: list[MemberNode], resources: list[str], epoch: int, generation: int, algorithm: Algorithm,
    abandon: Callable[[], bool] = lambda: False,
) -> Ahead | None:
    """The first assignment of a group (nothing assigned, no member reserved) for ``listed`` and
    ``resources``, encoded for ``generation`` of ``epoch`` as :func:`decide` will write it: a
    Resource Barrier assignment, or a Global Barrier one that stops nobody (nobody holds anything).
    ``abandon`` is asked after the plan and between encodings: once it is True (a member joined, so
    the plan would not be used) the rest is not computed and None is returned."""
    proposal = propose(listed, resources, {}, [])
    stop = algorithm is not Algorithm.GLOBAL_BARRIER
    encoded: dict[MemberAssignment, Blob] = {}
    for node, rs in proposal.desired.items():
        if abandon():
            return None
        value = MemberAssignment(epoch, generation, rs, algorithm.value, node, stop)
        encoded[value] = encode_assignment(value)
    return Ahead(list(listed), list(resources), proposal, encoded)


@dataclass(frozen=True)
class Early:
    """A proposal made inside the interval: ``complete`` when it is the full plan (it takes nothing
    from a live member), else the hand-out of the orphans alone; ``unplaceable``: the orphans it
    leaves without an owner (they do not wake the coordinator again)."""

    proposal: Proposal
    complete: bool
    unplaceable: frozenset[str]
    handed_out: int  # resources whose owner changes (the orphans handed out) when not complete


def propose_early(
    full: Proposal, written: Mapping[str, Resources], owners: Mapping[str, str], reserved: Iterable[str]
) -> Early:
    """Inside the interval, woken by orphans: ``full`` when it takes nothing from a live member, else
    the orphans handed out (``reserved``: the departed members still within their grace)."""
    if takes_nothing_away(written, full.desired, full.live):
        return Early(full, True, frozenset(r for r in full.resources if r not in full.owners), 0)
    by_id = {m.member_id: m for m in full.members}
    plan = orphans.hand_out(by_id, full.resources, owners, reserved)
    unplaceable = frozenset(r for r in full.resources if r not in plan.owners)
    handed = sum(1 for r, m in plan.owners.items() if owners.get(r) != m)
    proposal = Proposal(full.members, full.resources, full.live, dict(plan.owners), _desired(plan, by_id))
    return Early(proposal, False, unplaceable, handed)


def members_changed(proposal: Proposal, live: Iterable[MemberNode]) -> bool:
    """Whether the live members differ from those ``proposal`` was made for."""
    return {m.name for m in live} != {m.name for m in proposal.members}


def moved(before: Mapping[str, str], after: Mapping[str, str]) -> int:
    """Resources that change owner (a resource new to the layout does not count)."""
    if not before:  # a group's first assignment: nothing to compare (100,000 lookups saved)
        return 0
    # One lookup per resource, and no pair built: a set of 10,000 (resource, member) pairs took 2-3 ms of the
    # interpreter lock between the assignment write and the state write, while this process's own member
    # waited for it to read its new assignment (a resource new to the layout: get gives its owner, not moved).
    return sum(1 for r, m in after.items() if before.get(r, m) != m)


# -- what a rebalance does ----------------------------------------------------------------------


@dataclass(frozen=True)
class Stored:
    """What the store read before a rebalance: the assignments written, the highest generation
    used, and ``G/barrier``: a stop order standing there (``standing``; not ours: ours never stands
    between rebalances) and whether it held bad data (``unreadable``: this rebalance rewrites it)."""

    written: Mapping[str, Resources]
    generation: int
    standing: bool = False
    unreadable: bool = False


@dataclass(frozen=True)
class Idle:
    """Nothing to write."""

    reason: str


@dataclass(frozen=True)
class Assign:
    """One fenced write of the assignments (every member's when ``force``), with ``closing`` staged in
    the same write when given; then, when ``drop_old``, the stop markers of older generations go."""

    generation: int
    desired: Mapping[str, Resources]
    force: bool
    stop: bool = True  # False: a Global Barrier generation that stopped nobody (members apply it at once)
    closing: BarrierRecord | None = None
    drop_old: bool = False


@dataclass(frozen=True)
class BarrierRound:
    """A Global Barrier round: every member stops, then the assignments are written (see :class:`Round`)."""

    generation: int


Decision = Idle | Assign | BarrierRound


def decide(
    proposal: Proposal, stored: Stored, algorithm: Algorithm, epoch: int, early: bool
) -> Decision:
    """What a rebalance does with ``proposal``, given what is stored. ``early``: inside the interval
    (woken by orphans). A decision other than :class:`Idle` uses generation ``stored.generation + 1``."""
    idle = not stored.standing and not stored.unreadable and moves_nothing(stored.written, proposal.desired)
    if early and idle:
        return Idle("nothing to hand out (reserved for a departed member, or no live member took it)")
    if algorithm is Algorithm.GLOBAL_BARRIER and idle:
        return Idle("nothing moves: no reason to stop the world")
    generation = stored.generation + 1
    if algorithm is Algorithm.GLOBAL_BARRIER and not stored.standing and takes_nothing_away(
        stored.written, proposal.desired, proposal.live
    ):
        # Nothing changes hands between live members (only a departed member's or unheld resources
        # are handed out): nobody stops. The changed assignments say so, and members apply them at
        # once; G/barrier is left alone (it still ends the last round that stopped), unless unreadable.
        closing = BarrierRecord(Phase.ASSIGNED, generation, epoch) if stored.unreadable else None
        return Assign(generation, proposal.desired, force=False, stop=False, closing=closing)
    if algorithm is Algorithm.GLOBAL_BARRIER:
        return BarrierRound(generation)
    # A stop order still standing (its coordinator died, or the group was switched from Global
    # Barrier meanwhile): every member's assignment is written again and the order ended, in one go,
    # or members that stopped for it and whose assignment does not change stay idle.
    standing = stored.standing
    closing = BarrierRecord(Phase.ASSIGNED, generation, epoch) if standing or stored.unreadable else None
    return Assign(generation, proposal.desired, force=standing, closing=closing, drop_old=standing)


# -- the Global Barrier round -------------------------------------------------------------------


class RoundState(enum.Enum):
    STOPPING = "stopping"  # the stop order is to be given
    AWAITING = "awaiting"  # waiting for every live member's stop marker
    WRITING = "writing"  # the round's assignments are to be written
    CLOSING = "closing"  # the round is to be ended in G/barrier
    DONE = "done"
    ABANDONED = "abandoned"  # the coordinator was stopped or deposed: the stop order stands


@dataclass(frozen=True)
class GiveStop:
    """Create the round's stop-marker directory and write ``G/barrier`` STOP, in one fenced write."""

    generation: int


@dataclass(frozen=True)
class AwaitStops:
    """Wait until every live member has a stop marker, or the barrier timeout."""

    generation: int


@dataclass(frozen=True)
class WriteRound:
    """Write every member's assignment (forced). ``reload``: re-read the layout first (the last write
    failed); the proposal is made again when reloaded or when the live members changed."""

    generation: int
    reload: bool


@dataclass(frozen=True)
class CloseRound:
    """Write ``G/barrier`` ASSIGNED (fenced), then drop the stop markers of older generations."""

    generation: int


RoundStep = GiveStop | AwaitStops | WriteRound | CloseRound


class Waited(enum.Enum):
    ALL_STOPPED = "all-stopped"
    TIMED_OUT = "timed-out"  # a member never answered: its claims still protect its resources
    DEPOSED = "deposed"  # the coordinator was stopped meanwhile


class RoundAbandoned(NotCoordinatorError):
    """The coordinator was stopped in the middle of a round: it is abandoned, never finished without
    the stop markers. The stop order stands until the next coordinator ends it (a standing stop)."""


@dataclass
class Round:
    """A Global Barrier round: STOPPING -> AWAITING -> WRITING (-> WRITING, re-planned, after a failed
    write, at most :data:`ROUND_WRITE_ATTEMPTS` in all) -> CLOSING -> DONE; AWAITING -> ABANDONED
    when the coordinator is stopped meanwhile. :meth:`step` is what to carry out next (None once
    DONE); the driver reports its outcome with :meth:`stopped`, :meth:`waited`, :meth:`written`,
    :meth:`write_failed` or :meth:`closed`. Carried out step by step by a loop (no recursion)."""

    generation: int
    state: RoundState = RoundState.STOPPING
    attempts: int = 0  # writes of the assignments tried
    reload: bool = False

    def step(self) -> RoundStep | None:
        match self.state:
            case RoundState.STOPPING:
                return GiveStop(self.generation)
            case RoundState.AWAITING:
                return AwaitStops(self.generation)
            case RoundState.WRITING:
                return WriteRound(self.generation, self.reload)
            case RoundState.CLOSING:
                return CloseRound(self.generation)
            case RoundState.ABANDONED:
                raise RoundAbandoned(f"stopped in the middle of global barrier round {self.generation}")
        return None

    def _expect(self, state: RoundState) -> None:
        if self.state is not state:
            raise ValueError(f"round {self.generation}: {self.state.value}, not {state.value}")

    def stopped(self) -> None:
        self._expect(RoundState.STOPPING)
        self.state = RoundState.AWAITING

    def waited(self, outcome: Waited) -> None:
        self._expect(RoundState.AWAITING)
        self.state = RoundState.ABANDONED if outcome is Waited.DEPOSED else RoundState.WRITING

    def written(self) -> None:
        self._expect(RoundState.WRITING)
        self.attempts += 1
        self.state = RoundState.CLOSING

    def write_failed(self) -> bool:
        """A write failed for a reason other than the fence: whether to plan again and retry (False:
        out of attempts, the rebalance fails)."""
        self._expect(RoundState.WRITING)
        self.attempts += 1
        self.reload = True
        return self.attempts < ROUND_WRITE_ATTEMPTS

    def closed(self) -> None:
        self._expect(RoundState.CLOSING)
        self.state = RoundState.DONE


def foreign_stop(record: BarrierRecord, own: tuple[int, int] | None) -> bool:
    """Whether ``record`` is a stop order we did not give (``own``: the (generation, epoch) of ours)."""
    return record.phase is Phase.STOP and (record.generation, record.epoch) != own


# -- when ---------------------------------------------------------------------------------------

def retry_delay(failures: int, first: float = 0.2, cap: float = 5.0) -> float:
    """Back-off before the next attempt after ``failures`` failed rebalances in a row."""
    return min(cap, first * 2.0 ** max(0, failures - 1))


def needs_rebalance(previous: GroupConfig | None, config: GroupConfig | None) -> bool:
    """Whether a change of ``G/config`` calls for a rebalance: the first settings read, or another
    algorithm. The interval (which the operator tunes, often) and the departure grace only change
    how long the coordinator waits; a rebalance for each would bump the generation for nothing."""
    if previous is None or config is None:
        return True
    return previous.algorithm is not config.algorithm


def last_rebalance_at(now: float, taken_ms: int, last_ms: int) -> float:
    """The monotonic instant (on the clock that read ``now``, right after the epoch was taken) of a
    rebalance ZooKeeper stamped ``last_ms``, given the stamp of our epoch ``taken_ms``. A stamp
    after our epoch's (another server's clock ahead) means unknown: 0.0, as if long ago."""
    ago = (taken_ms - last_ms) / 1000
    return now - ago if ago >= 0 else 0.0



@dataclass(frozen=True)
class Pace:
    """The instants (one monotonic clock) that decide when the next rebalance may start."""

    last_rebalance: float
    interval: float
    not_before: float  # back-off after failed rebalances
    startup_end: float  # the end of the start-up window (0.0 once something is assigned)


def wait_until(pace: Pace, now: float, orphans: Callable[[], bool]) -> float | None:
    """None when a rebalance may start at ``now``, else the instant to wait for. Whatever arrives
    before the interval has passed joins this rebalance; orphans (resources no live member owns;
    ``orphans()`` says whether there are any, asked only when it matters) do not wait for the
    interval, only for the back-off and the start-up window."""
    unpaced = max(pace.not_before, pace.startup_end)
    start = max(pace.last_rebalance + pace.interval, unpaced)
    if start <= now or (unpaced <= now and orphans()):
        return None
    return start


def orphans_waiting(
    listed: Collection[str],
    resources: Iterable[str],
    layout: Layout,
    reserved: Collection[str],
    unplaceable: Collection[str],
) -> bool:
    """Whether some resource has no live owner, from the watches' last listings: a member whose node
    is gone and whose resources are not ``reserved`` for it, a member back under a new node (nothing
    is written for that node yet), or a resource nobody owns. ``unplaceable`` (orphans the last
    hand-out could not place) do not count again."""
    if not layout.owners or not listed:
        return False
    listed_ids = {m.member_id for m in map(MemberNode.parse, listed) if m is not None}
    holding = {m.member_id for m in map(MemberNode.parse, layout.written.keys() & set(listed)) if m is not None}
    keepers = holding | {mid for mid in reserved if mid not in listed_ids}
    valid = (r for r in resources if is_valid_resource_name(r))
    return orphans.any_orphaned(valid, layout.owners, keepers, frozenset(unplaceable))
