"""Confirmed-death failover, the glue: a pod's status change -> the member nodes to end, per group.

``failover_index`` (a kopf index of ResourceGroups by namespace) names the groups that opted in with
``spec.failover: KubeletConfirmed``; kopf fills it before any handler runs, so a pod event seen right
after the operator starts is not lost. :func:`handle_pod` waits (bounded) until the group's runtime has
been reconciled (connect string, path, credentials), then ends, in a worker thread, every member
node that the pod's terminated container instances prove dead (:mod:`endmember`). A run that cannot
finish (ZooKeeper unreachable, credentials missing) ends nothing: the group falls back to session
expiry, and the next pod event or operator start tries again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kazoo.exceptions import KazooException

from rebalanser_operator.endmember import Ended, end_instances
from rebalanser_operator.failover import ended_instances
from rebalanser_operator.models import FailoverMode, PodSelector
from rebalanser_operator.runtime import GroupRuntime, OperatorContext

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
        self._done: dict[tuple[str, str], None] = {}

    async def handle_pod(self, pod: Mapping[str, Any], opted_in: Iterable[OptedIn]) -> list[Ended]:
        nonces = ended_instances(pod)
        meta = pod.get("metadata") or {}
        namespace, pod_name, labels = meta.get("namespace"), meta.get("name"), meta.get("labels")
        if not nonces or not namespace or not pod_name:
            return []
        ended: list[Ended] = []
        for group in opted_in:
            if group.selector is not None and not group.selector.selects(labels):
                continue
            runtime = await self._ready(namespace, group.name)
            if runtime is None or runtime.path is None:
                log.warning("failover: %s/%s is not reconciled; pod %s waits for session expiry",
                            namespace, group.name, pod_name)
                continue
            if runtime.spec is None or runtime.spec.failover is not FailoverMode.KUBELET_CONFIRMED:
                continue
            fresh = [n for n in sorted(nonces) if (runtime.path, n) not in self._done]
            if fresh:
                ended.extend(await asyncio.to_thread(self._end, runtime, pod_name, fresh))
        return ended

    async def _ready(self, namespace: str, name: str) -> GroupRuntime | None:
        deadline = time.monotonic() + READY_WAIT
        while True:
            runtime = next((g for g in self.ctx.groups() if (g.namespace, g.name) == (namespace, name)), None)
            if runtime is not None and _configured(runtime):
                return runtime
            if time.monotonic() > deadline:
                return None
            await asyncio.sleep(0.2)

    def _end(self, runtime: GroupRuntime, pod_name: str, nonces: list[str]) -> list[Ended]:
        assert runtime.connect is not None and runtime.path is not None
        zk = self.ctx.client(runtime)  # the group's own session: its credentials only
        if not self.ctx.pool.wait_connected(zk, self.ctx.options.connect_wait):
            log.warning("failover: ZooKeeper %s unreachable; pod %s waits for session expiry", runtime.connect,
                        pod_name)
            return []
        started = time.monotonic()
        try:
            outcomes = end_instances(zk, runtime.path, pod_name, nonces)
        except KazooException as exc:
            log.warning("failover: ending the members of pod %s in %s failed (%s: %s); the next event retries",
                        pod_name, runtime.path, type(exc).__name__, exc)
            return []
        for nonce in nonces:
            self._done[(runtime.path, nonce)] = None
        while len(self._done) > DONE_LIMIT:
            del self._done[next(iter(self._done))]
        for outcome in outcomes:
            log.info("failover: pod %s's ended instance: member node %s/clients/%s ended in %.0f ms "
                     "(%d claims, %d stop markers)", pod_name, runtime.path, outcome.member_node,
                     (time.monotonic() - started) * 1000, outcome.claims, outcome.markers)
        return outcomes


def _configured(runtime: GroupRuntime) -> bool:
    spec = runtime.spec
    if spec is None or runtime.path is None or runtime.connect is None or not runtime.owned:
        return False  # not reconciled, or its path is not this object's
    return spec.zookeeper.credentials_secret is None or runtime.credentials is not None
