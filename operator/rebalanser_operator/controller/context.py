"""The operator's shared context: the ZooKeeper pool, the Kubernetes gateway, metrics, and the groups'
controllers.

:class:`Context` creates each group's :class:`~rebalanser_operator.controller.core.GroupController`
with the I/O steps it is given (:class:`~rebalanser_operator.controller.core.GroupSteps`): the layers
above (:mod:`rebalanser_operator.apply`) carry the steps out, and
:class:`rebalanser_operator.runtime.OperatorContext` hands them in, so nothing here imports upward.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from kazoo.client import KazooClient, KazooState

from rebalanser_operator.controller.core import GroupController, GroupSteps
from rebalanser_operator.controller.messages import RolloutSeen
from rebalanser_operator.controller.plan import GroupView, Open, SessionEffect, SessionFacts, plan_session
from rebalanser_operator.controller.share import FairShare
from rebalanser_operator.controller.state import EXECUTOR_THREADS, GroupRuntime, LoopOptions
from rebalanser_operator.identity import OperatorIdentity
from rebalanser_operator.kube import KubeGateway
from rebalanser_operator.metrics import Metrics
from rebalanser_operator.tenancy import SettingError, Tenancy, normalise_connect
from rebalanser_operator.zkfence import fenced_client
from rebalanser_operator.zkpool import ZooKeeperPool
from rebalanser_operator.zktls import TlsFileStore

log = logging.getLogger(__name__)


class Context:
    """Everything the handlers share: the ZooKeeper pool, the Kubernetes gateway, metrics, groups."""

    def __init__(
        self,
        *,
        kube: KubeGateway,
        metrics: Metrics | None = None,
        options: LoopOptions | None = None,
        pool: ZooKeeperPool | None = None,
        executor_threads: int = EXECUTOR_THREADS,
        tenancy: Tenancy | None = None,
        identity: OperatorIdentity | None = None,
    ) -> None:
        self.kube = kube
        #: the operator's own ZooKeeper identity (None: the quick start, open parents, as before)
        self.identity = identity if pool is None else pool.identity
        #: the pod watch of KubeletConfirmed failover is registered (handlers.build_registry sets it)
        self.watch_pods = True
        self.tenancy = tenancy if tenancy is not None else Tenancy()
        self.metrics = metrics if metrics is not None else Metrics()
        self.options = options if options is not None else LoopOptions()
        self.pool = pool if pool is not None else ZooKeeperPool(
            on_state_change=self.on_zookeeper_state, identity=identity,
            files=TlsFileStore(max_bytes=self.tenancy.limits.store_bytes))
        self.executor = ThreadPoolExecutor(max_workers=executor_threads, thread_name_prefix="rebalanser-status")
        #: each namespace's steps run on at most its share of the executor's threads
        self.shares = FairShare(self.executor, min(self.tenancy.limits.workers, executor_threads))
        self._lock = threading.Lock()
        self._groups: dict[tuple[str, str], GroupController] = {}
        self._admitted: set[tuple[str, str]] = set()  # counted against the groups-per-namespace limit
        self._namespaces: dict[str, tuple[float, bool]] = {}  # namespace -> (checked at, terminating)
        self._namespace_locks: dict[str, threading.Lock] = {}
        self._detached: dict[int, GroupController] = {}
        #: with operator replicas, whether a group is within its namespace's limit, decided over every
        #: ResourceGroup and not over this replica's share (None: not known, the local count decides)
        self.admission: Callable[[str, str, int], bool | None] | None = None
        self._steps = self.group_steps()

    def group_steps(self) -> GroupSteps:
        """The I/O steps of the groups' controllers (the layer above supplies them:
        :class:`rebalanser_operator.runtime.OperatorContext`)."""
        raise NotImplementedError("a Context needs the groups' I/O steps (use runtime.OperatorContext)")

    def _new_controller(self, rt: GroupRuntime) -> GroupController:
        return GroupController(rt, self.shares.lane(rt.namespace), pool=self.pool,
                               connect_wait=self.options.connect_wait, steps=self._steps)

    def controller(self, namespace: str, name: str, uid: str) -> GroupController:
        """The controller of a ResourceGroup (a fresh one when the object was recreated)."""
        with self._lock:
            current = self._groups.get((namespace, name))
            if current is None or current.rt.uid != uid:
                current = self._new_controller(GroupRuntime(namespace, name, uid))
                self._groups[(namespace, name)] = current
            return current

    def group(self, namespace: str, name: str, uid: str) -> GroupRuntime:
        """The state of a ResourceGroup (its controller's; see :meth:`controller`)."""
        return self.controller(namespace, name, uid).rt

    def controller_of(self, rt: GroupRuntime) -> GroupController:
        """The controller that owns ``rt`` (a forgotten group's gets a detached one: nothing it does is
        seen by the current object's)."""
        with self._lock:
            current = self._groups.get((rt.namespace, rt.name))
            if current is not None and current.rt is rt:
                return current
            detached = self._detached.get(id(rt))
            if detached is None or detached.rt is not rt:
                detached = self._new_controller(rt)
                self._detached[id(rt)] = detached
            return detached

    def session_facts(self, rt: GroupRuntime, connect: str | None = None) -> SessionFacts:
        """What :func:`~rebalanser_operator.controller.plan.plan_session` knows of ``rt``'s session (no
        I/O): the one it needs (its connect string and TLS material; the operator's identity when it has
        one, whatever the group's credentials, else the group's own credentials only:
        :meth:`GroupRuntime.session_credentials`), the one it holds, who holds the one it needs, and the
        sessions of its namespace against ``Limits.sessions_per_namespace``."""
        target = connect if connect is not None else rt.connect
        assert target is not None
        pool = self.pool.survey(target, rt.tls, rt.session_credentials(), rt.user, f"{rt.namespace}/")
        return SessionFacts(pool.key, pool.held, bool(pool.holders), bool(pool.holders - {rt.user}), pool.neighbours,
                            self.tenancy.limits.sessions_per_namespace)

    def session(self, rt: GroupRuntime, effect: SessionEffect) -> KazooClient:
        """Carries a planned session out: ``rt`` holds the session ``effect`` names (reused, joined, or
        opened, leaving the one it held)."""
        if isinstance(effect, Open):
            log.info("%s: opening a ZooKeeper session%s", rt.user,
                     " (its credentials, TLS material or ensemble changed)" if effect.leave is not None else "")
        return self.pool.enter(effect.key, rt.user, rt.session_timeout, tls=rt.tls)

    def client(self, rt: GroupRuntime, connect: str | None = None) -> KazooClient:
        """The ZooKeeper client of group ``rt`` for a read or a failover of a group applied already: its
        session planned (:meth:`session_facts`, without the namespace's limit, which its apply checked)
        and carried out."""
        effect = plan_session(replace(self.session_facts(rt, connect), limit=0))
        assert effect is not None
        return fenced_client(self.session(rt, effect), rt.fence, rt.path)

    def admit(self, rt: GroupRuntime) -> bool:
        """Counts ``rt`` against the groups-per-namespace limit; False when the namespace is full."""
        limit = self.tenancy.limits.groups_per_namespace
        key = (rt.namespace, rt.name)
        verdict = self.admission(rt.namespace, rt.name, limit) if self.admission is not None and limit else None
        if verdict is not None:
            return verdict
        with self._lock:
            if key in self._admitted or not limit:
                self._admitted.add(key)
                return True
            if sum(1 for ns, _ in self._admitted if ns == rt.namespace) >= limit:
                return False
            self._admitted.add(key)
            return True

    def is_current(self, runtime: GroupRuntime) -> bool:
        """False once the ResourceGroup was deleted (forgotten) or recreated with another uid."""
        with self._lock:
            current = self._groups.get((runtime.namespace, runtime.name))
            return current is not None and current.rt is runtime

    def controllers(self) -> list[GroupController]:
        with self._lock:
            return list(self._groups.values())

    def groups(self) -> list[GroupRuntime]:
        """Every group's state (for tests and the controllers' own steps; other threads use :meth:`views`)."""
        return [controller.rt for controller in self.controllers()]

    def views(self) -> list[GroupView]:
        """Every group as its controller last published it (immutable)."""
        return [controller.view() for controller in self.controllers()]

    def view(self, namespace: str, name: str) -> GroupView | None:
        with self._lock:
            controller = self._groups.get((namespace, name))
        return controller.view() if controller is not None else None

    def forget(self, namespace: str, name: str) -> None:
        with self._lock:
            controller = self._groups.pop((namespace, name), None)
            self._admitted.discard((namespace, name))
        if controller is not None:
            self.pool.release(controller.rt.user)
        self.metrics.forget_group(namespace, name)
        self.metrics.zookeeper_connections.set(self.pool.connections())

    def namespace_terminating_cached(self, namespace: str, max_age: float) -> bool | None:
        """Whether the namespace is being deleted, as checked within ``max_age`` seconds (else None)."""
        with self._lock:
            checked = self._namespaces.get(namespace)
        if checked is None or time.monotonic() - checked[0] >= max_age:
            return None
        return checked[1]

    def namespace_terminating(self, namespace: str, max_age: float) -> bool:
        """Whether the namespace is being deleted; one API call per namespace and ``max_age`` however
        many groups ask (blocking). An unreadable namespace counts as not terminating."""
        cached = self.namespace_terminating_cached(namespace, max_age)
        if cached is not None:
            return cached
        with self._lock:
            asking = self._namespace_locks.setdefault(namespace, threading.Lock())
        with asking:  # one call in flight per namespace: the others wait for its answer
            cached = self.namespace_terminating_cached(namespace, max_age)
            if cached is not None:
                return cached
            try:
                terminating = self.kube.namespace_terminating(namespace)
            except Exception as exc:  # e.g. no permission to read namespaces: kopf's deletion handler only
                log.debug("cannot tell whether namespace %s is terminating: %s", namespace, exc)
                terminating = False
            with self._lock:
                self._namespaces[namespace] = (time.monotonic(), terminating)
            return terminating

    def _naming(self, namespace: str, kind: str, name: str) -> list[GroupController]:
        """The controllers of ``namespace``'s groups whose last applied spec names workload ``kind``/``name``."""
        return [c for c in self.controllers()
                if c.view().namespace == namespace and c.view().workload == (kind, name)]

    def names_workload(self, namespace: str, kind: str, name: str) -> bool:
        return bool(self._naming(namespace, kind, name))

    def workload_seen(self, namespace: str, kind: str, name: str, rolling: bool) -> None:
        """The workload watch saw ``kind``/``name`` change: every group that names it is told (never
        blocks: called on kopf's event loop); one whose rollout state changed refreshes at once."""
        for controller in self._naming(namespace, kind, name):
            controller.rollout_seen(RolloutSeen(kind, name, rolling))

    def on_zookeeper_state(self, connect: str, state: KazooState) -> None:
        # Runs on kazoo's connection thread: only wake the loops.
        for controller in self.controllers():
            if _spelled(controller.view().connect) == connect:
                controller.rt.wake()

    def close(self) -> None:
        self.pool.close()
        self.executor.shutdown(wait=False, cancel_futures=True)


def _spelled(connect: str | None) -> str | None:
    """``connect`` as the pool keys it (:func:`normalise_connect`), or as written when it cannot be."""
    if connect is None:
        return None
    try:
        return normalise_connect(connect)
    except SettingError:
        return connect
