"""A replica's death, reported: the other replicas end its membership of the operator group as the
operator ends a dead worker's (docs/operator-replicas.md, "A replica's death, reported").

    watch = DeathWatch(replicas, core_v1, namespace="rebalanser",
                       selector="app.kubernetes.io/component=operator")
    watch.start()          # a thread: the operator's own pods, watched
    ...
    watch.stop()

Each replica's member records its pod, the pod's UID, its container and the digest of an instance nonce
that it writes to the container's termination-message file (:class:`~rebalanser_operator.replicas.ReplicaSettings`).
When the kubelet reports a container instance of an operator pod ended with such a nonce, every replica
that sees the report ends the member node that records that very instance, with the failover's own
steps (:func:`~rebalanser_operator.failover.endmember.end_instances`: the session record read with the
operator's identity, the session attached to and closed). The operator group's coordinator then hands
the dead replica's ResourceGroups out at once, instead of after its session's expiry.

One replica acts on a report: the first in the operator group's election order other than the dead pod's
own member (member ids are pod names). Two closing one session at once would each see the other's
attachment drop theirs and report the close as unanswered; a designated one is also one close instead
of one per replica. Should the designated one be dead too, the report is left to session expiry.

Nothing else is acted on: a pod of another name, a nonce that no member records, a report the kubelet
has not made. Anything that cannot be done leaves the dead replica to session expiry.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from kubernetes import client as k8s
from kubernetes import watch as k8s_watch
from rebalanser.paths import GroupPaths, MemberNode

from rebalanser_operator.failover.choice import PodRef, ended_instances
from rebalanser_operator.failover.endmember import Ended, end_instances
from rebalanser_operator.replicas import Replicas

log = logging.getLogger(__name__)

#: A watch request ends server-side after this long, and is made again.
WATCH_SECONDS = 240
RETRY_SECONDS = 2.0
DONE_LIMIT = 1000


def end_dead_replicas(replicas: Replicas, pod: Mapping[str, Any], done: dict[tuple[str, str], None]) -> list[Ended]:
    """Ends the operator-group membership of every instance ``pod`` reports ended (not in ``done``, which
    it updates); [] when there is none or the group cannot be reached (blocking)."""
    ref, zk = PodRef.of(pod), replicas.zk
    if ref is None or zk is None or replicas.settings is None:
        return []
    fresh = [e for e in sorted(ended_instances(pod)) if (ref.uid, e.nonce) not in done]
    if not fresh:
        return []
    started = time.monotonic()
    try:
        if not designated(zk, replicas.settings.group, dead=ref.name, me=replicas.member_id):
            return []
        outcomes = end_instances(zk, replicas.settings.group, ref, fresh, owned=lambda _data: True)
    except KazooException as exc:
        log.warning("replica %s: ending the membership of pod %s failed (%s); its session expires",
                    replicas.member_id, ref.name, exc)
        return []
    for instance in fresh:  # judged: no member records it, or its member was ended
        done[(ref.uid, instance.nonce)] = None
    while len(done) > DONE_LIMIT:
        del done[next(iter(done))]
    for outcome in outcomes:
        log.info("replica-ended member=%s pod=%s node=%s outcome=%s in %.0f ms at=%.3f", replicas.member_id, ref.name,
                 outcome.member_node, outcome.outcome.value, (time.monotonic() - started) * 1000, time.time())
    return outcomes


def designated(zk: KazooClient, group: str, *, dead: str, me: str) -> bool:
    """Whether replica ``me`` is the one to end the membership of the replica of pod ``dead``: the first
    member in election order whose id is not ``dead``."""
    nodes = sorted(n for n in (MemberNode.parse(c) for c in zk.get_children(GroupPaths.of(group).clients))
                   if n is not None)
    actor = next((n for n in nodes if n.member_id != dead), None)
    return actor is not None and actor.member_id == me


class DeathWatch:
    """Watches the operator's own pods (``namespace``, ``selector``) on a thread of its own and ends the
    membership of the replicas the kubelet reports dead."""

    def __init__(self, replicas: Replicas, api: k8s.CoreV1Api, *, namespace: str, selector: str) -> None:
        self.replicas, self.api, self.namespace, self.selector = replicas, api, namespace, selector
        self._done: dict[tuple[str, str], None] = {}
        self._stop = threading.Event()
        self._watch: k8s_watch.Watch | None = None
        self._thread = threading.Thread(target=self._run, name="rebalanser-replica-deaths", daemon=True)

    def start(self) -> None:
        log.info("replica %s: watching the operator's pods (%s in %s) for ended replicas", self.replicas.member_id,
                 self.selector, self.namespace)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._watch is not None:
            self._watch.stop()  # type: ignore[no-untyped-call]

    def _run(self) -> None:
        while not self._stop.is_set():
            self._watch = k8s_watch.Watch()  # type: ignore[no-untyped-call]
            try:
                events = self._watch.stream(  # type: ignore[no-untyped-call]
                    self.api.list_namespaced_pod, self.namespace, label_selector=self.selector,
                    timeout_seconds=WATCH_SECONDS)
                for event in events:
                    if self._stop.is_set():
                        return
                    pod = event.get("raw_object")
                    if isinstance(pod, Mapping) and event.get("type") in ("ADDED", "MODIFIED"):
                        end_dead_replicas(self.replicas, pod, self._done)
            except Exception as exc:  # an API hiccup or a dropped stream: watch again
                if not self._stop.is_set():
                    log.warning("replica %s: the watch of the operator's pods ended (%s); again in %.0f s",
                                self.replicas.member_id, exc, RETRY_SECONDS)
                    self._stop.wait(RETRY_SECONDS)
