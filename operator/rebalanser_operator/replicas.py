"""Operator replicas: which ResourceGroups this replica serves, decided by a Rebalanser group of the
operator's own (docs/operator-replicas.md).

    replicas = Replicas(ReplicaSettings(hosts="zk:2181", group="/rebalanser-operator/rebalanser",
                                        member_id=pod_name), identity)
    replicas.start()                        # joins the operator group (creates it, with the identity's ACL)
    replicas.owns("shop", "orders")         # True only while this replica holds that group's claim
    replicas.subscribe(on_gain, on_lose)    # (resource, token) / (resource) from the member's callbacks
    replicas.write_list({("shop", "orders"), ...})   # the replica in office: G/resources, epoch-fenced
    replicas.stop()                         # leaves: every owned group is stopped first (on_revoked)

Without settings (:meth:`Replicas.single`) there is no operator group: the one operator owns every
ResourceGroup, :meth:`owns` is always True and nothing here touches ZooKeeper. That is the default.

The member is the worker library's :class:`rebalanser.Client`; its ``owns`` (the claim held and the
self-fencing lease valid) is what :meth:`Replicas.owns` returns. Its ``on_revoked`` returns only once
every group it names has stopped being served here (:meth:`Replicas.serving`): the claims, and with them
the groups, go to the next owner only after this replica stopped acting for them.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from rebalanser import Client, Handler, Options, State
from rebalanser.admin import GroupAdmin
from rebalanser.paths import GroupPaths, validate_group_path, validate_member_id
from rebalanser.tls import TlsOptions

from rebalanser_operator.identity import OperatorIdentity, parent_acl
from rebalanser_operator.metrics import Metrics
from rebalanser_operator.zktls import TlsFileStore

log = logging.getLogger(__name__)

#: A resource name's longest form (the library's segment limit).
RESOURCE_NAME_MAX = 200
#: A name too long for ``<namespace>.<name>`` keeps this many of its characters, then ``=`` and a digest.
KEPT_NAME = 110  # 63 (the longest namespace) + 1 + 110 + 1 + 16 <= 200
DIGEST_HEX = 16
#: Resources created or deleted in one fenced transaction of the list writer.
LIST_BATCH = 500
#: How often a group's daemon that waits for this replica to own the group looks again without a wake-up.
UNTIL_OWNED_POLL = 30.0
#: The default path of the operator group: one per operator namespace (release).
DEFAULT_GROUP_TEMPLATE = "/rebalanser-operator/{namespace}"


def resource_name(namespace: str, name: str) -> str:
    """The operator group's resource for ResourceGroup ``namespace``/``name``: ``<namespace>.<name>``
    (a namespace holds no ``.``), or for a name too long for that, its first characters, ``=`` and 16
    hexadecimal digits of the SHA-256 of the whole name. A function of the two names alone."""
    plain = f"{namespace}.{name}"
    if len(plain) <= RESOURCE_NAME_MAX:
        return plain
    digest = hashlib.sha256(name.encode()).hexdigest()[:DIGEST_HEX]
    return f"{namespace}.{name[:KEPT_NAME]}={digest}"


class NotCreatedByOperator(RuntimeError):
    """The operator group's root exists without the operator's identity in its ACL."""


#: The share of ``stop_timeout`` a revocation waits for its groups' loops to stop before it lets them go anyway.
#: The library waits for ``on_revoked`` that same ``stop_timeout``; a callback that outlives it puts the member
#: on standby and makes it rejoin, which starts another rebalance, whose revocations run late in turn: at 3,000
#: groups on 3 replicas (2 cores, load 20-27) the operator group rebalanced every minute or so for over 9 min.
LET_GO_SHARE = 0.8


@dataclass(frozen=True)
class ReplicaSettings:
    """Where the replicas meet: the ensemble, the operator group's path, this replica's member id (its
    pod's name), the member's session timeout and least rebalance interval."""

    hosts: str
    group: str
    member_id: str
    session_timeout: float = 10.0
    #: the operator group's least rebalance interval: a group released apart from the others (its loop was
    #: in a step) waits at most this long for the rebalance that hands it on (once 965 ms at 1 s)
    min_interval: float = 0.5
    stop_timeout: float = 30.0
    #: This replica's pod and container, recorded in its member node, and the container's termination-message
    #: file, where the member writes its instance nonce: the other replicas end its membership when the
    #: kubelet reports that instance ended (:mod:`rebalanser_operator.replicadeath`). None: not recorded.
    pod: str | None = None
    pod_uid: str | None = None
    pod_namespace: str | None = None
    container: str | None = None
    termination_log: str | None = None

    def __post_init__(self) -> None:
        validate_group_path(self.group)
        validate_member_id(self.member_id)
        if not 2.0 <= self.session_timeout <= 60.0:
            raise ValueError("the replicas' session timeout must lie in [2, 60] seconds")


@dataclass
class _Serving:
    """A group being served here: how to wake its loop, and its word that it stopped."""

    wake: Callable[[], None]
    stopped: threading.Event = field(default_factory=threading.Event)


class Serving:
    """The handle of a group served here (:meth:`Replicas.serving`): :meth:`done` when it has stopped."""

    def __init__(self, replicas: Replicas, resource: str, entry: _Serving) -> None:
        self._replicas, self._resource, self._entry = replicas, resource, entry

    def done(self) -> None:
        self._replicas._served(self._resource, self._entry)


class _Member(Handler):
    """The member's callbacks, handed to :class:`Replicas` (on the library's callback thread)."""

    def __init__(self, replicas: Replicas) -> None:
        self._replicas = replicas

    def on_assigned(self, resources: Mapping[str, int]) -> None:
        self._replicas._gained(dict(resources))

    def on_revoked(self, resources: Sequence[str]) -> None:
        self._replicas._lost(list(resources))

    def on_role(self, role: str, epoch: int) -> None:
        self._replicas._role(role, epoch)

    def on_error(self, error: Exception) -> None:
        log.warning("replica %s: %s: %s", self._replicas.member_id, type(error).__name__, error)

    def on_session(self, state: str) -> None:
        log.info("replica %s: operator group session %s", self._replicas.member_id, state)


class Replicas:
    """This replica's share of the ResourceGroups (all of them without an operator group)."""

    def __init__(self, settings: ReplicaSettings | None, identity: OperatorIdentity | None = None,
                 metrics: Metrics | None = None) -> None:
        self.settings = settings
        self.identity = identity
        self.metrics = metrics if metrics is not None else Metrics()
        self._lock = threading.Lock()
        self._owned: dict[str, int] = {}
        self._serving: dict[str, _Serving] = {}
        self._waiting: dict[str, list[tuple[asyncio.AbstractEventLoop, asyncio.Event]]] = {}
        self._subscribers: list[tuple[Callable[[str, int], None], Callable[[str], None]]] = []
        self._office = threading.Event()
        self._client: Client | None = None
        #: The files of an x509 identity's certificate, its key and CA (kazoo opens files, not contents).
        self._tls_files = TlsFileStore()
        self._tls: TlsOptions | None = None
        if settings is not None:
            # The operator's identity: its digest credentials, or its client certificate (the connection over
            # TLS, and the member's nodes naming the certificate's subject alone).
            credentials: tuple[str, str] | None = None
            certificate_id: str | None = None
            if identity is not None and identity.tls is not None:
                self._tls, certificate_id = self._tls_files.acquire(identity.tls), identity.acl_id
            elif identity is not None:
                credentials = (identity.username, identity.password)
            self._client = Client(Options(
                hosts=settings.hosts, group=settings.group, member_id=settings.member_id,
                session_timeout=settings.session_timeout, min_interval=settings.min_interval,
                stop_timeout=settings.stop_timeout, initial_quiet=0.5, initial_max_wait=5.0, pod=settings.pod,
                pod_uid=settings.pod_uid, pod_namespace=settings.pod_namespace, container=settings.container,
                termination_log=settings.termination_log, tls=self._tls,
                credentials=credentials, certificate_id=certificate_id,
            ), _Member(self))

    @staticmethod
    def single() -> Replicas:
        """No operator group: this operator serves every ResourceGroup."""
        return Replicas(None)

    @property
    def enabled(self) -> bool:
        return self.settings is not None

    @property
    def member_id(self) -> str:
        return self.settings.member_id if self.settings is not None else "-"

    # ---------------------------------------------------------------------------- lifecycle

    def start(self, timeout: float = 60.0) -> None:
        """Creates the operator group if missing (its parents and nodes: the operator's identity all, world
        read; open without an identity), then joins it (blocking, bounded)."""
        if self._client is None or self.settings is None:
            return
        self._create_group()
        self._client.start(timeout=timeout)
        log.info("replica %s: joined the operator group %s at %s", self.member_id, self.settings.group,
                 self.settings.hosts)

    def stop(self, timeout: float | None = None) -> None:
        """Leaves the operator group: every owned group stops being served first (``on_revoked``)."""
        if self._client is not None and self.settings is not None:
            self._client.stop(timeout if timeout is not None else self.settings.stop_timeout + 5)
        self._tls_files.close()

    def _create_group(self) -> None:
        assert self.settings is not None
        auth = [self.identity.auth] if self.identity is not None and self.identity.auth is not None else None
        acl = parent_acl(self.identity)
        zk = KazooClient(**(self._tls.kazoo_arguments() if self._tls is not None else {}),
                         hosts=self.settings.hosts, timeout=self.settings.session_timeout, auth_data=auth,
                         default_acl=acl)
        zk.start(timeout=30)
        try:
            parent = self.settings.group.rsplit("/", 1)[0]
            if parent:
                zk.ensure_path(parent, acl=acl)
            self._check_made_here(zk)  # before writing anything into someone else's tree
            GroupAdmin(zk, self.settings.group).create()
            self._check_made_here(zk)
        finally:
            zk.stop()
            zk.close()

    def _check_made_here(self, zk: KazooClient) -> None:
        """With an identity, an existing operator group must name it with every permission (one this
        operator made); :class:`NotCreatedByOperator` otherwise."""
        assert self.settings is not None
        if self.identity is None or zk.exists(self.settings.group) is None:
            return
        existing, _ = zk.get_acls(self.settings.group)
        if not self.identity.names(existing):
            raise NotCreatedByOperator(
                f"the operator group {self.settings.group} exists and its ACL does not give the operator's identity "
                "every permission: someone else made it (its members and claims could be anybody's); delete it, "
                "or name another --replica-group")

    @property
    def zk(self) -> KazooClient | None:
        """The member's ZooKeeper client (None without an operator group, or before :meth:`start`)."""
        if self._client is None:
            return None
        try:
            return self._client.zk
        except (AttributeError, AssertionError):  # not started
            return None

    def ready(self) -> tuple[bool, str]:
        """Whether this replica is a member in good standing (its share assigned or being assigned), and
        :meth:`describe`; always ready without an operator group."""
        if self._client is None:
            return True, self.describe()
        return self._client.state in (State.ASSIGNED, State.PENDING_ASSIGNMENT), self.describe()

    def describe(self) -> str:
        """This replica's membership in a few words: the member's state, its role and its share (for the
        health endpoint: a replica that cannot reach the operator group says so, and serves nothing)."""
        if self._client is None:
            return "no operator group: every group"
        with self._lock:
            owned = len(self._owned)
        return f"{self._client.state.value} {self._client.role}, {owned} groups"

    # --------------------------------------------------------------------------- ownership

    def owns(self, namespace: str, name: str) -> bool:
        """Whether this replica may act for ResourceGroup ``namespace``/``name`` at this instant."""
        if self._client is None:
            return True
        return self._client.owns(resource_name(namespace, name))

    def token(self, namespace: str, name: str) -> int | None:
        """The fencing token of this replica's claim on the group (None: not owned; 0 without replicas)."""
        if self._client is None:
            return 0
        return self._client.token(resource_name(namespace, name))

    def owned(self) -> dict[str, int]:
        """The resources this replica holds (its gains not yet revoked), with their tokens."""
        with self._lock:
            return dict(self._owned)

    def subscribe(self, on_gain: Callable[[str, int], None], on_lose: Callable[[str], None]) -> None:
        """``on_gain(resource, token)`` after each gain, ``on_lose(resource)`` before each loss is let go
        (on the library's callback thread: keep them short)."""
        with self._lock:
            self._subscribers.append((on_gain, on_lose))

    async def until_owned(
        self, namespace: str, name: str, stopped: Callable[[], bool], poll: float = UNTIL_OWNED_POLL
    ) -> int | None:
        """Waits (on the caller's event loop) until this replica owns the group, and returns its token;
        None once ``stopped()`` is true (checked at least every ``poll`` seconds). A gain wakes the waiter at
        once; the poll is only a safety net, and every group's daemon waits here on every replica that
        does not serve it (3,000 groups at 30 s: 100 wake-ups a second)."""
        resource = resource_name(namespace, name)
        loop = asyncio.get_running_loop()
        while not stopped():
            token = self.token(namespace, name)
            if token is not None and self.owns(namespace, name):
                return token
            flag = asyncio.Event()
            with self._lock:
                self._waiting.setdefault(resource, []).append((loop, flag))
            try:
                if self.owns(namespace, name):
                    continue
                try:
                    await asyncio.wait_for(flag.wait(), poll)
                except TimeoutError:
                    pass
            finally:
                with self._lock:
                    waiters = self._waiting.get(resource, [])
                    if (loop, flag) in waiters:
                        waiters.remove((loop, flag))
                    if not waiters:
                        self._waiting.pop(resource, None)
        return None

    def serving(self, namespace: str, name: str, token: int, wake: Callable[[], None]) -> Serving | None:
        """Registers the group as served here until :meth:`Serving.done`: a revocation wakes it with
        ``wake`` and waits for ``done`` before letting the group go. None when this replica no longer owns
        the group with ``token``: checked under the lock that a revocation takes (after ``owns`` turned
        False) to find what it waits for, so either the revocation waits for this serving, or this
        serving is refused. Without an operator group, always registered."""
        resource = resource_name(namespace, name)
        entry = _Serving(wake)
        with self._lock:
            if self._client is not None and (not self._client.owns(resource) or self._client.token(resource) != token):
                return None
            self._serving[resource] = entry
        return Serving(self, resource, entry)

    def _served(self, resource: str, entry: _Serving) -> None:
        with self._lock:
            if self._serving.get(resource) is entry:
                del self._serving[resource]
        entry.stopped.set()

    # ----------------------------------------------------------- the member's callbacks (its thread)

    def _gained(self, resources: dict[str, int]) -> None:
        with self._lock:
            self._owned.update(resources)
            subscribers = list(self._subscribers)
            wake = [w for r in resources for w in self._waiting.get(r, [])]
            self.metrics.replica_groups.set(len(self._owned))
        self.metrics.replica_handovers.labels("gained").inc(len(resources))
        for resource, token in sorted(resources.items()):
            log.info("replica %s: gained %s (token %d)", self.member_id, resource, token)
            for on_gain, _ in subscribers:
                on_gain(resource, token)
        for loop, flag in wake:
            _set_threadsafe(loop, flag)

    def _lost(self, resources: list[str]) -> None:
        """``owns`` is already False for ``resources``: wake each one's loop, and return once all have
        stopped (at most :data:`LET_GO_SHARE` of the member's stop timeout, within the library's wait)."""
        with self._lock:
            for resource in resources:
                self._owned.pop(resource, None)
            entries = [(r, self._serving[r]) for r in resources if r in self._serving]
            subscribers = list(self._subscribers)
            self.metrics.replica_groups.set(len(self._owned))
        self.metrics.replica_handovers.labels("lost").inc(len(resources))
        for resource in resources:
            for _, on_lose in subscribers:
                on_lose(resource)
        for _, entry in entries:
            entry.wake()
        stop_timeout = self.settings.stop_timeout if self.settings is not None else 30.0
        deadline = time.monotonic() + LET_GO_SHARE * stop_timeout
        for resource, entry in entries:
            if not entry.stopped.wait(max(0.0, deadline - time.monotonic())):
                log.warning("replica %s: %s did not stop in time; letting it go anyway", self.member_id, resource)
        log.info("replica %s: let go of %s", self.member_id, ", ".join(sorted(resources)))

    def _role(self, role: str, epoch: int) -> None:
        log.info("replica %s: %s of the operator group (epoch %d)", self.member_id, role, epoch)
        if role == "coordinator":
            self._office.set()
        else:
            self._office.clear()
        self.metrics.replica_in_office.set(1 if role == "coordinator" else 0)

    # ------------------------------------------------------------------ the resource list (in office)

    def in_office(self) -> bool:
        """Whether this replica is the operator group's coordinator (the writer of its resource list)."""
        return self._client is not None and self._office.is_set() and self._client.role == "coordinator"

    def write_list(self, groups: Iterable[tuple[str, str]]) -> tuple[int, int]:
        """Makes the operator group's ``G/resources`` the resources of ``groups`` (namespace, name), when
        this replica is in office; each batch a ``multi`` fenced by ``check(G/epoch, version=epoch)`` and a
        check of this replica's member node, so a deposed coordinator's write fails as a whole. Returns
        (created, deleted); (0, 0) when not in office or fenced off (blocking)."""
        client = self._client
        if client is None or not self.in_office():
            return 0, 0
        epoch, node = client.epoch, client.member_node
        if node is None:
            return 0, 0
        paths = GroupPaths.of(client.options.group)
        zk = client.zk
        wanted = {resource_name(ns, name) for ns, name in groups}
        try:
            have = set(zk.get_children(paths.resources))
        except KazooException as exc:
            log.warning("replica %s: reading the operator group's resources failed: %s", self.member_id, exc)
            return 0, 0
        ops = [(True, r) for r in sorted(wanted - have)] + [(False, r) for r in sorted(have - wanted)]
        created = deleted = 0
        for start in range(0, len(ops), LIST_BATCH):
            batch = ops[start:start + LIST_BATCH]
            tx = zk.transaction()
            tx.check(paths.epoch, epoch)
            tx.check(paths.client(node), -1)
            for create, resource in batch:
                if create:
                    tx.create(paths.resource(resource), b"")
                else:
                    tx.delete(paths.resource(resource))
            try:
                results = tx.commit()
            except KazooException as exc:
                log.warning("replica %s: writing the operator group's resources failed: %s", self.member_id, exc)
                return created, deleted
            failed = [r for r in results if isinstance(r, Exception)]
            if failed:  # fenced off (a later epoch, our node gone) or raced: the next turn reads again
                log.info("replica %s: the resource list write was refused (%s); reading again later",
                         self.member_id, type(failed[0]).__name__)
                return created, deleted
            created += sum(1 for create, _ in batch if create)
            deleted += sum(1 for create, _ in batch if not create)
        if created or deleted:
            log.info("replica %s: the operator group's resources: %d created, %d deleted (epoch %d)",
                     self.member_id, created, deleted, epoch)
        return created, deleted


def _set_threadsafe(loop: asyncio.AbstractEventLoop, flag: asyncio.Event) -> None:
    if loop.is_closed():
        return
    try:
        loop.call_soon_threadsafe(flag.set)
    except RuntimeError:  # the loop is shutting down
        pass
