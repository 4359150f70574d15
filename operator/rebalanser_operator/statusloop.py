"""The live status mirror of one ResourceGroup: ZooKeeper watches in, debounced status patches out.

    loop = StatusLoop(ctx, runtime, initial_status=body.get("status", {}))
    await loop.run(should_stop=lambda: bool(stopped))     # until cancelled or told to stop

Each refresh reads the group (re-arming one-shot watches on ``G/clients``, ``G/resources``,
``G/epoch``, ``G/state`` and ``G/config``), updates the tuning state, repairs drift, computes the
status and merge-patches only what changed. Watches and ZooKeeper connection changes wake the loop;
it then waits ``coalesce`` seconds for more changes and never patches more than once per
``min_patch_interval``: a churn storm costs at most one patch per second, and status lags ZooKeeper by
at most ``coalesce + min_patch_interval`` plus one read. A periodic refresh (``period``) runs only while
something changes without a watch (tuning decay, workload polling, the Degraded timer, retries, a lost
connection); an idle group is refreshed every ``idle_period`` as a safety net, so idle cost does not
grow with a re-read of every group every few seconds (:meth:`StatusLoop.needs_polling`).

The loop is the shell of the group's controller (:mod:`rebalanser_operator.controller`): it only posts
refreshes (:meth:`~rebalanser_operator.controller.core.GroupController.refresh`). Each is one of the
controller's steps, planned by :func:`~rebalanser_operator.controller.plan.plan_refresh`, so it never
overlaps another write of the group: the controller ends a grace period and re-applies a changed
Secret itself, and borrows this loop's read (:meth:`StatusLoop.observe`), publish and release (the
controller's :class:`~rebalanser_operator.controller.core.StatusSide`). The async shell only waits,
and reads nothing of the group's state.

Guarantees: the loop is the only writer of ``.status``; a restarted operator leaves the published
status as it is until its own first reconcile of the group has finished and it has read the group from
ZooKeeper once (no flapping to ``Pending``, no fields dropped for an empty view); if ZooKeeper stays out
of reach for ``restart_hold`` seconds it says so, as ``Degraded`` with the last published view of the
group (the same as a running loop that loses its connection); it never raises out of ``run`` because
of ZooKeeper or API failures (it reports them in the status and retries on the next wake-up).
"""

from __future__ import annotations

import asyncio
import contextvars
import copy
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import WatchedEvent
from rebalanser.paths import GroupPaths
from rebalanser.status import GroupStatus

from rebalanser_operator.apply.actions import (
    MEMBERS_LEAVE_WAIT_SECONDS,
    event,
    hold_grace,
    owner_marker,
    refuse,
)
from rebalanser_operator.apply.farewell import release_group
from rebalanser_operator.apply.reconcile import (
    GroupOwnedElsewhereError,
    NotCreatedByOperatorError,
    OwnerMarker,
    ParentNotOwnedError,
    reconcile_group,
    write_config,
)
from rebalanser_operator.controller.core import view_of
from rebalanser_operator.controller.plan import (
    PollFacts,
    Read,
    needs_polling,
    plan_drift,
    plan_read,
)
from rebalanser_operator.runtime import GroupRuntime, OperatorContext
from rebalanser_operator.spec.models import FINALIZER, FailoverMode, Phase
from rebalanser_operator.status.groupread import Snapshot, read_with_watches
from rebalanser_operator.status.tuning import FIXED, QUIET, initial_state, observe
from rebalanser_operator.status.view import (
    FailoverFacts,
    Observation,
    balance_of,
    compute_status,
    failover_condition,
    merge_patch,
    status_dict,
)
from rebalanser_operator.tenancy import NOT_CREATED_BY_OPERATOR, PARENT_NOT_OWNED, PATH_IN_USE, Refusal
from rebalanser_operator.zktls import TlsStoreFull

log = logging.getLogger(__name__)

#: Status fields read from the group's znodes (absent until the group has been read once).
GROUP_FIELDS = (
    "coordinator", "epoch", "generation", "members", "resources", "assigned", "assignments",
    "assignmentsTruncated", "pods", "unassigned", "unassignedTruncated", "lastRebalance",
)


class StatusLoop:
    def __init__(self, ctx: OperatorContext, rt: GroupRuntime, *, initial_status: Mapping[str, Any]) -> None:
        self.ctx = ctx
        self.rt = rt
        self.controller = ctx.controller_of(rt)
        self.options = ctx.options
        self.published: dict[str, Any] = copy.deepcopy(dict(initial_status or {}))
        self.patches = 0
        self.gone = False
        self._event: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._group: GroupStatus | None = None
        self._pods: dict[str, str] | None = None
        self._unconfirmable: tuple[str, ...] = ()
        self._failover_reason: str | None = None  # the FailoverReady reason last reported in an Event
        self._members: list[str] | None = None
        # A status published by an earlier operator: this loop's first view must not be an empty one.
        self._inherited = bool(self.published.get("phase"))
        self._ever_connected = self._inherited and self.published.get("phase") != Phase.PENDING.value
        self._read_once = False  # this loop has read the group from ZooKeeper
        self._born = time.monotonic()
        self._was_connected: bool | None = None
        self._pending_since: float | None = None  # a re-key waits for its new session since then
        self._unbalanced_since: float | None = None
        self._last_rebalance = _rebalance_key(self.published.get("lastRebalance"))
        self._last_phase = self.published.get("phase")
        self._workload_checked = -1e9
        self._rolling_out = False
        self._last_repair = -1e9
        self._last_patch = -1e9
        self._retry_pending = False  # a throttled drift repair or a failed refresh: poll until done
        self._drift_pending = False
        self._polling = True  # needs_polling() as of the last refresh (read by the async shell)

    # ---------------------------------------------------------------------------------- async shell

    async def run(self, should_stop: Callable[[], bool] = lambda: False) -> None:
        self._loop = asyncio.get_running_loop()
        self._event = asyncio.Event()
        self.rt.waker.install(self.wake)
        try:
            while not should_stop() and not self.gone:
                await self._refresh_in_thread()
                if self.gone or should_stop():
                    return
                woken = await self._wait_for_change(should_stop)
                if should_stop():
                    return
                if woken:
                    await asyncio.sleep(self.options.coalesce)
                pause = self._last_patch + self.options.min_patch_interval - time.monotonic()
                if pause > 0:
                    await asyncio.sleep(pause)
        finally:
            self.rt.waker.install(None)

    def wake(self, _event: WatchedEvent | None = None) -> None:
        """Thread-safe: called from kazoo's threads and from handlers."""
        loop, flag = self._loop, self._event
        if loop is None or flag is None or loop.is_closed():
            return
        try:
            loop.call_soon_threadsafe(flag.set)
        except RuntimeError:  # the loop is shutting down
            pass

    async def _wait_for_change(self, should_stop: Callable[[], bool]) -> bool:
        """Until a watch or a handler wakes the loop (True), or the next refresh is due (False): after
        ``period`` while something needs polling, after ``idle_period`` when everything the status
        depends on is watched. Meanwhile, every ``period``, whether the namespace is being deleted
        (one API call per namespace and period, shared by its groups)."""
        assert self._loop is not None
        wait = self.options.period if self._polling else self.options.idle_period
        deadline = self._loop.time() + wait
        while True:
            remaining = deadline - self._loop.time()
            if remaining <= 0:
                return False
            if await self._wait(min(remaining, self.options.period)):
                return True
            if should_stop():
                return False
            terminating = self.ctx.namespace_terminating_cached(self.rt.namespace, self.options.period)
            if terminating is None:
                context = contextvars.copy_context()
                terminating = await self._loop.run_in_executor(
                    self.ctx.executor, context.run, self.ctx.namespace_terminating, self.rt.namespace,
                    self.options.period)
            if terminating:
                return False

    def needs_polling(self) -> bool:
        """Whether the status can change without a ZooKeeper watch or a handler saying so: the tuning
        decays, a workload is polled for rollouts, an unbalanced group turns Degraded by time, a drift
        repair or a refresh waits for a retry, or the group is not reconciled or not connected."""
        rt = self.rt
        return needs_polling(PollFacts(
            reconciled=rt.spec is not None and rt.sync is not None and rt.sync.ok,
            connected=self._was_connected,
            rotation=rt.secrets_changed or rt.grace_until is not None,
            retry=self._retry_pending, unbalanced=self._unbalanced_since is not None,
            workload_unwatched=self._workload_unwatched(),
            tuning_settled=rt.tuning is None or rt.tuning.reason in (QUIET, FIXED),
        ))

    async def _wait(self, timeout: float) -> bool:
        assert self._event is not None
        try:
            await asyncio.wait_for(self._event.wait(), timeout)
            return True
        except TimeoutError:
            return False

    async def _refresh_in_thread(self) -> None:
        assert self._event is not None
        self._event.clear()
        # Only posted: the refresh is the controller's own step (in a copy of this task's context: kopf's
        # event poster lives there), which lends this loop's read and publish (StatusSide).
        await asyncio.wrap_future(self.controller.refresh(self))

    # ------------------------------------------------------------------- what the refresh step borrows

    def refresh(self) -> None:
        """One refresh, as a step of the group's controller (blocking)."""
        self.controller.run(lambda: self.controller.refresh_step(self))

    def refreshed(self, ok: bool, started: float) -> None:
        """The controller's refresh step is over (``ok``: it went through)."""
        self._retry_pending = not ok or self._drift_pending  # a failed refresh or a pending repair: poll
        self._polling = self.needs_polling()
        self.ctx.metrics.status_refresh_seconds.observe(time.monotonic() - started)

    def observe(self, now: float) -> Observation:
        return self._observe(now)

    def publish(self, obs: Observation) -> None:
        self._publish(obs)

    def release(self) -> None:
        """The namespace is being deleted: the group goes with it (members leave first, bounded)."""
        deadline = time.monotonic() + MEMBERS_LEAVE_WAIT_SECONDS + 30
        outcome = release_group(self.ctx, self.rt.namespace, self.rt.name, FINALIZER, deadline=deadline)
        log.info("%s: its namespace is being deleted: %s", self.rt.user, outcome)
        if not self.ctx.is_current(self.rt):
            self.gone = True

    def _observe(self, now: float) -> Observation:
        rt = self.rt
        base = Observation(
            path=rt.path, generation=rt.generation, spec_error=rt.spec_error, sync=rt.sync,
            desired=len(rt.desired) if rt.spec is not None else None, group=self._group,
            effective_interval=rt.effective_interval() if rt.spec is not None else None,
            ever_connected=self._ever_connected, degraded_after=self._degraded_after(),
            assignment_budget=self.options.assignment_budget, pods=self._pods,
            connect=rt.connect if rt.sync is not None and rt.sync.ok else self.published.get("zookeeperConnect"),
            notices=rt.notices if rt.spec is not None else None, failover=self._failover_facts(),
        )
        read = plan_read(view_of(rt), current=self.ctx.is_current(rt))
        if read is Read.GONE:
            self.gone = True  # deleted meanwhile: do not reopen its ZooKeeper connection
            return base
        if read is Read.REFUSED:
            # Refused (another's path, a path or ensemble not allowed...): nothing of what lies at the
            # path is this object's to read, show or act on, and no connection is needed.
            self._group, self._pods = None, None
            reason = rt.sync.reason if rt.sync is not None else "?"
            return _with(base, group=None, pods=None, zk_reason="NotConnected",
                         zk_message=f"the group was refused ({reason}); see ResourcesSynced")
        if read is Read.UNCONFIGURED or rt.connect is None or rt.path is None:
            return _with(base, zk_reason="NotConfigured", zk_message="waiting for the first reconcile")
        try:
            zk = self.ctx.client(rt)
        except TlsStoreFull as exc:
            return self._disconnected(base, str(exc))
        if not zk.connected and self._was_connected is None and now - self._born < self.options.connect_wait:
            # A fresh connection (operator start): not called unreachable yet. No thread waits for it: the
            # session's connecting wakes the loop (OperatorContext.on_zookeeper_state).
            return _with(base, zk_message=f"connecting to {rt.connect}")
        if not zk.connected and self._new_session_pending(now):
            # the ensemble was reached a moment ago with the old credentials: the last read stands
            return _with(base, zk_connected=True, zk_message=f"connected to {rt.connect}; a session for the "
                         "group's new credentials is connecting", ever_connected=True,
                         unbalanced_for=0.0 if self._unbalanced_since is None else now - self._unbalanced_since)
        if not zk.connected:
            return self._disconnected(base, f"cannot reach ZooKeeper at {rt.connect}")
        if not rt.owned:  # reachable, but no reconcile has claimed the group yet: nothing is read
            self._group, self._pods = None, None
            return _with(base, group=None, pods=None, zk_connected=True,
                         zk_message=f"connected to {rt.connect}; the group is not claimed yet")
        try:
            snapshot = read_with_watches(zk, rt.path, self.wake)
            if not self._still_owned(snapshot):
                return self._observe(now)  # shows the refusal, and nothing of what is there now
            group = self._repair_drift(zk, snapshot, now)
            self._tune(zk, group, now)
            hold_grace(self.ctx, zk, rt)
        except (KazooException, KazooTimeoutError) as exc:
            return self._disconnected(base, f"ZooKeeper at {rt.connect}: {type(exc).__name__} {exc}".strip())
        self._ever_connected = self._read_once = True
        self._group, self._pods = group, snapshot.pods
        self._unconfirmable = snapshot.unconfirmable
        self._note_balance(group, now)
        self._connection_event(True, "")
        return _with(
            base, zk_connected=True, zk_message=f"connected to {rt.connect}", group=group, pods=self._pods,
            failover=self._failover_facts(),
            ever_connected=True, effective_interval=rt.effective_interval(),
            unbalanced_for=0.0 if self._unbalanced_since is None else now - self._unbalanced_since,
        )

    def _still_owned(self, snapshot: Snapshot) -> bool:
        """The group root still carries this object's marker (or is gone: drift repair re-creates it).
        Otherwise another object took the path after this one's group was deleted under it: the group
        is refused, and nothing read there is shown."""
        if snapshot.root_data is None:
            return True
        current = OwnerMarker.parse(snapshot.root_data)
        owner = owner_marker(self.ctx, self.rt)
        if current is not None and owner.same_object(current):
            return True
        if current is None and not snapshot.root_data:
            return True  # an unmarked root (workers re-created it): the next repair claims it or refuses
        whose = current.describe(owner) if current is not None else "data that is not an owner marker"
        refuse(self.ctx, self.rt, Refusal(PATH_IN_USE, f"znode {self.rt.path} now holds {whose}"))
        return False

    def _new_session_pending(self, now: float) -> bool:
        """A rotation's re-key waits for the session of the group's new credentials (the group synced, its
        session pending: :func:`~rebalanser_operator.apply.actions.rekey`): not called disconnected,
        and no Event, for ``connect_wait`` from when this loop first saw it."""
        rt = self.rt
        if not (rt.connect_pending and rt.sync is not None and rt.sync.ok):
            self._pending_since = None
            return False
        if self._pending_since is None:
            self._pending_since = now
        return now - self._pending_since < self.options.connect_wait

    def _disconnected(self, base: Observation, message: str) -> Observation:
        reason = "ConnectionLost" if self._ever_connected else "Unreachable"
        self._connection_event(False, message)
        return _with(base, zk_connected=False, zk_reason=reason, zk_message=message)

    def _failover_facts(self) -> FailoverFacts | None:
        """What KubeletConfirmed needs (None for SessionExpiry); a Warning Event when it starts lacking."""
        spec = self.rt.spec
        if spec is None or spec.failover is not FailoverMode.KUBELET_CONFIRMED:
            self._failover_reason = None
            return None
        facts = FailoverFacts(self.ctx.watch_pods, self._unconfirmable)
        members = len(self._group.members) if self._group is not None else 0
        status, reason, message = failover_condition(facts, members)
        if status == "False" and reason != self._failover_reason:
            event(self.ctx, self.rt, "Warning", reason, message)
        self._failover_reason = reason if status == "False" else None
        return facts

    def _degraded_after(self) -> float:
        spec = self.rt.spec
        if spec is None:
            return self.options.degraded_after
        slack = 3 * self.rt.effective_interval() + spec.rebalance.departure_grace_seconds
        return max(self.options.degraded_after, slack)

    def _note_balance(self, group: GroupStatus, now: float) -> None:
        if not group.members or balance_of(group).balanced:
            self._unbalanced_since = None
        elif self._unbalanced_since is None:
            self._unbalanced_since = now

    def _repair_drift(self, zk: KazooClient, snapshot: Snapshot, now: float) -> GroupStatus:
        """Re-applies the spec when ZooKeeper no longer matches it (an edit, a lost ensemble)."""
        rt, group, config = self.rt, snapshot.group, snapshot.config
        if rt.spec is None or rt.path is None or rt.sync is None or not rt.sync.ok or rt.acl is None:
            return group
        wanted = rt.spec.group_config(rt.effective_interval())
        drift = plan_drift(exists=group.exists, resources=group.resources, config=config, desired=rt.desired,
                           wanted=wanted, now=now, last_repair=self._last_repair,
                           interval=self.options.drift_repair_interval)
        self._drift_pending = drift.drifted
        if not drift.repair or not rt.owned:
            return group
        self._last_repair = now
        try:
            result = reconcile_group(zk, rt.path, desired=rt.desired, config=wanted, acl=rt.acl,
                                     owner=owner_marker(self.ctx, rt), confine=rt.confine, identity=self.ctx.identity)
        except NotCreatedByOperatorError as exc:  # re-created meanwhile by someone else: not taken
            refuse(self.ctx, rt, Refusal(NOT_CREATED_BY_OPERATOR, str(exc)))
            return GroupStatus(path=rt.path, exists=False)
        except GroupOwnedElsewhereError as exc:  # re-created meanwhile by something else: not taken
            refuse(self.ctx, rt, Refusal(PATH_IN_USE, str(exc)))
            return GroupStatus(path=rt.path, exists=False)
        except ParentNotOwnedError as exc:
            refuse(self.ctx, rt, Refusal(PARENT_NOT_OWNED, str(exc)))
            return GroupStatus(path=rt.path, exists=False)
        if result.created or result.deleted:
            event(self.ctx, rt, "Normal", "DriftRepaired",
                  f"ZooKeeper differed from the spec: created {result.created}, deleted {result.deleted}")
        return read_with_watches(zk, rt.path, self.wake).group

    def _tune(self, zk: KazooClient, group: GroupStatus, now: float) -> None:
        rt = self.rt
        policy = rt.policy()
        if policy is None or rt.path is None or rt.spec is None:
            return
        previous = self._members
        self._members = list(group.members)
        changes = 0 if previous is None else len(set(previous) ^ set(group.members))
        rolling_out = self._workload_rolling_out(now, force=changes > 0)
        state = rt.tuning or initial_state(policy, now=now)
        before = policy.clamp(state.effective)
        rt.tuning = observe(policy, state, now=now, membership_changes=changes, rolling_out=rolling_out)
        after = rt.effective_interval()
        if after != before and rt.acl is not None and rt.sync is not None and rt.sync.ok:
            write_config(zk, GroupPaths.of(rt.path), rt.spec.group_config(after), rt.acl)
            log.info("%s: effective interval %.1fs -> %.1fs (%s)", rt.user, before, after, rt.tuning.reason)

    def _workload_unwatched(self) -> bool:
        """The spec names a workload the watch has not reported on yet (then it is polled)."""
        spec = self.rt.spec
        if spec is None or spec.workload is None:
            return False
        seen = self.rt.rollout
        return seen is None or seen[:2] != (spec.workload.kind.value, spec.workload.name)

    def _workload_rolling_out(self, now: float, *, force: bool = False) -> bool:
        """Polled every ``workload_poll`` seconds, and at once when the membership changed: the first pod
        of a rollout joining is the moment to raise the interval, before its rebalance is due."""
        spec = self.rt.spec
        if spec is None or spec.workload is None:
            return False
        if not self._workload_unwatched():
            assert self.rt.rollout is not None
            self._rolling_out = self.rt.rollout[2]
            return self._rolling_out
        if force or now - self._workload_checked >= self.options.workload_poll:
            self._workload_checked = now
            value = self.ctx.kube.workload_rolling_out(self.rt.namespace, spec.workload.kind.value, spec.workload.name)
            self._rolling_out = bool(value)
        return self._rolling_out

    def _connection_event(self, connected: bool, message: str) -> None:
        was = self._was_connected
        self._was_connected = connected
        self.ctx.metrics.group_zookeeper_connected.labels(self.rt.namespace, self.rt.name).set(int(connected))
        if was is None and not connected:
            event(self.ctx, self.rt, "Warning", "ZooKeeperUnreachable", message)
        elif was is True and not connected:
            event(self.ctx, self.rt, "Warning", "ZooKeeperDisconnected", message)
        elif was is False and connected:
            event(self.ctx, self.rt, "Normal", "ZooKeeperReconnected", f"connected to {self.rt.connect}")

    def _publish(self, obs: Observation) -> None:
        rt = self.rt
        if obs.sync is None and obs.spec_error is None and self.published.get("phase"):
            # A restarted operator: this daemon can start before the resume handler has reconciled.
            # The status the previous operator published stands until there is something to say.
            # (The observation's own view, not rt's: the reconcile may finish while it is computed.)
            return
        age = time.monotonic() - self._born
        if not self.published and obs.sync is None and obs.spec_error is None and age < self.options.first_publish_hold:
            # A new object whose first reconcile is under way: its first status says how that went, in one
            # patch instead of a Pending one followed at once by another (a bulk apply of a thousand groups
            # is bound by the API server's patches).
            return
        holding = age < self.options.restart_hold
        if self._inherited and not self._read_once and obs.spec_error is None and holding:
            return  # not read the group yet: an empty view would drop the members, the coordinator...
        status = compute_status(obs, previous_conditions=self.published.get("conditions") or [], now=_utcnow())
        new = {**status_dict(status), **self.status_extra()}
        if obs.group is None and not self._read_once:
            # Unreachable since the restart: the published view of the group is the last one known.
            for key in GROUP_FIELDS:
                if key in self.published and key not in new:
                    new[key] = copy.deepcopy(self.published[key])
        self._report(new)
        patch = merge_patch(self.published, new)
        if not patch or not self.may_patch():
            return
        if not self.ctx.kube.patch_status(rt.namespace, rt.name, self.fenced(patch)):
            self.gone = True
            return
        self._last_patch = time.monotonic()
        self.patches += 1
        self.ctx.metrics.status_patches.inc()
        self.published = new

    def status_extra(self) -> dict[str, Any]:
        """Status fields beside the computed ones (none here; an operator replica's loop names itself)."""
        return {}

    def may_patch(self) -> bool:
        """Asked right before each status patch (always yes here; an operator replica's loop says no once
        the group is no longer its own: a refresh queued or under way when it lost the group writes nothing)."""
        return True

    def fenced(self, patch: dict[str, Any]) -> dict[str, Any]:
        """The patch as sent (unchanged here; an operator replica's carries its fencing token)."""
        return patch

    def _report(self, new: Mapping[str, Any]) -> None:
        rt, metrics = self.rt, self.ctx.metrics
        ns, name = rt.namespace, rt.name
        gauges = (
            (metrics.group_members, "members"), (metrics.group_resources, "resources"),
            (metrics.group_assigned, "assigned"), (metrics.group_interval, "effectiveIntervalSeconds"),
        )
        for gauge, field in gauges:
            if field in new:
                gauge.labels(ns, name).set(float(new[field]))
        phase = Phase(new["phase"])
        metrics.set_phase(ns, name, phase)
        rebalance = _rebalance_key(new.get("lastRebalance"))
        if rebalance is not None and rebalance != self._last_rebalance:
            self._last_rebalance = rebalance
            metrics.group_rebalances.labels(ns, name).inc()
            last = new["lastRebalance"]
            event(self.ctx, rt, "Normal", "Rebalanced",
                  f"generation {last.get('generation', '?')}: moved {last.get('moved', '?')} resources in "
                  f"{last.get('durationMs', '?')} ms; {new.get('members', 0)} members, "
                  f"{new.get('assigned', 0)}/{new.get('resources', 0)} assigned")
        if phase.value != self._last_phase:
            if phase in (Phase.ERROR, Phase.DEGRADED):
                event(self.ctx, rt, "Warning", phase.value, str(new.get("message", "")))
            self._last_phase = phase.value


def _rebalance_key(value: Any) -> tuple[Any, Any] | None:
    if not isinstance(value, Mapping) or not value:
        return None
    return (value.get("generation"), value.get("completedAt"))


def _with(obs: Observation, **changes: Any) -> Observation:
    return replace(obs, **changes)


def _utcnow() -> datetime:
    return datetime.now(UTC)
