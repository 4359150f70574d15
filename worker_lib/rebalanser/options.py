"""The one validated options object a :class:`~rebalanser.client.Client` is configured with."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field, fields
from enum import StrEnum

from rebalanser.config import Algorithm
from rebalanser.connect_string import parse_connect_string
from rebalanser.credentials import PasswordFile, operator_acl
from rebalanser.errors import InvalidInputError
from rebalanser.metrics import Metrics, NoMetrics
from rebalanser.paths import validate_group_path, validate_member_id
from rebalanser.tls import TlsOptions


class ExpiryPolicy(StrEnum):
    RECONNECT = "reconnect"  # new session, rejoin under the same member id
    SHUTDOWN = "shutdown"  # the client ends with SessionExpiredError


def default_member_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


@dataclass(frozen=True)
class Options:
    """Everything a member needs; validated on construction (bad input fails here, not later).

    ``session_timeout``: requested ZooKeeper session timeout (the server may negotiate it).
    ``min_interval``: least time between two rebalances; triggers inside it coalesce into one.
    ``stop_timeout``: how long the stop callback may run before the claim is released anyway
    (ownership checks already return False for the resource while the callback runs).
    ``lease_fraction``: share of the negotiated session timeout ``T``, counted from the latest instant
    proven to be covered by the ZooKeeper leader's view of the session, during which the member may
    work; past it, it stops all work (docs/protocol.md, "Self-fencing lease").
    ``departure_grace``: time a departed member's resources wait for it to return (0 = move at once).
    ``initial_quiet``/``initial_max_wait``: the start-up window (:mod:`rebalanser.startup`): the
    coordinator makes the first assignment of a group with nothing assigned once no member has joined
    for ``initial_quiet`` seconds, at most ``initial_max_wait`` after it took office (0 = at once).
    ``credentials``: (user, password) for ZooKeeper digest authentication, or a
    :class:`~rebalanser.credentials.PasswordFile` whose password the member re-reads while it runs
    (a rotated Secret takes effect without a restart).
    ``tls``: connect over TLS with these files (:class:`~rebalanser.tls.TlsOptions`); None: plain TCP.
    ``termination_log``: the container's termination-message file (a pod's ``/dev/termination-log``).
    Each :meth:`Client.start` draws a fresh instance nonce, writes it there and records its digest in
    every member node, so the operator can end the member as soon as the kubelet reports the instance
    terminated (:mod:`rebalanser.instance`; docs/protocol.md, "Confirmed-death failover"). None: no nonce.
    ``pod_namespace``, ``pod``, ``pod_uid`` and ``container``: the worker's pod (from the downward API)
    and container, recorded in the member node: the status shows which pod each member is, and the
    failover ends a member only for an instance of that very container. None: not recorded.
    ``create_group``: the member's first join creates the group (its root and containers) when it does
    not exist. Off by default: a member whose group does not exist ends at once with
    :class:`~rebalanser.errors.GroupNotFoundError` (:meth:`Client.start` raises it), so that a mistyped
    path fails instead of making a group of its own that nothing else uses. Groups are made with
    ``rebalanser group create`` (:meth:`rebalanser.admin.GroupAdmin.create`) or a ResourceGroup.
    ``operator_id``: the operator's own ZooKeeper identity (``digest:<user>:<hash>`` or ``x509:<subject>``,
    published in the workers' ConfigMap as REBALANSER_ZK_OPERATOR_ID when the operator has one): with
    credentials, the nodes the member creates name it too (every permission), so the operator reads the
    group's members and re-ACLs them at a rotation with its own session. None: they name the group's credentials only.
    ``certificate_id``: ``x509:<subject>``, the identity the servers give this member's TLS client
    certificate (the subject spelled as they spell it), for a member that authenticates with that
    certificate alone (no ``credentials``): the nodes it creates name that identity alone, with every
    permission, and its session record is readable by it alone. None: without credentials, its nodes are
    open (the quick start).
    ``metrics``: where the member reports (rebalances, owned resources, session events, bad data);
    :class:`~rebalanser.metrics.NoMetrics` by default, :class:`~rebalanser.prometheus.PrometheusMetrics`
    with the ``rebalanser[metrics]`` extra.
    """

    hosts: str
    group: str
    member_id: str = field(default_factory=default_member_id)
    algorithm: Algorithm = Algorithm.RESOURCE_BARRIER
    session_timeout: float = 10.0
    min_interval: float = 2.0
    expiry_policy: ExpiryPolicy = ExpiryPolicy.RECONNECT
    credentials: tuple[str, str] | PasswordFile | None = field(default=None, repr=False)  # see __repr__
    tls: TlsOptions | None = None
    stop_timeout: float = 30.0
    start_timeout: float = 30.0
    barrier_timeout: float = 30.0
    lease_fraction: float = 0.8
    departure_grace: float = 0.0
    initial_quiet: float = 0.5
    initial_max_wait: float = 10.0
    termination_log: str | None = None
    pod: str | None = None
    pod_uid: str | None = None
    pod_namespace: str | None = None
    container: str | None = None
    create_group: bool = False
    operator_id: str | None = None
    certificate_id: str | None = None
    metrics: Metrics = field(default_factory=NoMetrics, compare=False, repr=False)

    def __repr__(self) -> str:
        """Every field but the password (a fixed pair shows its username only)."""
        shown = []
        for item in fields(self):
            if item.name == "credentials":
                value: object = self.credentials
                if isinstance(value, tuple):
                    value = (value[0], "<redacted>")
                shown.append(f"credentials={value!r}")
            elif item.repr:
                shown.append(f"{item.name}={getattr(self, item.name)!r}")
        return f"Options({', '.join(shown)})"

    def __post_init__(self) -> None:
        if not isinstance(self.hosts, str) or not self.hosts.strip():
            raise InvalidInputError("hosts must be a non-empty ZooKeeper connect string")
        parse_connect_string(self.hosts)
        object.__setattr__(self, "group", validate_group_path(self.group))
        validate_member_id(self.member_id)
        _positive("session_timeout", self.session_timeout, 0.5, 600)
        _positive("min_interval", self.min_interval, 0.0, 3600)
        _positive("stop_timeout", self.stop_timeout, 0.01, 3600)
        _positive("start_timeout", self.start_timeout, 0.01, 3600)
        _positive("barrier_timeout", self.barrier_timeout, 0.1, 3600)
        _positive("departure_grace", self.departure_grace, 0.0, 3600)
        _positive("initial_quiet", self.initial_quiet, 0.0, 60)
        _positive("initial_max_wait", self.initial_max_wait, 0.0, 600)
        if not 0.1 <= self.lease_fraction <= 0.9:
            raise InvalidInputError("lease_fraction must lie in [0.1, 0.9]")
        if not isinstance(self.credentials, PasswordFile | None) and (
            len(self.credentials) != 2 or not all(self.credentials)
        ):
            raise InvalidInputError("credentials must be a (username, password) pair of non-empty strings")
        if self.operator_id is not None:
            operator_acl(self.operator_id)
        if self.tls is not None and not isinstance(self.tls, TlsOptions):
            raise InvalidInputError("tls must be a rebalanser.tls.TlsOptions")
        if self.certificate_id is not None:
            _certificate_id(self.certificate_id, self.tls, self.credentials)
        if self.termination_log is not None and (not isinstance(self.termination_log, str) or not self.termination_log):
            raise InvalidInputError("termination_log must be a file path")
        for what, value, longest in (("pod", self.pod, 253), ("pod_uid", self.pod_uid, 128),
                                     ("pod_namespace", self.pod_namespace, 63), ("container", self.container, 63)):
            if value is not None and (not isinstance(value, str) or not 0 < len(value) <= longest):
                raise InvalidInputError(f"{what} must be a string of 1 to {longest} characters")
        if not isinstance(self.algorithm, Algorithm) or not isinstance(self.expiry_policy, ExpiryPolicy):
            raise InvalidInputError("algorithm and expiry_policy must be enum members")
        if not isinstance(self.metrics, Metrics):
            raise InvalidInputError("metrics must implement rebalanser.metrics.Metrics (NoMetrics reports nothing)")


def _positive(name: str, value: float, low: float, high: float) -> None:
    if not isinstance(value, int | float) or not low <= value <= high:
        raise InvalidInputError(f"{name} must be a number in [{low}, {high}], got {value!r}")


def _certificate_id(certificate_id: str, tls: TlsOptions | None, credentials: object) -> None:
    scheme, _, subject = certificate_id.partition(":")
    if scheme != "x509" or not subject.strip():
        raise InvalidInputError(f"certificate_id {certificate_id!r} is not x509:<subject>")
    if tls is None or not tls.mutual:
        raise InvalidInputError("certificate_id needs tls with a client certificate (the identity is its own)")
    if credentials is not None:
        raise InvalidInputError("certificate_id is for a member without credentials (with them, its nodes name them)")
