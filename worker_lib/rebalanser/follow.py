"""Which assignment applies now (pure logic; no I/O): what a member follows of its own assignment node
and of ``G/barrier`` (docs/protocol.md, "Resource Barrier" and "Global Barrier").

The state is what the member node has seen: the barrier's last phase and generation, a Global Barrier
assignment held until its round says ``assigned``, the generation it stopped for, and the generation of
the assignment it follows. Each transition takes what was read and returns the new state and the
effects the member's loop then carries out, queued (never by recursion):

- :class:`Apply` (the assignment's resources become what this member should own),
- :class:`StopForBarrier` (stop all work and mark the round stopped, if the order binds: that needs
  ``G/epoch``, read by the loop; then :func:`barrier_stopped`),
- :class:`ReadAssignment` (read our assignment node again: a round ended that we hold nothing for),
- :class:`Ignored` (a record not taken: logged).

Rules kept here, so that they are tested without ZooKeeper: a record written for another member node,
or older than the generation followed, is never applied (generations only grow within a group); a
Global Barrier assignment that stopped members waits for its round's ``assigned``; a barrier
generation is stopped for once.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from rebalanser.config import Algorithm
from rebalanser.wire import BarrierRecord, MemberAssignment, Phase


@dataclass(frozen=True)
class Apply:
    """Own exactly these resources now (the assignment of ``generation``)."""

    resources: tuple[str, ...]
    generation: int


@dataclass(frozen=True)
class StopForBarrier:
    """A stop order: stop all work and create our stop marker, if ``record`` binds (its epoch is the
    current one); then apply :func:`barrier_stopped`."""

    record: BarrierRecord


@dataclass(frozen=True)
class ReadAssignment:
    """Read our assignment node again."""


@dataclass(frozen=True)
class Ignored:
    """A record not taken, and why (for the log)."""

    reason: str


Effect = Apply | StopForBarrier | ReadAssignment | Ignored


@dataclass(frozen=True)
class Follow:
    """What one member node has seen and follows. Never mutated: each transition returns a new one."""

    barrier: tuple[str, int] = ("", 0)  # G/barrier's last phase and generation read
    held: MemberAssignment | None = None  # a Global Barrier assignment waiting for its round's end
    stopped_for: int | None = None  # the barrier generation this member node has stopped for
    applied: int = 0  # the generation of the assignment this member node follows


NEW = Follow()
"""A new member node: no stop answered yet (generations may even restart)."""

Step = tuple[Follow, list[Effect]]


def assignment_read(state: Follow, assignment: MemberAssignment, node: str) -> Step:
    """Our assignment node (of member node ``node``) was read."""
    if assignment.member and assignment.member != node:
        return state, [Ignored(f"an assignment written for member node {assignment.member}, found in ours")]
    if assignment.generation < state.applied:
        return state, [Ignored(f"an assignment of generation {assignment.generation}: "
                               f"we follow generation {state.applied}")]
    waits = assignment.algorithm == Algorithm.GLOBAL_BARRIER.value and assignment.stop
    if waits and state.barrier != (Phase.ASSIGNED.value, assignment.generation):
        return replace(state, held=assignment), []  # its round's end applies it
    return _apply(state, assignment)


def barrier_read(state: Follow, record: BarrierRecord) -> Step:
    """``G/barrier`` was read."""
    state = replace(state, barrier=(record.phase.value, record.generation))
    if record.phase is Phase.STOP:
        if record.generation != state.stopped_for:
            return state, [StopForBarrier(record)]
        return state, []
    held = state.held
    if held is not None and held.generation == record.generation:
        return _apply(state, held)
    if state.applied < record.generation:  # else applied already (a generation without a stop)
        return state, [ReadAssignment()]
    return state, []


def barrier_stopped(state: Follow, generation: int) -> Follow:
    """This member node stopped for ``generation`` (its marker is made, or the round is over)."""
    return replace(state, stopped_for=generation)


def _apply(state: Follow, assignment: MemberAssignment) -> Step:
    return replace(state, held=None, applied=assignment.generation), [
        Apply(assignment.resources, assignment.generation)]
