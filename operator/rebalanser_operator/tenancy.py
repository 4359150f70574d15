"""What a ResourceGroup may name: the cluster administrator's limits on paths, ensembles and sizes.

    tenancy = Tenancy(path_roots=PathRoots.parse(["/rebalanser/{namespace}"]),
                      ensembles=AllowedEnsembles.parse(["zk-0.zk:2181,zk-1.zk:2181"]), cluster_id="...")
    refusal = tenancy.ensembles.check(spec.zookeeper.connect)        # None: allowed
    placement = tenancy.path_roots.place("shop", connect, "/rebalanser/shop/orders")

Pure functions of the settings and the spec (no I/O): the handlers check them before they read a
Secret or open a connection, so a refused group costs nothing and sends nothing anywhere.

* **Path roots.** Each namespace has its own roots, made from templates in which ``{namespace}`` is a
  whole path segment (default ``/rebalanser/{namespace}``); a template without it is a root shared by
  every namespace, where only the owner markers keep tenants apart. A group's path, with the chroot of its
  connect string in front, must lie strictly below one of its namespace's roots. A chroot may name a
  root or a node above it, never a node below it (the operator must see every node between the root
  and the group to know that the group is not inside another one).
* **Allowed ensembles.** A set of ZooKeeper server addresses (``host:port``, port 2181 when left out,
  names compared case-insensitively; a name ending in ``.`` is refused). A connect string is allowed
  when every server it names is in the set; ``*`` allows any server. An empty set allows none.
* **Limits.** Groups per namespace, resources per group, ZooKeeper sessions per namespace (0: no limit
  of the operator's own); worker threads per namespace and the size of a Secret key (0: a default).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

DEFAULT_PATH_ROOT = "/rebalanser/{namespace}"
ANY_ENSEMBLE = "*"
DEFAULT_PORT = 2181
PLACEHOLDER = "{namespace}"

#: Condition reasons of a refused group.
PATH_NOT_ALLOWED = "PathNotAllowed"
ENSEMBLE_NOT_ALLOWED = "EnsembleNotAllowed"
LIMIT_EXCEEDED = "LimitExceeded"
PATH_IN_USE = "PathInUse"
#: With the operator's identity: a group root it did not create (adopted only by the annotation).
NOT_CREATED_BY_OPERATOR = "NotCreatedByOperator"
#: With the operator's identity: a node above the groups whose ACL refuses the operator.
PARENT_NOT_OWNED = "ParentNotOwned"

_SEGMENT = re.compile(r"^[A-Za-z0-9_.:@+=-]{1,200}$")
_HOST = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+)(?::([0-9]{1,5}))?$")


class SettingError(ValueError):
    """An operator setting that cannot be used as written."""


@dataclass(frozen=True)
class Refusal:
    """Why a ResourceGroup is refused (a condition reason and a message for its status and Event)."""

    reason: str
    message: str


@dataclass(frozen=True)
class Placement:
    """Where a group lives: its ``path`` (as the connection sees it, below any chroot) and ``root``, the
    namespace root it lies in, also as the connection sees it ("" when the chroot is the root itself)."""

    path: str
    root: str


def split_connect(connect: str) -> tuple[list[str], str]:
    """The servers (normalised ``host:port``) and the chroot ("" for none) of a connect string."""
    hosts_part, slash, chroot = connect.strip().partition("/")
    chroot = f"/{chroot}".rstrip("/") if slash else ""
    servers = []
    for raw in hosts_part.split(","):
        host = raw.strip()
        if not host:
            continue
        match = _HOST.fullmatch(host)
        if match is None:
            raise SettingError(f"{host!r} is not a host[:port]")
        port = int(match.group(2)) if match.group(2) else DEFAULT_PORT
        if not 0 < port < 65536:
            raise SettingError(f"{host!r}: port out of range")
        name = match.group(1).lower()
        if name.endswith("."):
            raise SettingError(f"{host!r}: a host name ending in '.' is not used (write it without the dot); "
                               "nothing was sent to it")
        servers.append(f"{name}:{port}")
    if not servers:
        raise SettingError(f"{connect!r} names no server")
    return servers, chroot


def normalise_connect(connect: str) -> str:
    """The one spelling of a connect string the operator compares, keys and connects with: host names
    in lower case, each with its port (2181 when left out), the servers sorted and without repeats, then
    the chroot. Raises :class:`SettingError` for a string :func:`split_connect` refuses (a trailing dot)."""
    servers, chroot = split_connect(connect)
    return ",".join(sorted(set(servers))) + chroot


@dataclass(frozen=True)
class AllowedEnsembles:
    servers: frozenset[str] = frozenset()
    any: bool = False

    @staticmethod
    def parse(entries: Iterable[str]) -> AllowedEnsembles:
        """From connect strings (or ``*``); entries may be separated by ``,`` ``;`` or white space."""
        servers: set[str] = set()
        allow_any = False
        for entry in entries:
            for item in re.split(r"[\s;]+", entry.strip()):
                if not item:
                    continue
                if item == ANY_ENSEMBLE:
                    allow_any = True
                    continue
                hosts, chroot = split_connect(item)
                if chroot:
                    raise SettingError(f"allowed ensemble {item!r}: name servers only, without a chroot")
                servers.update(hosts)
        return AllowedEnsembles(frozenset(servers), allow_any)

    @staticmethod
    def anywhere() -> AllowedEnsembles:
        return AllowedEnsembles(frozenset(), True)

    def check(self, connect: str) -> Refusal | None:
        try:
            servers, _ = split_connect(connect)
        except SettingError as exc:
            return Refusal(ENSEMBLE_NOT_ALLOWED, f"spec.zookeeper.connect: {exc}")
        if self.any:
            return None
        outside = sorted(set(servers) - self.servers)
        if not outside:
            return None
        allowed = ", ".join(sorted(self.servers)) or "none (the operator's --allowed-ensemble is not set)"
        return Refusal(ENSEMBLE_NOT_ALLOWED,
                       f"spec.zookeeper.connect names {', '.join(outside)}, which the operator may not connect to; "
                       f"allowed servers: {allowed}. Nothing was sent to them")

    def describe(self) -> str:
        return "any" if self.any else (",".join(sorted(self.servers)) or "none")


def _segments(path: str) -> list[str]:
    return [s for s in path.split("/") if s]


def _within(path: str, root: str) -> bool:
    """Whether ``path`` is ``root`` or below it (both absolute, "" or "/" meaning the top)."""
    inner, outer = _segments(path), _segments(root)
    return inner[: len(outer)] == outer


@dataclass(frozen=True)
class PathRoots:
    templates: tuple[str, ...] = (DEFAULT_PATH_ROOT,)

    @staticmethod
    def parse(entries: Iterable[str]) -> PathRoots:
        templates: list[str] = []
        for entry in entries:
            for item in re.split(r"[\s,;]+", entry.strip()):
                if item and item not in templates:
                    templates.append(_validate_template(item))
        if not templates:
            raise SettingError("give at least one path root")
        _check_disjoint(templates)
        return PathRoots(tuple(templates))

    def roots(self, namespace: str) -> list[str]:
        return [template.replace(PLACEHOLDER, namespace) for template in self.templates]

    def default_path(self, namespace: str, name: str) -> str:
        return f"{self.roots(namespace)[0]}/{name}"

    def place(self, namespace: str, connect: str, path: str) -> Placement | Refusal:
        """Where ``path`` (the spec's, below the connect string's chroot) lies, or why it may not."""
        try:
            _, chroot = split_connect(connect)
        except SettingError as exc:
            return Refusal(PATH_NOT_ALLOWED, f"spec.zookeeper.connect: {exc}")
        full = f"{chroot}{path}"
        where = f"{full} (chroot {chroot} + path {path})" if chroot else full
        for root in self.roots(namespace):
            if not _within(full, root) or len(_segments(full)) <= len(_segments(root)):
                continue
            if not _within(root, chroot or "/"):
                return Refusal(PATH_NOT_ALLOWED,
                               f"the chroot {chroot} lies below the namespace's root {root}: name the root (or a "
                               "node above it) as the chroot, or leave the chroot out")
            return Placement(path, root[len(chroot):] if chroot else root)
        allowed = " or ".join(f"{root}/<name>" for root in self.roots(namespace))
        return Refusal(PATH_NOT_ALLOWED, f"the group's znode {where} lies outside the roots of namespace "
                                         f"{namespace}; a group's path must be {allowed}")


def _validate_template(template: str) -> str:
    if not template.startswith("/") or template.endswith("/"):
        raise SettingError(f"path root {template!r} must be absolute without a trailing '/'")
    segments = template.split("/")[1:]
    if PLACEHOLDER in template and PLACEHOLDER not in segments:
        raise SettingError(f"path root {template!r} must contain {PLACEHOLDER} as a whole segment")
    for segment in segments:
        if segment != PLACEHOLDER and not _SEGMENT.fullmatch(segment):
            raise SettingError(f"path root {template!r}: segment {segment!r} is not a plain znode name")
    if segments[0] == "zookeeper":
        raise SettingError(f"path root {template!r} lies under /zookeeper (reserved by ZooKeeper)")
    return template


def _prefix(template: str) -> list[str]:
    segments = template.split("/")[1:]
    return segments[: segments.index(PLACEHOLDER)] if PLACEHOLDER in segments else segments


def _check_disjoint(templates: list[str]) -> None:
    """No namespace's root may hold another namespace's: the parts before ``{namespace}`` must be equal
    or unrelated (neither inside the other)."""
    for i, first in enumerate(templates):
        for second in templates[i + 1:]:
            a, b = _prefix(first), _prefix(second)
            if a != b and (a[: len(b)] == b or b[: len(a)] == a):
                raise SettingError(f"path roots {first!r} and {second!r}: one namespace's root could lie inside "
                                   "another's")


#: A Secret key's value (one of a TLS Secret's files) larger than this is refused unless set otherwise.
DEFAULT_SECRET_KEY_BYTES = 128 << 10
#: The TLS material written for the live sessions (the chart's /tmp emptyDir is 16 MiB).
DEFAULT_TLS_STORE_BYTES = 8 << 20
#: The operator's worker threads one namespace's groups may hold at once (of EXECUTOR_THREADS).
DEFAULT_WORKERS_PER_NAMESPACE = 8
SECRET_KEY_TOO_LARGE = "SecretKeyTooLarge"


@dataclass(frozen=True)
class Limits:
    """The administrator's caps; 0 gives the default (none for groups, resources and sessions)."""

    groups_per_namespace: int = 0  # 0: no limit
    resources_per_group: int = 0
    sessions_per_namespace: int = 0  # ZooKeeper sessions the operator holds for one namespace's groups
    workers_per_namespace: int = 0  # 0: DEFAULT_WORKERS_PER_NAMESPACE
    secret_key_bytes: int = 0  # 0: DEFAULT_SECRET_KEY_BYTES
    tls_store_bytes: int = 0  # 0: DEFAULT_TLS_STORE_BYTES

    @property
    def workers(self) -> int:
        return self.workers_per_namespace or DEFAULT_WORKERS_PER_NAMESPACE

    @property
    def key_bytes(self) -> int:
        return self.secret_key_bytes or DEFAULT_SECRET_KEY_BYTES

    @property
    def store_bytes(self) -> int:
        return self.tls_store_bytes or DEFAULT_TLS_STORE_BYTES

    def check_secret_keys(self, secret: str, sizes: Iterable[tuple[str, int]]) -> Refusal | None:
        """A key of Secret ``secret`` whose value is larger than ``key_bytes`` ((key, bytes) pairs)."""
        for key, size in sizes:
            if size > self.key_bytes:
                return Refusal(SECRET_KEY_TOO_LARGE, f"key {key} of Secret {secret} holds {size} bytes; this "
                                                     f"operator accepts at most {self.key_bytes} per key")
        return None

    def sessions_refusal(self, namespace: str) -> Refusal:
        return Refusal(LIMIT_EXCEEDED, f"the groups of namespace {namespace} already hold "
                                       f"{self.sessions_per_namespace} ZooKeeper sessions of the operator "
                                       "(one per connect string, TLS Secret content and credentials); this "
                                       "operator opens at most that many per namespace (retried when one closes)")

    def check_resources(self, count: int) -> Refusal | None:
        if self.resources_per_group and count > self.resources_per_group:
            return Refusal(LIMIT_EXCEEDED, f"the spec names {count} resources; this operator allows at most "
                                           f"{self.resources_per_group} per ResourceGroup")
        return None

    def groups_refusal(self, namespace: str) -> Refusal:
        return Refusal(LIMIT_EXCEEDED, f"namespace {namespace} already has {self.groups_per_namespace} "
                                       "ResourceGroups; this operator serves at most that many per namespace "
                                       "(retried when one is deleted)")


@dataclass(frozen=True)
class Tenancy:
    """The administrator's settings. The command line's default allows no ensemble; this class's default
    (used when the operator is embedded, as the tests do) allows any, with the default path root."""

    path_roots: PathRoots = field(default_factory=PathRoots)
    ensembles: AllowedEnsembles = field(default_factory=AllowedEnsembles.anywhere)
    cluster_id: str = ""
    limits: Limits = field(default_factory=Limits)
