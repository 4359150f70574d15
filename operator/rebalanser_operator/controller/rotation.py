"""A credentials rotation as a pure plan: (state, message, facts) -> (next state, effects to run).

    state, effects = plan_rotation(state, SecretSeen.of("zk-digest", data), facts)
    # state.reapply, (Wake(),): the same step re-applies the spec with the Secret as received

A group's rotation state (:class:`Rotation`) is a frozen value its controller replaces as a whole; the
messages are what a step learns (a Secret as the poll received it, the credentials an apply uses, the
clock, the ACL a sync put on the znodes), and the effects are what the I/O steps then do
(:mod:`rebalanser_operator.apply.actions`). No I/O and no clock here: everything is a fact or a
message, so a whole rotation is a table test (tests/unit/test_rotation_plan.py).

The walk of a rotation: the Secret poll hands over the Secret it read (:class:`SecretSeen`); if it
differs from what the group connects with, the state keeps it as received and asks for a re-apply.
The re-apply uses that data, never reading the Secret again (:func:`received_data`); the new
credentials (:class:`CredentialsRead`) replace the old ones, which keep their access for the grace
period; the ACL naming both (:func:`acl_of`) goes onto the group and, because it changed
(:class:`Synced`), onto the workers' znodes. When the grace period is over (:class:`Tick`), the state
drops the old credentials and asks for a re-apply with the new ones alone.

The re-apply itself is short (:func:`plan_reapply`): the spec, its place and its root are the group's
already, so only what a Secret or the grace's end can change is done again: the credentials or TLS
material taken as received, the session that holds them, the ACL of the group's znodes, the workers'
config. Only a group whose last apply did not go through (or a Secret that could not be read) is
applied again whole.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace

from kazoo.security import ACL, make_digest_acl

from rebalanser_operator.controller.effects import Note, Wake
from rebalanser_operator.controller.messages import SecretSeen
from rebalanser_operator.identity import DigestCredentials, OperatorIdentity, group_acl
from rebalanser_operator.kube import CredentialsError, credentials_from, tls_from
from rebalanser_operator.spec.models import CredentialsSecretRef, ResourceGroupSpec
from rebalanser_operator.tenancy import Limits, Refusal
from rebalanser_operator.zktls import TlsMaterial


@dataclass(frozen=True)
class Rotation:
    """What a group connects with (its credentials and TLS material), and the rotation under way
    (None/empty: none)."""

    credentials: DigestCredentials | None = None  # as the last apply read them (deletion may outlive it)
    tls: TlsMaterial | None = None  # as the last apply read them from spec.zookeeper.tls.secret
    previous: DigestCredentials | None = None  # the replaced credentials (this process saw them)
    previous_acl: tuple[ACL, ...] = ()  # the replaced credentials' digest entries, kept during the grace
    grace_until: float | None = None  # monotonic end of the grace period (None: no rotation in progress)
    #: changed Secrets as the poll received them, not applied yet (their content: never in a log line)
    received: tuple[SecretSeen, ...] = field(default=(), repr=False)
    reapply: bool = False  # the last spec is to be applied again (a Secret changed, the grace ended)


# ------------------------------------------------------------------------------------------ messages


@dataclass(frozen=True)
class CredentialsRead:
    """An apply has the credentials the spec names (None: the spec names none)."""

    credentials: DigestCredentials | None


@dataclass(frozen=True)
class TlsRead:
    """An apply has the TLS material the spec names (None: the spec names none)."""

    tls: TlsMaterial | None


@dataclass(frozen=True)
class GraceFound:
    """An operator's first apply found digests an unfinished grace period left on the group root's ACL."""

    retained: tuple[ACL, ...]


@dataclass(frozen=True)
class Tick:
    """A refresh of the group (the facts' ``now``)."""


@dataclass(frozen=True)
class ReapplyStarted:
    """A re-apply of the last spec begins (the Secret's step, or a refresh's retry; it takes the Secrets
    as received)."""


@dataclass(frozen=True)
class ReapplyFailed:
    """The re-apply did not go through (it is tried again at a later refresh)."""

    changed: bool  # it had been asked for by a changed Secret or the grace's end


@dataclass(frozen=True)
class Synced:
    """A sync put ``acl`` on the group; ``before`` was the ACL of the last sync (None: the first)."""

    acl: tuple[ACL, ...]
    before: tuple[ACL, ...] | None


Message = SecretSeen | CredentialsRead | TlsRead | GraceFound | Tick | ReapplyStarted | ReapplyFailed | Synced


# ------------------------------------------------------------------------------------------- effects


@dataclass(frozen=True)
class MigrateWorkers:
    """Give the workers' znodes the group's new ACL (rotation: both passwords; grace over: the new one)."""

    acl: tuple[ACL, ...]
    both: bool  # the ACL names the previous credentials too


Effect = Wake | Note | MigrateWorkers


# --------------------------------------------------------------------------------------------- facts


@dataclass(frozen=True)
class Facts:
    """What a step knows besides the state and the message."""

    namespace: str
    spec: ResourceGroupSpec | None  # as last applied (None: not applied yet)
    now: float = 0.0
    grace: float = 300.0  # seconds the replaced credentials keep their access
    #: the applied spec went through and the group is this object's (owned, its ACL known): a re-apply
    #: need not parse, admit, adopt or sync it again
    in_place: bool = False
    identity: OperatorIdentity | None = None  # the operator's own (its entry heads every group ACL)
    limits: Limits | None = None  # the administrator's limits (the size of a Secret key's value)
    acl: tuple[ACL, ...] | None = None  # the ACL the group's last sync put on it (None: none went through)


# ---------------------------------------------------------------------------------------------- plan


def plan_rotation(state: Rotation, message: Message, facts: Facts) -> tuple[Rotation, tuple[Effect, ...]]:
    """The next rotation state and the effects to run, for one message."""
    if isinstance(message, SecretSeen):
        return _seen(state, message, facts)
    if isinstance(message, CredentialsRead):
        return _read(state, message.credentials, facts)
    if isinstance(message, TlsRead):
        return replace(state, tls=message.tls), ()
    if isinstance(message, GraceFound):
        if not message.retained:
            return state, ()
        return (replace(state, previous_acl=message.retained, grace_until=facts.now + facts.grace),
                (Note(f"the group's ACL still names {len(message.retained)} previous digest(s); they keep their "
                      f"access for {facts.grace:.0f}s"),))
    if isinstance(message, Tick):
        if state.grace_until is None or facts.now < state.grace_until:
            return state, ()
        return (replace(state, previous=None, previous_acl=(), grace_until=None, reapply=True),
                (Note("the credentials' grace period is over; re-ACLing to the current password"),))
    if isinstance(message, ReapplyStarted):
        return replace(state, reapply=False), ()
    if isinstance(message, ReapplyFailed):
        return replace(state, reapply=message.changed), ()
    return _synced(state, message)


@dataclass(frozen=True)
class Rekey:
    """A re-key's plan (:func:`plan_rekey`), made before any I/O: the state once the Secrets as received
    are taken (the session follows its credentials and TLS material), the group's ACL then, the state
    once that ACL is on the group, and what else that asks for. ``unusable``: (reason, message) of a
    Secret that cannot be used as received (nothing is done; the group stays marked)."""

    read: Rotation
    acl: tuple[ACL, ...] = ()
    synced: Rotation | None = None
    effects: tuple[Effect, ...] = ()  # log lines, and the workers' znodes re-ACLed when the ACL changed
    unusable: tuple[str, str] | None = None


def plan_rekey(state: Rotation, facts: Facts) -> Rekey:
    """A group in place re-keyed with the Secrets as received (:data:`Reapply.REKEY`): each parsed and
    its keys' sizes checked, the credentials and TLS material the spec names replaced (the credentials
    as :class:`CredentialsRead` does: the replaced ones keep their access for the grace), the ACL of the
    group's znodes (:func:`acl_of`), and, when it differs from the last sync's, the workers' znodes
    re-ACLed too (:class:`Synced`). A Secret not received keeps what the group connects with."""
    spec = facts.spec
    assert spec is not None
    zookeeper, data = spec.zookeeper, received_data(state)
    try:
        credentials = _received_credentials(state.credentials, spec, facts.namespace, data)
    except CredentialsError as exc:
        return Rekey(state, unusable=("CredentialsUnavailable", str(exc)))
    try:
        tls = _received_tls(state.tls, spec, facts.namespace, data)
    except CredentialsError as exc:
        return Rekey(state, unusable=("TlsSecretUnavailable", str(exc)))
    refusal = _too_large(spec, facts, credentials, tls, data.keys())
    if refusal is not None:
        return Rekey(state, unusable=(refusal.reason, refusal.message))
    read, noted = _read(state, credentials if zookeeper.credentials is not None else None, facts)
    read = replace(read, tls=tls if zookeeper.tls is not None else None)
    acl = tuple(acl_of(read, facts.identity))
    synced, migrate = _synced(read, Synced(acl, facts.acl))
    return Rekey(read, acl, synced, (*noted, *migrate))


def _received_credentials(current: DigestCredentials | None, spec: ResourceGroupSpec, namespace: str,
                          data: Mapping[str, Mapping[str, str] | None]) -> DigestCredentials | None:
    """The credentials as received, else those in use; raises :class:`CredentialsError`."""
    if (ref := spec.zookeeper.credentials) is None or ref.name not in data:
        return current
    return credentials_from(data[ref.name], f"{namespace}/{ref.name}", username_key=ref.username_key,
                            password_key=ref.password_key)


def _received_tls(current: TlsMaterial | None, spec: ResourceGroupSpec, namespace: str,
                  data: Mapping[str, Mapping[str, str] | None]) -> TlsMaterial | None:
    """The TLS material as received, else the material in use; raises :class:`CredentialsError`."""
    named = spec.zookeeper.tls
    return current if named is None or named.secret not in data else \
        tls_from(data[named.secret], f"{namespace}/{named.secret}", verify_hostname=named.verify_hostname,
                 keys=named.keys)


def credentials_key_sizes(ref: CredentialsSecretRef, credentials: DigestCredentials) -> tuple[tuple[str, int], ...]:
    """(key, bytes) of the user name and the password, under the Secret keys they came from."""
    return ((ref.username_key, len(credentials.username.encode())),
            (ref.password_key, len(credentials.password.encode())))


def tls_key_sizes(keys: tuple[str, str, str], material: TlsMaterial) -> tuple[tuple[str, int], ...]:
    """(key, bytes) of each part of TLS material, under the Secret keys it came from."""
    parts = (material.ca, material.certificate, material.key)
    return tuple((key, len(part)) for key, part in zip(keys, parts, strict=True) if part is not None)


def _too_large(spec: ResourceGroupSpec, facts: Facts, credentials: DigestCredentials | None, tls: TlsMaterial | None,
               received: Collection[str]) -> Refusal | None:
    """A key of a received Secret larger than the administrator's limit (``facts.limits``)."""
    zookeeper = spec.zookeeper
    sizes: list[tuple[str, tuple[tuple[str, int], ...]]] = []  # (Secret, its keys' sizes)
    if (ref := zookeeper.credentials) is not None and ref.name in received and credentials is not None:
        sizes.append((ref.name, credentials_key_sizes(ref, credentials)))
    if (named := zookeeper.tls) is not None and named.secret in received and tls is not None:
        sizes.append((named.secret, tls_key_sizes(named.keys, tls)))
    for secret, keys in sizes:
        refusal = facts.limits.check_secret_keys(f"{facts.namespace}/{secret}", keys) if facts.limits else None
        if refusal is not None:
            return refusal
    return None


class Reapply(enum.Enum):
    """How a re-apply (the Secret's step, a refresh's retry) goes about the group (:func:`plan_reapply`)."""

    NONE = "none"  # nothing applied yet: kopf's first apply reads the Secrets
    REKEY = "rekey"  # the Secrets as received (or the grace's end) on the group as it is: session, ACL, config
    FULL = "full"  # the whole apply: parse, admit, adopt, read, connect, sync


def plan_reapply(state: Rotation, facts: Facts) -> Reapply:
    """The rotation's re-apply, cut to what can have changed: a group in place whose Secrets changed (all
    readable as received) or whose grace ended is only re-keyed; anything else is applied whole (a
    session connected late, an earlier apply that did not go through, an unreadable Secret to report)."""
    if facts.spec is None:
        return Reapply.NONE
    readable = all(seen.data is not None for seen in state.received)
    if state.reapply and facts.in_place and readable:
        return Reapply.REKEY
    return Reapply.FULL


@dataclass(frozen=True)
class Resync:
    """A re-apply's plan (:func:`plan_resync`), made before any I/O: the state once it has begun, how it
    goes about the group, whether a changed Secret or the grace's end asked for it (a failure then
    leaves the group marked), and a re-key's own plan."""

    started: Rotation
    how: Reapply
    changed: bool
    rekey: Rekey | None = None


def plan_resync(state: Rotation, facts: Facts) -> Resync:
    """A re-apply (the Secret's step, a refresh's retry), planned whole: how (:func:`plan_reapply`), the
    state once it began (:class:`ReapplyStarted`), and for a re-key what it does (:func:`plan_rekey`)."""
    how = plan_reapply(state, facts)
    started, _ = plan_rotation(state, ReapplyStarted(), facts)
    return Resync(started, how, state.reapply, plan_rekey(started, facts) if how is Reapply.REKEY else None)


@dataclass(frozen=True)
class SecretStep:
    """The plan of the step a Secret read by the poll is handed to (:func:`plan_secret`): the state with
    it kept as received, the effects (a wake-up when it changed the group), and the re-apply that follows
    in the same step (None: it did not change the group, or the step only marks it)."""

    state: Rotation
    effects: tuple[Effect, ...]
    resync: Resync | None

    @property
    def changed(self) -> bool:
        return bool(self.effects)


def plan_secret(state: Rotation, seen: SecretSeen, facts: Facts, *, reapply: bool) -> SecretStep:
    """A Secret the poll read, planned in one call: kept when it changes the group's connection
    (:class:`SecretSeen`) and, with ``reapply``, the re-apply it asks for (:func:`plan_resync`)."""
    state, effects = _seen(state, seen, facts)
    return SecretStep(state, effects, plan_resync(state, facts) if effects and reapply else None)


def _seen(state: Rotation, seen: SecretSeen, facts: Facts) -> tuple[Rotation, tuple[Effect, ...]]:
    """A Secret the poll read: kept as received, and a re-apply asked for, when it changes the group's
    connection (an unreadable one counts as changed: the re-apply reports it)."""
    if not secret_differs(state, seen, facts):
        return state, ()
    received = (*(r for r in state.received if r.secret != seen.secret), seen)
    return replace(state, received=received, reapply=True), (Wake(),)


def _read(state: Rotation, new: DigestCredentials | None, facts: Facts) -> tuple[Rotation, tuple[Effect, ...]]:
    """New credentials replacing others start a grace period: until ``grace`` from now, the group's ACLs
    name the previous credentials too (workers move to the new password as they notice the changed
    file); then a :class:`Tick` leaves the new one alone."""
    if new is None:
        return replace(state, credentials=None, previous=None, previous_acl=(), grace_until=None), ()
    old = state.credentials
    if old is None or new == old:
        return replace(state, credentials=new), ()
    return (replace(state, credentials=new, previous=old,
                    previous_acl=(make_digest_acl(old.username, old.password, all=True),),
                    grace_until=facts.now + facts.grace),
            (Note(f"credentials rotated; the previous password keeps its access for {facts.grace:.0f}s"),))


def _synced(state: Rotation, synced: Synced) -> tuple[Rotation, tuple[Effect, ...]]:
    """The Secrets as received are applied; a changed ACL goes onto the workers' znodes too."""
    state = replace(state, received=())
    if synced.before is None or set(synced.before) == set(synced.acl):
        return state, ()
    return state, (MigrateWorkers(synced.acl, both=bool(state.previous_acl)),)


def acl_of(state: Rotation, identity: OperatorIdentity | None) -> list[ACL]:
    """The ACL of the group's nodes: the operator's identity, the current credentials, and during the
    grace period the previous credentials' digests."""
    return group_acl(identity, state.credentials, state.previous_acl)


def session_credentials(state: Rotation) -> tuple[DigestCredentials, ...]:
    """The credentials a group's own session holds: the current ones, and during a rotation's grace
    period the previous ones too (never another group's)."""
    current = (state.credentials,) if state.credentials is not None else ()
    if state.grace_until is not None and state.previous is not None:
        return (*current, state.previous)
    return current


def received_data(state: Rotation) -> dict[str, Mapping[str, str] | None]:
    """The Secrets as received, by name (a re-apply uses them instead of reading them again)."""
    return {seen.secret: (dict(seen.data) if seen.data is not None else None) for seen in state.received}


def secret_differs(state: Rotation, seen: SecretSeen, facts: Facts) -> bool:
    """Whether Secret ``seen`` differs from the credentials or TLS material the group connects with."""
    spec = facts.spec
    if spec is None:
        return False  # not applied yet: the first reconcile reads the Secret anyway
    data = dict(seen.data) if seen.data is not None else None
    zookeeper, where = spec.zookeeper, f"{facts.namespace}/{seen.secret}"
    if (ref := zookeeper.credentials) is not None and ref.name == seen.secret:
        try:
            if credentials_from(data, where, username_key=ref.username_key,
                                password_key=ref.password_key) != state.credentials:
                return True
        except CredentialsError:
            return True
    if zookeeper.tls is not None and zookeeper.tls.secret == seen.secret:
        try:
            if tls_from(data, where, verify_hostname=zookeeper.tls.verify_hostname, keys=zookeeper.tls.keys) \
                    != state.tls:
                return True
        except CredentialsError:
            return True
    return False
