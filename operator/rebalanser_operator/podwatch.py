"""Confirmed-death failover, the glue: a pod's status change -> the member nodes to end, per group.

``failover_index`` (a kopf index of ResourceGroups by namespace) names the groups that opted in with
``spec.failover: KubeletConfirmed``; kopf fills it before any handler runs, so a pod event seen right
after the operator starts is not lost. :func:`handle_pod` waits (bounded) until the group's runtime has
been reconciled successfully (connect string, path, credentials, and the group root's owner marker
verified as this ResourceGroup's: a group in ``PathInUse`` gets no failover), then ends, in a worker
thread, the session of every member node that the pod's terminated container instances prove dead
(:mod:`endmember`, which checks the marker again after its ``sync``, and closes the session). Whether to act is
:func:`~rebalanser_operator.controller.plan.plan_failover` of the group's published view; the ending
itself is one of the group's controller steps, so it never overlaps another write of the group. A run that cannot finish
(ZooKeeper unreachable, credentials missing) ends nothing: the group falls back to session expiry,
and the next pod event or operator start tries again. An instance counts as handled (later events
about it are skipped) only once a run has found its member node and ended its session, or found that it
cannot (a worker of an older version without a session record: left to session expiry).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kazoo.exceptions import KazooException

from rebalanser_operator.apply.actions import event, owner_marker
from rebalanser_operator.controller.connectwait import connected
from rebalanser_operator.controller.core import view_of
from rebalanser_operator.controller.messages import PodEnded
from rebalanser_operator.controller.plan import Failover as Decision
from rebalanser_operator.controller.plan import GroupView, plan_failover
from rebalanser_operator.failover.choice import EndedInstance, PodRef, ended_instances
from rebalanser_operator.failover.endmember import Ended, NotOwned, end_instances
from rebalanser_operator.runtime import GroupRuntime, OperatorContext
from rebalanser_operator.spec.models import FailoverMode, PodSelector

log = logging.getLogger(__name__)

#: How long a pod event waits for its group's first reconcile (after an operator start).
READY_WAIT = 60.0
#: (group path, nonce) pairs already handled, remembered to skip repeated pod events cheaply.
DONE_LIMIT = 10_000


@dataclass(frozen=True)
class OptedIn:
    """A ResourceGroup with ``spec.failover: KubeletConfirmed`` (an entry of the kopf index)."""

    name: str
    selector: PodSelector | None


def index_entry(namespace: str | None, name: str, spec: Mapping[str, Any]) -> dict[str, OptedIn] | None:
    """The kopf index function's value: ``{namespace: OptedIn}`` for an opted-in group, else None."""
    if namespace is None or spec.get("failover") != FailoverMode.KUBELET_CONFIRMED.value:
        return None
    raw = spec.get("podSelector")
    selector = PodSelector.model_validate(raw) if isinstance(raw, Mapping) else None
    return {namespace: OptedIn(name, selector)}


class Failover:
    """Per-operator state of confirmed-death failover (what was done, to skip repeated events)."""

    def __init__(self, ctx: OperatorContext) -> None:
        self.ctx = ctx
        self._lock = threading.Lock()  # the groups' controllers end members in parallel
        self._done: dict[tuple[str, str], None] = {}

    async def handle_pod(self, pod: Mapping[str, Any], opted_in: Iterable[OptedIn]) -> list[Ended]:
        received = time.monotonic()
        ended = ended_instances(pod)
        ref = PodRef.of(pod)
        if not ended or ref is None:
            return []
        labels = (pod.get("metadata") or {}).get("labels")
        outcomes: list[Ended] = []
        for group in opted_in:
            if group.selector is not None and not group.selector.selects(labels):
                continue
            view = await self._ready(ref.namespace, group.name)
            if view is None or view.path is None:
                log.warning("failover: %s/%s is not reconciled, refused or not opted in; pod %s waits for "
                            "session expiry", ref.namespace, group.name, ref.name)
                continue
            with self._lock:
                fresh = tuple(e for e in sorted(ended) if (view.path, e.nonce) not in self._done)
            if fresh:
                controller = self.ctx.controller(view.namespace, view.name, view.uid)
                runtime = controller.rt

                def end(message: PodEnded, rt: GroupRuntime = runtime) -> list[Ended]:
                    return self._end(rt, message.pod, list(message.ended), received)

                done: list[Ended] = await asyncio.wrap_future(controller.pod_ended(PodEnded(ref, fresh), end))
                outcomes.extend(done)
        return outcomes

    async def _ready(self, namespace: str, name: str) -> GroupView | None:
        """The group's view once failover may act for it (None: never, or not within READY_WAIT)."""
        deadline = time.monotonic() + READY_WAIT
        while True:
            view = self.ctx.view(namespace, name)
            decision = plan_failover(view)
            if decision is Decision.ACT:
                return view
            if decision is Decision.NEVER or time.monotonic() > deadline:
                return None  # e.g. PathInUse: no waiting makes this group's path its own
            await asyncio.sleep(0.2)

    def _end(self, runtime: GroupRuntime, pod: PodRef, ended: list[EndedInstance], received: float) -> list[Ended]:
        """A step of the group's controller: ends the member nodes ``pod``'s ``ended`` instances prove dead
        (``received``: when the pod event arrived, monotonic; the log line says how long ago)."""
        if plan_failover(view_of(runtime)) is not Decision.ACT or runtime.path is None:
            return []  # changed while the message waited (refused, another path...)
        path = runtime.path
        zk = self.ctx.client(runtime)  # the group's own session: its credentials only
        if not connected(self.ctx.pool, zk):  # never waits on a pool thread (see connectwait)
            log.warning("failover: ZooKeeper %s unreachable; pod %s waits for session expiry", runtime.connect,
                        pod.name)
            return []
        started = time.monotonic()
        try:
            outcomes = end_instances(zk, path, pod, ended, owned=owned_by(self.ctx, runtime))
        except NotOwned:
            log.warning("failover: %s does not carry the owner marker of ResourceGroup %s/%s; pod %s waits for "
                        "session expiry", path, runtime.namespace, runtime.name, pod.name)
            return []
        except KazooException as exc:
            log.warning("failover: ending the members of pod %s in %s failed (%s: %s); the next event retries",
                        pod.name, path, type(exc).__name__, exc)
            return []
        with self._lock:
            for outcome in outcomes:  # handled once its member node was found and its session ended or judged
                self._done[(path, outcome.instance.nonce)] = None
            while len(self._done) > DONE_LIMIT:
                del self._done[next(iter(self._done))]
        for outcome in outcomes:
            if outcome.outcome.final:
                log.info("failover: pod %s's ended instance of container %s: member node %s/clients/%s, session "
                         "0x%x %s in %.0f ms; the pod event arrived %.0f ms before", pod.name,
                         outcome.instance.container, path, outcome.member_node, outcome.session & (2**64 - 1),
                         outcome.outcome.value, (time.monotonic() - started) * 1000,
                         (time.monotonic() - received) * 1000)
            else:
                message = (f"pod {pod.name}'s ended instance of container {outcome.instance.container}: member node "
                           f"{outcome.member_node} has {outcome.outcome.value}"
                           f"{f' ({outcome.reason})' if outcome.reason else ''}; its session is left to expire")
                log.warning("failover: %s", message)
                event(self.ctx, runtime, "Warning", "FailoverLeftToExpiry", message)
        return outcomes


def owned_by(ctx: OperatorContext, runtime: GroupRuntime) -> Callable[[bytes], bool]:
    """Whether a group root's data is the owner marker of this very ResourceGroup object: its namespace,
    name and UID, written in this cluster (a released marker is nobody's to fail over); for an operator
    replica, also that no later owner took the group's fence (a session close is no write a ``multi``
    could check: the root is read behind a ``sync`` right before)."""
    ours = owner_marker(ctx, runtime)
    fence = runtime.fence

    def check(data: bytes) -> bool:
        return (fence is None or fence.holds(data)) and ours.marks(data)

    return check
