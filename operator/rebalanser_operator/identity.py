"""The operator's own ZooKeeper identity, and the ACLs it gives the nodes it creates.

    identity = OperatorIdentity.digest("rebalanser-operator", password)   # from a Secret of its namespace
    identity = OperatorIdentity.x509(TlsMaterial(ca=..., certificate=..., key=...))  # or its TLS client cert
    parent_acl(identity)          # /rebalanser, /rebalanser/<ns>: the operator all, world read
    group_acl(identity, credentials)  # a group's nodes: the operator all, the group's digest what workers
                                      # need (read, write, create, delete), world read

With an identity, the operator's sessions authenticate as the operator only: a tenant's credentials
never open a session of the operator's (they only name the group's digest in its ACL, computed here
without contacting anyone). Without one (:data:`NO_IDENTITY`, the quick start), everything is as
before: the parents are open and the operator acts on a group with that group's credentials.

An x509 identity is the subject of the operator's TLS client certificate, as ZooKeeper's x509
authentication names it (:func:`~rebalanser_operator.x509name.subject_dn`): its sessions connect over
TLS with that certificate (and the identity's CA) and send no digest.

Pure functions (no I/O). The username of a digest identity and the subject of an x509 one are public
(shown in clear in every ACL that names them); the password and the key never leave this object except
as kazoo's ``auth_data`` or the TLS material of the operator's sessions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from kazoo.security import ACL, OPEN_ACL_UNSAFE, Id, Permissions, make_acl, make_digest_acl, make_digest_acl_credential

from rebalanser_operator.x509name import subject_dn
from rebalanser_operator.zktls import TlsMaterial


@dataclass(frozen=True)
class DigestCredentials:
    """ZooKeeper digest credentials (from a Secret's ``username``/``password``)."""

    username: str
    password: str = field(repr=False)

    @property
    def auth(self) -> str:
        return f"{self.username}:{self.password}"

    def __repr__(self) -> str:
        return f"DigestCredentials(username={self.username!r}, password=<redacted>)"


#: What a group's workers may do on the operator's nodes of their group: everything but change ACLs.
WORKER_PERMS = Permissions.READ | Permissions.WRITE | Permissions.CREATE | Permissions.DELETE
WORLD_READ = make_acl("world", "anyone", read=True)


@dataclass(frozen=True)
class OperatorIdentity:
    """The identity the operator authenticates its sessions with: a digest (``username``, ``password``)
    or the x509 subject of its TLS client certificate (``tls``, the certificate, its key and the CA its
    sessions trust; ``username`` then holds the subject)."""

    username: str
    password: str = field(default="", repr=False)
    tls: TlsMaterial | None = field(default=None, repr=False)

    @staticmethod
    def digest(username: str, password: str) -> OperatorIdentity:
        if not username or ":" in username:
            raise ValueError("the operator's ZooKeeper username must be non-empty without ':'")
        if not password:
            raise ValueError("the operator's ZooKeeper password is empty")
        return OperatorIdentity(username, password)

    @staticmethod
    def x509(material: TlsMaterial) -> OperatorIdentity:
        """The identity of ``material``'s client certificate, which its sessions present (ValueError,
        with the reason, when it has no certificate, key or CA, or the certificate does not parse)."""
        if material.certificate is None or material.key is None:
            raise ValueError("the operator's x509 identity needs a client certificate and its key")
        if material.ca is None:
            raise ValueError("the operator's x509 identity needs the CA its sessions trust")
        return OperatorIdentity(subject_dn(material.certificate), tls=material)

    @property
    def scheme(self) -> str:
        """``digest`` or ``x509``."""
        return "x509" if self.tls is not None else "digest"

    @property
    def id(self) -> Id:
        """The ACL id naming this identity (``digest:<username>:<hash>`` or ``x509:<subject>``)."""
        if self.tls is not None:
            return Id("x509", self.username)
        return Id("digest", make_digest_acl_credential(self.username, self.password))

    @property
    def acl_id(self) -> str:
        """``digest:<username>:<hash>`` or ``x509:<subject>``, the form the workers' ConfigMap gives them
        (REBALANSER_ZK_OPERATOR_ID)."""
        return f"{self.scheme}:{self.id.id}"

    @property
    def auth(self) -> tuple[str, str] | None:
        """kazoo's ``auth_data`` entry (None for an x509 identity: its TLS handshake authenticates it)."""
        if self.tls is not None:
            return None
        return ("digest", f"{self.username}:{self.password}")

    def session_tls(self, group: TlsMaterial | None) -> TlsMaterial | None:
        """The TLS material of the operator's own sessions to an ensemble a group reaches with ``group``:
        the group's, or with an x509 identity always the identity's certificate, key and CA (host names
        verified as the group asks)."""
        if self.tls is None:
            return group
        verify = group.verify_hostname if group is not None else self.tls.verify_hostname
        return replace(self.tls, verify_hostname=verify)

    def all(self) -> ACL:
        return ACL(Permissions.ALL, self.id)

    def names(self, acl: Sequence[ACL]) -> bool:
        """Whether ``acl`` gives this identity every permission (a node this operator created or took over)."""
        return any(entry.id == self.id and entry.perms & Permissions.ALL == Permissions.ALL for entry in acl)

    def describe(self) -> str:
        if self.tls is not None:
            return f"x509 subject {self.username} (its TLS client certificate)"
        return f"digest user {self.username}"

    def __repr__(self) -> str:
        if self.tls is not None:
            return f"OperatorIdentity(x509={self.username!r})"
        return f"OperatorIdentity(username={self.username!r}, password=<redacted>)"


def parent_acl(identity: OperatorIdentity | None) -> list[ACL]:
    """The ACL of the nodes above the groups (``/rebalanser``, ``/rebalanser/<ns>``): only the operator
    creates, deletes or changes anything there; anyone may read (the group names are not secret).
    Without an identity: open, as before."""
    if identity is None:
        return list(OPEN_ACL_UNSAFE)
    return [identity.all(), WORLD_READ]


def group_acl(identity: OperatorIdentity | None, credentials: DigestCredentials | None,
              previous: Sequence[ACL] = ()) -> list[ACL]:
    """The ACL of a group's nodes the operator creates (root, containers, ``G/config``, resources).

    With an identity: the operator all, the group's digest (and the ``previous`` digests of a rotation's
    grace period) what workers need, world read; a group without credentials then has a world entry
    with what workers need. Without an identity: digest-protected writes with credentials, open without
    (as before)."""
    if identity is None:
        if credentials is None:
            return list(OPEN_ACL_UNSAFE)
        own = make_digest_acl(credentials.username, credentials.password, all=True)
        return [own, *(entry for entry in previous if entry != own), WORLD_READ]
    if credentials is None:
        return [identity.all(), ACL(WORKER_PERMS, Id("world", "anyone"))]
    own = ACL(WORKER_PERMS, Id("digest", make_digest_acl_credential(credentials.username, credentials.password)))
    extra = [ACL(WORKER_PERMS, entry.id) for entry in previous if entry.id != own.id and entry.id != identity.id]
    return [identity.all(), own, *extra, WORLD_READ]


def digest_entry(credentials: DigestCredentials) -> ACL:
    """A group's digest with every permission (what its workers give the nodes they create)."""
    return make_digest_acl(credentials.username, credentials.password, all=True)
