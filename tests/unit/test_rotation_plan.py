"""A credentials rotation as a table of the pure plan (controller/rotation.py): each row is one message
to the group's rotation state at a time, with the state it leaves and the effects it asks for. No
ZooKeeper, no API server, no clock."""

from __future__ import annotations

import base64
from dataclasses import dataclass, replace
from typing import Any

import pytest
from kazoo.security import make_acl, make_digest_acl
from rebalanser_operator.controller.effects import Note, Wake
from rebalanser_operator.controller.messages import SecretSeen
from rebalanser_operator.controller.rotation import (
    CredentialsRead,
    Effect,
    Facts,
    GraceFound,
    Message,
    MigrateWorkers,
    Reapply,
    ReapplyFailed,
    ReapplyStarted,
    Rotation,
    Synced,
    Tick,
    TlsRead,
    acl_of,
    plan_reapply,
    plan_rekey,
    plan_resync,
    plan_rotation,
    plan_secret,
    received_data,
    session_credentials,
)
from rebalanser_operator.identity import DigestCredentials, OperatorIdentity
from rebalanser_operator.spec.models import ResourceGroupSpec
from rebalanser_operator.tenancy import Limits
from rebalanser_operator.zktls import TlsMaterial

GRACE = 300.0
OLD, NEW = DigestCredentials("op", "old"), DigestCredentials("op", "new")
OLD_DIGEST = make_digest_acl("op", "old", all=True)
IDENTITY = OperatorIdentity.digest("rebalanser-operator", "secret")
SPEC = ResourceGroupSpec.parse({"zookeeper": {"connect": "zk:2181", "path": "/rebalanser/shop/orders",
                                              "credentialsSecret": "zk-digest"}, "resources": ["a"]})
TLS_SPEC = ResourceGroupSpec.parse({"zookeeper": {"connect": "zk:2281", "path": "/rebalanser/shop/orders",
                                                  "tls": {"secret": "zk-tls"}}, "resources": ["a"]})
CA = b"-----BEGIN CERTIFICATE-----\nold\n-----END CERTIFICATE-----\n"


def encoded(**values: bytes | str) -> dict[str, str]:
    return {key: base64.b64encode(value if isinstance(value, bytes) else value.encode()).decode()
            for key, value in values.items()}


def seen(password: str, secret: str = "zk-digest") -> SecretSeen:
    return SecretSeen.of(secret, encoded(username="op", password=password))


def facts(now: float, spec: ResourceGroupSpec | None = SPEC) -> Facts:
    return Facts("shop", spec, now, GRACE)


def acl(*credentials: DigestCredentials) -> tuple[Any, ...]:
    current, *previous = credentials
    digests = [make_digest_acl(c.username, c.password, all=True) for c in previous]
    return tuple(acl_of(Rotation(current, previous_acl=tuple(digests)), IDENTITY))


@dataclass(frozen=True)
class Row:
    what: str
    message: Message
    now: float
    state: Rotation  # after the message
    effects: tuple[Effect, ...] = ()


APPLIED = Rotation(credentials=OLD)
WITH_TLS = Rotation(tls=TlsMaterial(CA, None, None))
RECEIVED = replace(APPLIED, received=(seen("new"),), reapply=True)
ROTATING = Rotation(credentials=NEW, previous=OLD, previous_acl=(OLD_DIGEST,), grace_until=10.0 + GRACE,
                    received=(seen("new"),))
IN_GRACE = replace(ROTATING, received=())
OVER = Rotation(credentials=NEW, reapply=True)

#: One rotation, from the poll's read of the changed Secret to the new password alone.
WALK = (
    Row("the poll reads the Secret unchanged", seen("old"), 1.0, APPLIED),
    Row("the poll reads a new password: kept as received, re-apply", seen("new"), 2.0, RECEIVED, (Wake(),)),
    Row("the same Secret again before the re-apply: still to apply", seen("new"), 3.0, RECEIVED, (Wake(),)),
    Row("the refresh starts the re-apply", ReapplyStarted(), 10.0, replace(RECEIVED, reapply=False)),
    Row("the re-apply uses the received credentials: the grace begins", CredentialsRead(NEW), 10.0, ROTATING,
        (Note(f"credentials rotated; the previous password keeps its access for {GRACE:.0f}s"),)),
    Row("the sync put both passwords on the group: the workers' znodes follow",
        Synced(acl(NEW, OLD), acl(OLD)), 10.0, IN_GRACE, (MigrateWorkers(acl(NEW, OLD), both=True),)),
    Row("a refresh inside the grace: nothing", Tick(), 10.0 + GRACE - 0.1, IN_GRACE),
    Row("the grace is over: the old password goes, re-apply", Tick(), 10.0 + GRACE, OVER,
        (Note("the credentials' grace period is over; re-ACLing to the current password"),)),
    Row("the refresh starts the re-apply", ReapplyStarted(), 311.0, replace(OVER, reapply=False)),
    Row("the re-apply reads the same credentials: no new grace", CredentialsRead(NEW), 311.0,
        Rotation(credentials=NEW)),
    Row("the sync put the new password alone on the group: the workers' znodes follow",
        Synced(acl(NEW), acl(NEW, OLD)), 311.0, Rotation(credentials=NEW), (MigrateWorkers(acl(NEW), both=False),)),
    Row("the next sync changes no ACL", Synced(acl(NEW), acl(NEW)), 312.0, Rotation(credentials=NEW)),
)


def test_a_rotation_walks_through_the_plan() -> None:
    state = APPLIED
    for row in WALK:
        state, effects = plan_rotation(state, row.message, facts(row.now))
        assert (state, effects) == (row.state, row.effects), row.what


@pytest.mark.parametrize(("what", "before", "message", "at", "after", "effects"), [
    ("a Secret before the first apply is left to it", Rotation(), seen("new"), facts(1.0, spec=None),
     Rotation(), ()),
    ("a Secret without the password key counts as changed (the re-apply reports it)", APPLIED,
     SecretSeen.of("zk-digest", encoded(username="op")), facts(1.0),
     replace(APPLIED, received=(SecretSeen.of("zk-digest", encoded(username="op")),), reapply=True), (Wake(),)),
    ("a Secret the spec does not name changes nothing", APPLIED, seen("new", secret="other"), facts(1.0),
     APPLIED, ()),
    ("a newer read of the same Secret replaces the one received", RECEIVED, seen("newer"), facts(1.0),
     replace(RECEIVED, received=(seen("newer"),)), (Wake(),)),
    ("new TLS material: re-apply (a new session)", WITH_TLS, SecretSeen.of("zk-tls", encoded(**{"ca.crt": b"x"})),
     facts(1.0, TLS_SPEC),
     replace(WITH_TLS, received=(SecretSeen.of("zk-tls", encoded(**{"ca.crt": b"x"})),), reapply=True), (Wake(),)),
    ("the TLS material in use: nothing", WITH_TLS, SecretSeen.of("zk-tls", encoded(**{"ca.crt": CA})),
     facts(1.0, TLS_SPEC), WITH_TLS, ()),
    ("an apply reads TLS material", Rotation(), TlsRead(TlsMaterial(CA, None, None)), facts(1.0, TLS_SPEC),
     WITH_TLS, ()),
    ("the first credentials start no grace", Rotation(), CredentialsRead(OLD), facts(1.0), APPLIED, ()),
    ("a spec without credentials ends a grace", IN_GRACE, CredentialsRead(None), facts(20.0), Rotation(), ()),
    ("a failed re-apply asked for by a Secret is asked for again", replace(RECEIVED, reapply=False),
     ReapplyFailed(changed=True), facts(11.0), RECEIVED, ()),
    ("a failed re-apply after a late connection is not", APPLIED, ReapplyFailed(changed=False), facts(11.0),
     APPLIED, ()),
    ("a restarted operator resumes an unfinished grace from the root's ACL", APPLIED,
     GraceFound((OLD_DIGEST,)), facts(50.0),
     replace(APPLIED, previous_acl=(OLD_DIGEST,), grace_until=50.0 + GRACE),
     (Note(f"the group's ACL still names 1 previous digest(s); they keep their access for {GRACE:.0f}s"),)),
    ("no previous digests on the root: no grace", APPLIED, GraceFound(()), facts(50.0), APPLIED, ()),
    ("the first sync migrates nothing", APPLIED, Synced(acl(OLD), None), facts(1.0), APPLIED, ()),
])
def test_each_message(what: str, before: Rotation, message: Message, at: Facts, after: Rotation,
                      effects: tuple[Effect, ...]) -> None:
    assert plan_rotation(before, message, at) == (after, effects), what


def test_the_acl_and_the_session_during_and_after_the_grace() -> None:
    read = make_acl("world", "anyone", read=True)
    assert read in acl_of(IN_GRACE, IDENTITY) and OLD_DIGEST not in acl_of(IN_GRACE, IDENTITY)  # workers' perms
    assert any(entry.id.id == OLD_DIGEST.id.id for entry in acl_of(IN_GRACE, IDENTITY))
    assert not any(entry.id.id == OLD_DIGEST.id.id for entry in acl_of(Rotation(credentials=NEW), IDENTITY))
    assert session_credentials(IN_GRACE) == (NEW, OLD)
    assert session_credentials(Rotation(credentials=NEW, previous=OLD)) == (NEW,)  # no grace: the new one only
    assert received_data(RECEIVED) == {"zk-digest": encoded(username="op", password="new")}
    # A Secret's content as received is kept, but never shown (the state's repr may reach a log line).
    assert encoded(password="new")["password"] not in repr(RECEIVED) + repr(seen("new"))


def in_place(now: float = 10.0, spec: ResourceGroupSpec | None = SPEC) -> Facts:
    return Facts("shop", spec, now, GRACE, in_place=True)


@pytest.mark.parametrize(("what", "state", "at", "how"), [
    ("a Secret received for a group in place: re-keyed only", RECEIVED, in_place(), Reapply.REKEY),
    ("the grace's end on a group in place: re-keyed only", OVER, in_place(), Reapply.REKEY),
    ("new TLS material for a group in place: re-keyed (a new session)",
     replace(WITH_TLS, received=(SecretSeen.of("zk-tls", encoded(**{"ca.crt": b"x"})),), reapply=True),
     in_place(spec=TLS_SPEC), Reapply.REKEY),
    ("a Secret received for a group whose last apply did not go through: applied whole", RECEIVED, facts(10.0),
     Reapply.FULL),
    ("an unreadable Secret: applied whole (which reports it)",
     replace(APPLIED, received=(SecretSeen.of("zk-digest", None),), reapply=True), in_place(), Reapply.FULL),
    ("a session connected late (nothing received): applied whole", APPLIED, in_place(), Reapply.FULL),
    ("nothing applied yet: nothing", RECEIVED, in_place(spec=None), Reapply.NONE),
])
def test_how_a_refresh_re_applies(what: str, state: Rotation, at: Facts, how: Reapply) -> None:
    assert plan_reapply(state, at) is how, what


def rekey_facts(before: tuple[Any, ...] | None, spec: ResourceGroupSpec = SPEC, key_bytes: int = 0) -> Facts:
    """A group in place whose last sync put ``before`` on it, with the operator's identity."""
    return Facts("shop", spec, 10.0, GRACE, in_place=True, identity=IDENTITY,
                 limits=Limits(secret_key_bytes=key_bytes), acl=before)


@pytest.mark.parametrize(("what", "state", "at", "read", "effects"), [
    ("a new password received: the rotation begins, both passwords in the ACL, the workers' znodes follow",
     RECEIVED, rekey_facts(acl(OLD)),
     Rotation(credentials=NEW, previous=OLD, previous_acl=(OLD_DIGEST,), grace_until=10.0 + GRACE, reapply=True,
              received=RECEIVED.received),
     (Note(f"credentials rotated; the previous password keeps its access for {GRACE:.0f}s"),
      MigrateWorkers(acl(NEW, OLD), both=True))),
    ("the grace's end (nothing received): the password in use alone, the workers' znodes follow",
     replace(OVER, reapply=False), rekey_facts(acl(NEW, OLD)), replace(OVER, reapply=False),
     (MigrateWorkers(acl(NEW), both=False),)),
    ("the same password received again: nothing moves",
     replace(APPLIED, received=(seen("old"),), reapply=True), rekey_facts(acl(OLD)),
     replace(APPLIED, received=(seen("old"),), reapply=True), ()),
])
def test_a_rekey_is_planned_before_any_io(what: str, state: Rotation, at: Facts, read: Rotation,
                                          effects: tuple[Effect, ...]) -> None:
    plan = plan_rekey(state, at)
    assert plan.unusable is None, what
    assert plan.read == read, what
    assert plan.acl == tuple(acl_of(read, IDENTITY)), what
    assert plan.synced == replace(read, received=()), what  # the Secrets as received are applied
    assert plan.effects == effects, what


@pytest.mark.parametrize(("what", "state", "at", "reason"), [
    ("a password Secret without its keys", replace(APPLIED, received=(SecretSeen.of("zk-digest", {}),), reapply=True),
     rekey_facts(acl(OLD)), "CredentialsUnavailable"),
    ("a password larger than the administrator's limit",
     replace(APPLIED, received=(seen("x" * 65),), reapply=True), rekey_facts(acl(OLD), key_bytes=64),
     "SecretKeyTooLarge"),
    ("a TLS certificate without its key",
     replace(WITH_TLS, received=(SecretSeen.of("zk-tls", encoded(**{"tls.crt": CA})),), reapply=True),
     rekey_facts(None, spec=TLS_SPEC), "TlsSecretUnavailable"),
])
def test_a_secret_unusable_as_received_is_reported_and_nothing_changes(what: str, state: Rotation, at: Facts,
                                                                      reason: str) -> None:
    plan = plan_rekey(state, at)
    assert plan.unusable is not None and plan.unusable[0] == reason, (what, plan.unusable)
    assert plan.read == state and plan.synced is None, what


def test_new_tls_material_received_replaces_the_material_in_use() -> None:
    pem = b"-----BEGIN CERTIFICATE-----\nnew\n-----END CERTIFICATE-----\n"
    state = replace(WITH_TLS, received=(SecretSeen.of("zk-tls", encoded(**{"ca.crt": pem})),), reapply=True)
    plan = plan_rekey(state, rekey_facts(None, spec=TLS_SPEC))
    assert plan.unusable is None and plan.read.tls is not None and plan.read.tls.ca == pem
    assert plan.read.credentials is None and plan.effects == ()  # no ACL before: nothing to migrate


@pytest.mark.parametrize(("what", "state", "message", "at", "reapply", "how"), [
    ("a new password for a group in place: kept, and re-keyed in the same step", APPLIED, seen("new"),
     rekey_facts(acl(OLD)), True, Reapply.REKEY),
    ("a new password for a group whose last apply did not go through: kept, and applied whole", APPLIED,
     seen("new"), facts(10.0), True, Reapply.FULL),
    ("a new password before the group's home is known: kept and marked only", APPLIED, seen("new"),
     rekey_facts(acl(OLD)), False, None),
    ("the password in use: nothing", APPLIED, seen("old"), rekey_facts(acl(OLD)), True, None),
])
def test_a_secret_step_is_planned_in_one_call(what: str, state: Rotation, message: SecretSeen, at: Facts,
                                              reapply: bool, how: Reapply | None) -> None:
    step = plan_secret(state, message, at, reapply=reapply)
    kept, effects = plan_rotation(state, message, at)
    assert (step.state, step.effects, step.changed) == (kept, effects, bool(effects)), what
    if how is None:
        assert step.resync is None, what
        return
    assert step.resync is not None and step.resync == plan_resync(kept, at), what
    assert step.resync.how is how and step.resync.changed, what
    assert step.resync.started == replace(kept, reapply=False), what  # begun: a failure marks it again
    rekey = step.resync.rekey
    assert (rekey is not None) is (how is Reapply.REKEY), what
    if rekey is not None:  # planned from the begun state, with the Secret as received
        assert rekey == plan_rekey(step.resync.started, at) and rekey.read.credentials == NEW, what
