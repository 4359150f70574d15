"""A ResourceGroup's state, which its controller keeps, and the operator's timing options.

One :class:`GroupRuntime` per ResourceGroup: what the last reconcile established (parsed spec, path,
connect string, ACL, outcome) and the tuning state, as one frozen :class:`GroupState`. ``owned`` says
that the last reconcile found the group root to be this object's (or created it): the status loop
reads the group, and failover acts on it, only while it is set. It belongs to the group's
:class:`~rebalanser_operator.controller.core.GroupController`: only the controller's steps write it
(one at a time); other threads send the controller messages and read its immutable view.

The state is one frozen :class:`GroupState`: :class:`Applied` (the adopted spec, its path and
connection: only an admitted apply replaces it), :class:`Outcome` (the generation, a permanent spec
error, the sync state, whether the group is owned, the ACL of the last sync, a session still
connecting, the spec's older forms), :class:`~rebalanser_operator.controller.rotation.Rotation` (the
credentials and TLS material, and a rotation under way, from the pure plan
:func:`~rebalanser_operator.controller.rotation.plan_rotation`), the tuning state, the Event
reference, the worker config last published and the rollout last seen. A step works on a draft of it
(its writes replace one part at a time, and the step reads its own writes); the controller replaces
:attr:`GroupRuntime.state` with the draft once, at the step's end (:meth:`GroupRuntime.commit`), as
kopf applies its patches once. The :class:`Waker` is not state: it is the channel to the group's
status loop.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from kazoo.security import ACL

from rebalanser_operator.controller.rotation import Rotation, session_credentials
from rebalanser_operator.identity import DigestCredentials
from rebalanser_operator.spec.models import ResourceGroupSpec
from rebalanser_operator.status.tuning import TuningPolicy, TuningState
from rebalanser_operator.status.view import ASSIGNMENT_BUDGET, SyncState
from rebalanser_operator.zkfence import Fence
from rebalanser_operator.zktls import TlsMaterial

#: Threads for the groups' controllers (their steps: reconciles, status refreshes, failover...), shared
#: out among namespaces (``Limits.workers_per_namespace`` each: :mod:`~rebalanser_operator.controller.share`);
#: no step waits for a ZooKeeper connection (:mod:`~rebalanser_operator.controller.connectwait`). kopf's
#: handlers await the controllers' answers on the event loop; the Kubernetes client keeps as many
#: connections, so none is opened and discarded per call.
EXECUTOR_THREADS = 32


#: Seconds a rotated credentials Secret's previous password keeps its access to the group's znodes.
DEFAULT_CREDENTIALS_GRACE = 300.0


@dataclass(frozen=True)
class LoopOptions:
    """Timing of the status mirror (seconds)."""

    coalesce: float = 0.5  # wait after a ZooKeeper change for more to arrive
    min_patch_interval: float = 1.0  # at most one status patch per object per this period
    period: float = 5.0  # refresh at least this often while something needs polling (see StatusLoop)
    idle_period: float = 300.0  # otherwise: everything is watched; a safety net only
    workload_poll: float = 2.0
    drift_repair_interval: float = 5.0
    degraded_after: float = 60.0
    connect_wait: float = 5.0  # how long a handler waits for a ZooKeeper connection before retrying
    credentials_grace: float = DEFAULT_CREDENTIALS_GRACE  # both passwords in the ACLs after a rotation
    restart_hold: float = 30.0  # a restarted loop keeps the published status this long without a read
    first_publish_hold: float = 10.0  # a new object's first status waits this long for its first reconcile
    assignment_budget: int = ASSIGNMENT_BUDGET


class Waker:
    """Asks the group's status loop to refresh soon (the loop installs itself; thread-safe, never blocks).
    While a step of the group runs (:meth:`hold`), the wake-ups it asks for wait for its end and become
    one (:meth:`release`): the loop is told once, after the step's state has replaced the group's."""

    def __init__(self) -> None:
        self._callback: Callable[[], None] | None = None
        self._lock = threading.Lock()
        self._held = False
        self._asked = False

    def install(self, callback: Callable[[], None] | None) -> None:
        self._callback = callback

    def hold(self) -> None:
        """A step of the group begins."""
        with self._lock:
            self._held = True

    def release(self) -> None:
        """The step has ended (its state committed): one wake-up if it asked for any."""
        with self._lock:
            asked, self._held, self._asked = self._asked, False, False
        if asked:
            self._wake()

    def __call__(self) -> None:
        with self._lock:
            if self._held:
                self._asked = True
                return
        self._wake()

    def _wake(self) -> None:
        callback = self._callback
        if callback is not None:
            callback()


@dataclass(frozen=True)
class Applied:
    """The spec the last admitted apply adopted: one frozen value, replaced as a whole by that apply."""

    spec: ResourceGroupSpec | None = None
    spec_json: str | None = None  # as kopf handed it over (re-applied when a referenced Secret changes)
    path: str | None = None
    connect: str | None = None
    session_timeout: float | None = None
    desired: frozenset[str] = frozenset()
    confine: str | None = None  # the namespace root the path lies in (as the connection sees it)


@dataclass(frozen=True)
class Outcome:
    """What the last apply (or refusal) established: one frozen value, replaced as a whole."""

    generation: int | None = None  # of the spec the last apply was handed
    spec_error: str | None = None  # why that spec can never be reconciled as written
    sync: SyncState | None = None
    owned: bool = False  # the last reconcile claimed (connect, path) for this object: safe to read and act on
    acl: tuple[ACL, ...] | None = None  # the group ACL the last sync put on the znodes
    connect_pending: bool = False  # the last apply found its session not connected: re-apply once it is
    notices: tuple[str, ...] = ()  # the adopted spec's older forms (spec.notices), shown in SpecCurrent
    #: the applied spec went through (znodes, ACL, workers' config) and no other spec was adopted since:
    #: a rotation's re-apply only re-keys it (:func:`~rebalanser_operator.controller.rotation.plan_reapply`)
    in_place: bool = False


@dataclass(frozen=True)
class GroupState:
    """Everything the controller knows of its group: one frozen value, replaced once per step."""

    applied: Applied = field(default_factory=Applied)
    outcome: Outcome = field(default_factory=Outcome)
    #: the credentials in use and the rotation under way
    #: (:func:`~rebalanser_operator.controller.rotation.plan_rotation`)
    rotation: Rotation = field(default_factory=Rotation)
    tuning: TuningState | None = None
    body: Mapping[str, Any] | None = field(default=None, repr=False)  # for Events: apiVersion, kind, metadata
    worker_config: Mapping[str, str] | None = None  # as last published in the workers' ConfigMap
    #: the replica's fence (claim, token) that ConfigMap was last published under (None: no fence)
    config_stamp: tuple[int, int] | None = None
    rollout: tuple[str, str, bool] | None = None  # (kind, name, rolling out) as last seen by the workload watch


@dataclass
class GroupRuntime:
    """A group's state: written by its controller's steps only (see the module docstring)."""

    namespace: str
    name: str
    uid: str
    waker: Waker = field(default_factory=Waker, repr=False)
    #: An operator replica's fence of the group's ZooKeeper writes while it serves the group (not state:
    #: set once at the gain, before the group's first step; :mod:`rebalanser_operator.zkfence`).
    fence: Fence | None = field(default=None, repr=False)
    _state: GroupState = field(default_factory=GroupState)  # as the last step left it
    replacements: int = 0  # how often :attr:`state` was replaced (once per step that changed it)
    _draft: GroupState = field(init=False, repr=False)  # the running step's (:attr:`state` between steps)

    def __post_init__(self) -> None:
        self._draft = self._state

    @property
    def state(self) -> GroupState:
        """The group's state as the last step left it (a step's own changes show once it has ended)."""
        return self._state

    def commit(self) -> bool:
        """The end of a step (the controller calls it): its draft replaces :attr:`state`, once; False when
        the step changed nothing."""
        draft = self._draft
        if draft is self._state:
            return False
        if draft == self._state:
            self._draft = self._state
            return False
        self._state = draft
        self.replacements += 1
        return True

    # The parts, as the running step sees them; a write replaces one part of the step's draft.

    @property
    def applied(self) -> Applied:
        return self._draft.applied

    @applied.setter
    def applied(self, value: Applied) -> None:
        self._draft = replace(self._draft, applied=value)

    @property
    def outcome(self) -> Outcome:
        return self._draft.outcome

    @outcome.setter
    def outcome(self, value: Outcome) -> None:
        self._draft = replace(self._draft, outcome=value)

    @property
    def rotation(self) -> Rotation:
        return self._draft.rotation

    @rotation.setter
    def rotation(self, value: Rotation) -> None:
        self._draft = replace(self._draft, rotation=value)

    @property
    def tuning(self) -> TuningState | None:
        return self._draft.tuning

    @tuning.setter
    def tuning(self, value: TuningState | None) -> None:
        self._draft = replace(self._draft, tuning=value)

    @property
    def body(self) -> Mapping[str, Any] | None:
        return self._draft.body

    @body.setter
    def body(self, value: Mapping[str, Any] | None) -> None:
        self._draft = replace(self._draft, body=value)

    @property
    def worker_config(self) -> Mapping[str, str] | None:
        return self._draft.worker_config

    @worker_config.setter
    def worker_config(self, value: Mapping[str, str] | None) -> None:
        self._draft = replace(self._draft, worker_config=value)

    @property
    def config_stamp(self) -> tuple[int, int] | None:
        return self._draft.config_stamp

    @config_stamp.setter
    def config_stamp(self, value: tuple[int, int] | None) -> None:
        self._draft = replace(self._draft, config_stamp=value)

    def fence_stamp(self) -> tuple[int, int] | None:
        """This replica's fence of the group as (claim, token), which its ConfigMap writes carry."""
        return (self.fence.claim, self.fence.token) if self.fence is not None else None

    def published_config(self) -> Mapping[str, str] | None:
        """The workers' ConfigMap as last published under this replica's fence (None: to publish again)."""
        return self.worker_config if self.config_stamp == self.fence_stamp() else None

    @property
    def rollout(self) -> tuple[str, str, bool] | None:
        return self._draft.rollout

    @rollout.setter
    def rollout(self, value: tuple[str, str, bool] | None) -> None:
        self._draft = replace(self._draft, rollout=value)

    # The applied spec's parts, read only (an apply replaces :attr:`applied` as a whole).

    @property
    def spec(self) -> ResourceGroupSpec | None:
        return self._draft.applied.spec

    @property
    def raw_spec(self) -> dict[str, Any] | None:
        """The applied spec as kopf handed it over (a copy)."""
        text = self._draft.applied.spec_json
        return None if text is None else dict(json.loads(text))

    @property
    def path(self) -> str | None:
        return self._draft.applied.path

    @property
    def connect(self) -> str | None:
        return self._draft.applied.connect

    @property
    def session_timeout(self) -> float | None:
        return self._draft.applied.session_timeout

    @property
    def desired(self) -> frozenset[str]:
        return self._draft.applied.desired

    @property
    def confine(self) -> str | None:
        return self._draft.applied.confine

    @property
    def generation(self) -> int | None:
        return self._draft.outcome.generation

    @property
    def spec_error(self) -> str | None:
        return self._draft.outcome.spec_error

    @property
    def sync(self) -> SyncState | None:
        return self._draft.outcome.sync

    @property
    def owned(self) -> bool:
        return self._draft.outcome.owned

    @property
    def acl(self) -> list[ACL] | None:
        acl = self._draft.outcome.acl
        return None if acl is None else list(acl)

    @property
    def connect_pending(self) -> bool:
        return self._draft.outcome.connect_pending

    @property
    def notices(self) -> tuple[str, ...]:
        return self._draft.outcome.notices

    @property
    def tls(self) -> TlsMaterial | None:
        """As the last apply read it from spec.zookeeper.tls.secret."""
        return self._draft.rotation.tls

    @property
    def user(self) -> str:
        return f"{self.namespace}/{self.name}"

    def secrets(self) -> set[str]:
        """Names of the Secrets the last applied spec references (credentials, TLS)."""
        if self.spec is None:
            return set()
        zookeeper = self.spec.zookeeper
        names = {zookeeper.credentials_secret} if zookeeper.credentials_secret else set()
        if zookeeper.tls is not None:
            names.add(zookeeper.tls.secret)
        return names

    def policy(self) -> TuningPolicy | None:
        if self.spec is None:
            return None
        r = self.spec.rebalance
        return TuningPolicy(r.min_interval_seconds, r.max_interval_seconds, r.adaptive)

    def effective_interval(self) -> float:
        policy = self.policy()
        if policy is None:
            return 0.0
        if self._draft.tuning is None:
            return policy.min_interval
        return policy.clamp(self._draft.tuning.effective)

    def session_credentials(self) -> tuple[DigestCredentials, ...]:
        """The credentials this group's ZooKeeper session holds: the current ones, and during a
        rotation's grace period the previous ones too (never another group's)."""
        return session_credentials(self._draft.rotation)

    # The rotation's parts, read only (a step replaces :attr:`rotation` as a whole).

    @property
    def credentials(self) -> DigestCredentials | None:
        """As the last apply read them from the Secret (deletion may outlive it)."""
        return self._draft.rotation.credentials

    @property
    def previous_credentials(self) -> DigestCredentials | None:
        return self._draft.rotation.previous

    @property
    def previous_acl(self) -> list[ACL] | None:
        """The replaced credentials' digest entries, kept in the ACLs during the grace (None: none)."""
        return list(self._draft.rotation.previous_acl) or None

    @property
    def grace_until(self) -> float | None:
        """Monotonic end of a rotation's grace period (None: no rotation in progress)."""
        return self._draft.rotation.grace_until

    @property
    def secrets_changed(self) -> bool:
        """A referenced Secret differs from what the group uses, or the grace ended: re-apply."""
        return self._draft.rotation.reapply

    def wake(self) -> None:
        """Asks the status loop to refresh soon (thread-safe, never blocks)."""
        self.waker()
