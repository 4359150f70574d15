"""The controller of one ResourceGroup: the only writer of its znodes, its ``.status`` and its state.

    controller = ctx.controller("shop", "orders", uid)
    result = controller.apply(DesiredSpec.of(spec, generation=3))     # kopf's create/update/resume
    controller.secret_seen(SecretSeen.of("zk-digest", data))           # the Secret poll: kept, re-applied
    controller.rollout_seen(RolloutSeen("Deployment", "workers", True))  # the workload watch
    outcomes = await asyncio.wrap_future(controller.pod_ended(PodEnded(pod, ended)))  # failover
    controller.view()                                                  # what other threads may read

Every write of a group, to ZooKeeper (reconcile, drift repair, tuning, re-ACL, rotation, failover,
deletion) or to its status, is a step of its controller, and the steps of one group run one at a time
on a :class:`~rebalanser_operator.controller.strand.Strand` (a shared pool's thread while there is
work, none otherwise). Its :class:`~rebalanser_operator.controller.state.GroupRuntime` (and the status
loop's own fields) are written by those steps only; other threads send immutable messages
(:mod:`~rebalanser_operator.controller.messages`) and read the immutable
:class:`~rebalanser_operator.controller.plan.GroupView` the controller publishes after each step.
What to do is decided by the pure functions of :mod:`~rebalanser_operator.controller.plan`; the I/O
steps (:mod:`rebalanser_operator.apply.actions`, :mod:`rebalanser_operator.statusloop`,
:mod:`rebalanser_operator.failover.endmember`) carry it out.

Guarantees: two writes of one group never overlap, so a stale desired value can never undo a newer
one; a message is handled after every message sent before it from the same thread. It does not
promise that a message is handled at once: a long step (a deletion waiting for members to leave)
holds the ones behind it.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from rebalanser_operator.controller.connectwait import AwaitConnection, first_attempt, wait_async, wait_blocking
from rebalanser_operator.controller.messages import (
    Deletion,
    DesiredSpec,
    PodEnded,
    RolloutSeen,
    SecretSeen,
    SyncResult,
)
from rebalanser_operator.controller.plan import GroupView, RefreshFacts, Step, plan_refresh, plan_rollout
from rebalanser_operator.controller.state import GroupRuntime
from rebalanser_operator.controller.strand import Strand
from rebalanser_operator.spec.models import FailoverMode
from rebalanser_operator.status.view import Observation

if TYPE_CHECKING:
    from rebalanser_operator.failover.endmember import Ended
    from rebalanser_operator.zkpool import ZooKeeperPool

T = TypeVar("T")

log = logging.getLogger(__name__)

#: first attempts of one step, each of which may end waiting for a session it met (a move to another connect
#: string meets the new ensemble's session, then the group's own), all within one ``connect_wait``
MAX_SESSIONS_A_STEP_WAITS_FOR = 3


def view_of(rt: GroupRuntime) -> GroupView:
    spec, sync = rt.spec, rt.sync
    workload = spec.workload if spec is not None else None
    return GroupView(
        namespace=rt.namespace, name=rt.name, uid=rt.uid, connect=rt.connect, path=rt.path, owned=rt.owned,
        synced=sync is not None and sync.ok, refused=sync is not None and not sync.ok and sync.permanent,
        secrets=frozenset(rt.secrets()),
        workload=(workload.kind.value, workload.name) if workload is not None else None,
        failover=spec is not None and spec.failover is FailoverMode.KUBELET_CONFIRMED,
        needs_credentials=spec is not None and spec.zookeeper.credentials_secret is not None,
        has_credentials=rt.credentials is not None,
    )


@dataclass(frozen=True)
class GroupSteps:
    """The I/O steps a controller runs for its messages (:mod:`rebalanser_operator.apply.actions`, bound
    to the operator's context by :class:`rebalanser_operator.runtime.OperatorContext`)."""

    apply: Callable[[GroupRuntime, DesiredSpec], SyncResult]
    delete: Callable[[GroupRuntime, Deletion], str]
    #: kept when it changes the connection (True), and with the flag re-applied in the same step
    secret_seen: Callable[[GroupRuntime, SecretSeen, bool], bool]
    refresh_facts: Callable[[GroupRuntime, float], RefreshFacts]  # what a refresh finds (cheap, no ZooKeeper)
    end_grace: Callable[[GroupRuntime, float], bool]  # a rotation's grace period is over: re-apply
    reapply: Callable[[GroupRuntime], None]  # the last spec again, with the Secrets as received (a step)


class StatusSide(Protocol):
    """What the status daemon lends the controller's refresh step: its read of the group, its publish,
    the release of a terminating namespace's group, and a word when the refresh is over."""

    gone: bool

    def release(self) -> None: ...

    def observe(self, now: float) -> Observation: ...

    def publish(self, obs: Observation) -> None: ...

    def refreshed(self, ok: bool, started: float) -> None: ...


class GroupController:
    def __init__(self, rt: GroupRuntime, executor: Executor, *, pool: ZooKeeperPool, connect_wait: float,
                 steps: GroupSteps) -> None:
        self.rt = rt
        self._pool = pool
        self._connect_wait = connect_wait
        self._steps = steps
        self._strand = Strand(executor)
        self._depth = 0  # steps running inline in a step (the strand's own thread only)
        #: the context the group was last applied or introduced from (kopf's handler or status daemon: its
        #: Event poster for the object), where the Secret poll's steps run (None: neither yet)
        self._home: contextvars.Context | None = None
        self._view = view_of(rt)

    # ------------------------------------------------------------------ for any thread (read only)

    def view(self) -> GroupView:
        return self._view

    def on_strand(self) -> bool:
        return self._strand.on_strand()

    # ----------------------------------------------------------------------------- running steps

    def run(self, step: Callable[[], T], timeout: float | None = None) -> T:
        """Runs ``step`` as one of the group's steps and returns its outcome (blocking; inline when
        called from a step of this group)."""
        return self._strand.call(lambda: self._step(step), timeout)

    def submit(self, step: Callable[[], T], context: contextvars.Context | None = None) -> Future[T]:
        """Queues ``step`` as one of the group's steps (never blocks), in a copy of the caller's context
        variables or of ``context``."""
        return self._strand.submit(lambda: self._step(step), context)

    def _step(self, step: Callable[[], T]) -> T:
        """Runs ``step``; at the end of the outermost one its changes replace the group's state, once
        (:meth:`~rebalanser_operator.controller.state.GroupRuntime.commit`), the view is published, and
        then the status loop is woken, once, if the step asked for it."""
        if self._depth == 0:
            self.rt.waker.hold()
        self._depth += 1
        try:
            return step()
        finally:
            self._depth -= 1
            if self._depth == 0:
                try:
                    self.rt.commit()
                    self._view = view_of(self.rt)
                finally:
                    self.rt.waker.release()

    # ---------------------------------------------------------------------------------- messages

    def attempt(self, step: Callable[[], T]) -> T:
        """Runs ``step`` (one that may need a session) as a first attempt, then, if its session was not
        connected yet, waits for it on the calling thread (at most ``connect_wait``) and runs it once more
        (blocking; see :mod:`~rebalanser_operator.controller.connectwait`). Inline on the strand, once."""
        if self.on_strand():
            return self.run(step)
        deadline = time.monotonic() + self._connect_wait
        for _ in range(MAX_SESSIONS_A_STEP_WAITS_FOR):  # a step may meet a second session only once the first is up
            try:
                with first_attempt():
                    future = self.submit(step)
                return future.result()
            except AwaitConnection as pending:
                wait_blocking(self._pool, pending.client, max(0.0, deadline - time.monotonic()))
        return self.run(step)

    async def attempt_async(self, step: Callable[[], T]) -> T:
        """:meth:`attempt` for the event loop: no thread waits for the session."""
        deadline = time.monotonic() + self._connect_wait
        for _ in range(MAX_SESSIONS_A_STEP_WAITS_FOR):
            try:
                with first_attempt():
                    future = self.submit(step)
                return await asyncio.wrap_future(future)
            except AwaitConnection as pending:
                await wait_async(self._pool, pending.client, max(0.0, deadline - time.monotonic()))
        return await asyncio.wrap_future(self.submit(step))

    def apply(self, desired: DesiredSpec) -> SyncResult:
        """Applies a desired spec (blocking; raises ``RetryLater`` or ``InvalidSpec`` as kopf needs)."""
        self._home = contextvars.copy_context()
        return self.attempt(self._applying(desired))

    async def apply_async(self, desired: DesiredSpec) -> SyncResult:
        """:meth:`apply` for kopf's handlers: neither its thread nor a pool thread waits for ZooKeeper."""
        self._home = contextvars.copy_context()
        return await self.attempt_async(self._applying(desired))

    def delete(self, deletion: Deletion) -> str:
        """Removes the group's znodes (blocking; raises ``RetryLater`` while it must wait)."""
        return self.attempt(self._deleting(deletion))

    async def delete_async(self, deletion: Deletion) -> str:
        return await self.attempt_async(self._deleting(deletion))

    def _applying(self, desired: DesiredSpec) -> Callable[[], SyncResult]:
        return lambda: self._steps.apply(self.rt, desired)

    def _deleting(self, deletion: Deletion) -> Callable[[], str]:
        return lambda: self._steps.delete(self.rt, deletion)

    def secret_seen(self, seen: SecretSeen) -> Future[bool]:
        """A Secret as the poll read it (never blocks): one step keeps it when it changes the group's
        connection and re-applies the group with it there and then; True if it changed. A re-apply that
        cannot go through now (its session not connected yet) is left marked for the refresh.

        The step runs in the context the group was last applied or introduced from (kopf's handler, or
        its status daemon), where kopf posts the object's Events (``SecretApplied``), as those steps do:
        the poll's own thread has no object's context. Before either (nothing applied yet, so nothing to
        re-apply), the step only keeps the Secret and marks the group."""
        home = self._home

        return self.submit(lambda: self._steps.secret_seen(self.rt, seen, home is not None), home)

    def introduce(self, body: Mapping[str, Any]) -> Future[None]:
        """The object's reference for Events, from its status daemon (never blocks; an applied spec's
        body is kept). Its context (kopf's Event poster for the object) becomes the one the steps the
        poll hands over run in (:meth:`secret_seen`)."""
        self._home = contextvars.copy_context()
        reference = json.dumps(body)

        def keep() -> None:
            if self.rt.body is None:
                self.rt.body = json.loads(reference)

        return self.submit(keep)

    def rollout_seen(self, seen: RolloutSeen) -> Future[None]:
        """The named workload's rollout state (never blocks; the group refreshes when it changed)."""

        def note() -> None:
            value = (seen.kind, seen.name, seen.rolling)
            if plan_rollout(self.rt.rollout, value):
                self.rt.rollout = value
                self.rt.wake()

        return self.submit(note)

    def refresh(self, status: StatusSide) -> Future[None]:
        """A refresh of the group, posted by its status daemon (never blocks): one of the controller's
        steps, :meth:`refresh_step`."""
        return self.submit(lambda: self.refresh_step(status))

    def refresh_step(self, status: StatusSide) -> None:
        """The refresh as :func:`~rebalanser_operator.controller.plan.plan_refresh` plans it: release a
        terminating namespace's group, end a grace period, re-apply (a changed Secret, the grace's end, a
        session connected late), then the status daemon's read and publish. Never raises: a failure is
        logged, and the daemon is told (it retries)."""
        started, ok = time.monotonic(), False
        try:
            obs: Observation | None = None
            for step in plan_refresh(self._steps.refresh_facts(self.rt, started)):
                if step is Step.RELEASE:
                    status.release()
                    return  # not "went through": the daemon keeps polling until it is gone
                if step is Step.END_GRACE:
                    self._steps.end_grace(self.rt, started)
                elif step is Step.REAPPLY:
                    self._steps.reapply(self.rt)  # retried at the next refresh while it fails
                elif step is Step.OBSERVE:
                    obs = status.observe(started)
                elif step is Step.PUBLISH and obs is not None and not status.gone:
                    status.publish(obs)
            ok = True
        except Exception:
            log.exception("status refresh of %s failed", self.rt.user)
        finally:
            status.refreshed(ok, started)

    def pod_ended(self, message: PodEnded, end: Callable[[PodEnded], list[Ended]]) -> Future[list[Ended]]:
        """Ends the dead instance's member nodes with ``end`` as one of the group's steps (never blocks)."""
        return self.submit(lambda: end(message))
