"""What is posted to a member's event loop: one small immutable value per kind of event.

Watches, timers, kazoo's connection listener, the coordinator and the public ``stop`` post these;
only the member's own thread reads them (:class:`rebalanser.member_loop.MemberLoop`)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from rebalanser.errors import CorruptDataError


class Connection(StrEnum):
    CONNECTED = "connected"
    SUSPENDED = "suspended"
    LOST = "lost"


@dataclass(frozen=True)
class SessionChanged:
    state: Connection
    session: int  # the session this is about: the one established (CONNECTED), or the one last held


@dataclass(frozen=True)
class ElectionChanged:
    """Our predecessor in election order may have gone."""


@dataclass(frozen=True)
class AssignmentChanged:
    node: str | None  # the member znode whose assignment changed (None: ours, whichever it is)


@dataclass(frozen=True)
class BarrierChanged:
    """``G/barrier`` may have changed."""


@dataclass(frozen=True)
class ClaimReleased:
    resource: str | None  # a claim another session released (None: retry every wanted resource)


@dataclass(frozen=True)
class ClaimLost:
    """Our claim on ``resource`` (of fencing token ``token``) was deleted by someone else."""

    resource: str
    token: int


@dataclass(frozen=True)
class LeaseExpired:
    """The self-fencing lease ran out."""


@dataclass(frozen=True)
class CoordinatorEpoch:
    seq: int  # which coordinator instance reports
    epoch: int


@dataclass(frozen=True)
class Deposed:
    seq: int
    reason: str


@dataclass(frozen=True)
class OwnNodeChanged:
    node: str


@dataclass(frozen=True)
class RootChanged:
    """The group root's data changed or the root went (its watch fired): read again for the deletion mark."""


@dataclass(frozen=True)
class BadData:
    error: CorruptDataError


@dataclass(frozen=True)
class JoinStep:
    """Joining may go on (the group exists again, an earlier incarnation's znode went, a timer)."""


@dataclass(frozen=True)
class StopRequested:
    """:meth:`Client.stop` was called."""


Event = (
    SessionChanged | ElectionChanged | AssignmentChanged | BarrierChanged | ClaimReleased | ClaimLost | LeaseExpired
    | CoordinatorEpoch | Deposed | OwnNodeChanged | RootChanged | BadData | JoinStep | StopRequested
)

# Posted by a watch or a timer of the session that joined: dropped when that session is not current.
SESSION_BOUND = (ElectionChanged, AssignmentChanged, BarrierChanged, ClaimReleased, ClaimLost, OwnNodeChanged,
                 RootChanged)
