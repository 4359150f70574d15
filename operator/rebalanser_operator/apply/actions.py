"""The controller's I/O steps for a spec: apply it to ZooKeeper, rotate credentials, clean up on deletion.

Blocking functions. :func:`apply_spec` and :func:`delete_znodes` hand their values to the group's
controller (:mod:`rebalanser_operator.controller`), which runs :func:`apply_step` and
:func:`delete_desired` as its steps, one at a time with every other write of the group; the other
functions here run inside such steps. Failures are reported as :class:`RetryLater` (temporary:
ZooKeeper unreachable, Secret missing...) or :class:`InvalidSpec` (permanent until the spec changes);
the handlers translate these into kopf's ``TemporaryError``/``PermanentError``. Each outcome is also
recorded in the group's runtime, so the status loop can show it.

An apply's ZooKeeper work is done in the step; what it asks of the rest of the world (an Event, the
workers' ConfigMap, a wake-up of the status loop) it returns as values with its answer
(:func:`apply_desired`, :func:`rekey`: a :class:`Stepped`), and :func:`carry_out` does them at the
step's end, then answers or raises.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoAuthError, NoNodeError, NotEmptyError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.security import ACL
from rebalanser.membership import list_members
from rebalanser.paths import GroupPaths

from rebalanser_operator.apply.reconcile import (
    ADOPT_ANNOTATION,
    GroupOwnedElsewhereError,
    NotCreatedByOperatorError,
    OwnerMarker,
    ParentNotOwnedError,
    SyncResult,
    delete_group,
    migrate_worker_nodes_acl,
    reacl_group,
    reconcile_group,
    retained_digests,
)
from rebalanser_operator.apply.takeover import take_over_group
from rebalanser_operator.controller.connectwait import AwaitConnection, connected
from rebalanser_operator.controller.effects import Emit, Note, StepEffect, Wake
from rebalanser_operator.controller.messages import Deletion, DesiredSpec, SecretSeen
from rebalanser_operator.controller.plan import (
    Planned,
    RefreshFacts,
    Reuse,
    credentials_only,
    plan_admission,
    plan_invalid,
    plan_notices,
    plan_refusal,
    plan_session,
    plan_synced,
    plan_temporary,
)
from rebalanser_operator.controller.rotation import (
    CredentialsRead,
    Effect,
    Facts,
    GraceFound,
    MigrateWorkers,
    Reapply,
    ReapplyFailed,
    Rekey,
    Resync,
    Rotation,
    Synced,
    Tick,
    TlsRead,
    acl_of,
    credentials_key_sizes,
    plan_resync,
    plan_rotation,
    plan_secret,
    secret_differs,
    tls_key_sizes,
)
from rebalanser_operator.controller.state import Applied
from rebalanser_operator.identity import DigestCredentials
from rebalanser_operator.kube import CredentialsError, credentials_from, tls_from
from rebalanser_operator.spec.models import CredentialsSecretRef, ResourceGroupSpec, SpecError
from rebalanser_operator.spec.notices import spec_notices
from rebalanser_operator.status.tuning import initial_state
from rebalanser_operator.tenancy import (
    LIMIT_EXCEEDED,
    NOT_CREATED_BY_OPERATOR,
    PARENT_NOT_OWNED,
    PATH_IN_USE,
    Placement,
    Refusal,
)
from rebalanser_operator.zkfence import fenced_client
from rebalanser_operator.zktls import TlsStoreFull

if TYPE_CHECKING:
    from rebalanser_operator.controller.context import Context
    from rebalanser_operator.controller.state import GroupRuntime

log = logging.getLogger(__name__)

T = TypeVar("T")

KEEP_ZNODES = "rebalanser.io/keep-znodes"
SKIP_CLEANUP = "rebalanser.io/skip-zookeeper-cleanup"
#: Deletion gives up on an unreachable ZooKeeper this long after its first attempt.
DELETE_GIVE_UP_SECONDS = 600.0
#: Deletion waits this long for live members to leave (workers stopping with their namespace) before
#: it deletes the group under them; a live worker would re-create its containers.
MEMBERS_LEAVE_WAIT_SECONDS = 60.0
MEMBERS_POLL_SECONDS = 2.0
OWNED_ELSEWHERE_RETRY = 60.0


class RetryLater(RuntimeError):
    def __init__(self, message: str, delay: float) -> None:
        super().__init__(message)
        self.delay = delay


class InvalidSpec(ValueError):
    """The spec can never be reconciled as written."""


def backoff(retry: int) -> float:
    """1, 2, 4, … 60 seconds."""
    return float(min(60, 2 ** max(0, min(retry, 6))))


def apply_spec(
    ctx: Context,
    rt: GroupRuntime,
    raw_spec: Mapping[str, Any],
    *,
    generation: int | None,
    body: Mapping[str, Any] | None = None,
    retry: int = 0,
    seed_interval: float | None = None,
    recorded_path: str | None = None,
    recorded_connect: str | None = None,
) -> SyncResult:
    """Makes the group in ZooKeeper match ``raw_spec``; idempotent. Hands the spec to the group's
    controller and waits for the outcome (runs at once when called from one of its steps)."""
    desired = DesiredSpec.of(raw_spec, generation=generation, body=body, retry=retry, seed_interval=seed_interval,
                             recorded_path=recorded_path, recorded_connect=recorded_connect)
    return ctx.controller_of(rt).apply(desired)


@dataclass(frozen=True)
class Stepped(Generic[T]):
    """What a step came to: its answer, or the error it ends with, and the effects (Events, the workers'
    ConfigMap, wake-ups, log lines) it asks for, not carried out yet (:func:`carry_out` does)."""

    answer: T | None
    error: Exception | None
    effects: tuple[StepEffect, ...]


def apply_step(ctx: Context, rt: GroupRuntime, desired_spec: DesiredSpec) -> SyncResult:
    """The controller's step for a desired spec (see :func:`apply_spec`): :func:`apply_desired`, then its
    effects carried out, then its answer (or its error raised)."""
    answer = carry_out(ctx, rt, apply_desired(ctx, rt, desired_spec))
    assert answer is not None
    return answer


def apply_desired(ctx: Context, rt: GroupRuntime, desired_spec: DesiredSpec) -> Stepped[SyncResult]:
    """Admits a desired spec (a pure plan), adopts it, reads its Secrets, connects, syncs the znodes and
    records the outcome (pure plans: :mod:`~rebalanser_operator.controller.plan`). Returns the result
    (or the error: a refusal, :class:`RetryLater`, :class:`InvalidSpec`, a session to wait for) with
    every Event, ConfigMap and wake-up it asks for, none of them done here."""
    fx: list[StepEffect] = []
    try:
        return Stepped(_apply(ctx, rt, desired_spec, fx), None, tuple(fx))
    except Exception as exc:  # raised by carry_out, after the effects
        return Stepped(None, exc, tuple(fx))


def _apply(ctx: Context, rt: GroupRuntime, desired_spec: DesiredSpec, fx: list[StepEffect]) -> SyncResult:
    body = desired_spec.body()
    rt.body = body if body is not None else rt.body
    spec, path, desired = _parse(ctx, rt, fx, desired_spec)
    placement = _admit(ctx, rt, fx, desired_spec, spec, path, desired)
    _adopt(rt, desired_spec, spec, path, desired, placement)
    _record(rt, fx, plan_notices(rt.outcome, spec_notices(rt.raw_spec)))
    credentials = _read_secrets(ctx, rt, fx, spec, desired_spec.received_data, desired_spec.retry)
    zk = _connect(ctx, rt, fx, spec, desired_spec.retry)
    result = _sync(ctx, rt, fx, zk, spec, credentials, placement, desired_spec.retry)
    _synced(ctx, rt, fx, spec, result)
    return result


def _record(rt: GroupRuntime, fx: list[StepEffect], planned: Planned) -> None:
    """A plan of :mod:`~rebalanser_operator.controller.plan`: the outcome replaced, its effects kept."""
    rt.outcome, effects = planned
    fx.extend(effects)


def carry_out(ctx: Context, rt: GroupRuntime, stepped: Stepped[T]) -> T | None:
    """The thin I/O end of a step: its effects, in order, then its answer (or its error raised)."""
    run_effects(ctx, rt, stepped.effects)
    if stepped.error is not None:
        raise stepped.error
    return stepped.answer


def run_effects(ctx: Context, rt: GroupRuntime, effects: Sequence[StepEffect]) -> None:
    """Carries a step's effects out, in order: wake-ups, log lines, Events, the workers' ConfigMap."""
    for effect in effects:
        if isinstance(effect, Wake):
            rt.wake()
        elif isinstance(effect, Note):
            log.info("%s: %s", rt.user, effect.message)
        elif isinstance(effect, Emit):
            event(ctx, rt, effect.type, effect.reason, effect.message)
        else:
            _publish(ctx, rt, effect.mapping())


def _parse(
    ctx: Context, rt: GroupRuntime, fx: list[StepEffect], desired_spec: DesiredSpec,
) -> tuple[ResourceGroupSpec, str, frozenset[str]]:
    try:
        spec = ResourceGroupSpec.parse(desired_spec.spec())
        return spec, group_path(ctx, rt, spec), spec.desired_resources()
    except SpecError as exc:
        ctx.metrics.reconciles.labels("invalid").inc()
        _record(rt, fx, plan_invalid(rt.outcome, desired_spec.generation, str(exc)))
        raise InvalidSpec(str(exc)) from exc


def _admit(ctx: Context, rt: GroupRuntime, fx: list[StepEffect], desired_spec: DesiredSpec,
           spec: ResourceGroupSpec, path: str, desired: frozenset[str]) -> Placement:
    """:func:`~rebalanser_operator.controller.plan.plan_admission`, carried out: before any Secret is read
    or sent. Raises the refusal or :class:`InvalidSpec`."""
    generation = desired_spec.generation
    placed = placement_of(ctx, rt, spec, path)
    synced = rt.sync is not None and rt.sync.ok
    before = desired_spec.recorded_connect or (rt.connect if synced else None)
    admission = plan_admission(
        placed=placed, resources_refusal=ctx.tenancy.limits.check_resources(len(desired)), path=path,
        previous_path=desired_spec.recorded_path or (rt.path if synced else None),
        connect=spec.zookeeper.connect, previous_connect=before,
    )
    if admission.refusal is not None:
        rt.outcome = replace(rt.outcome, generation=generation)
        raise _refused(ctx, rt, fx, admission.refusal)
    if admission.invalid is not None:
        _record(rt, fx, plan_invalid(rt.outcome, generation, admission.invalid))
        raise InvalidSpec(admission.invalid)
    assert isinstance(placed, Placement)
    if not ctx.admit(rt):
        rt.outcome = replace(rt.outcome, generation=generation)
        raise _refused(ctx, rt, fx, ctx.tenancy.limits.groups_refusal(rt.namespace),
                       retry_after=OWNED_ELSEWHERE_RETRY)
    if admission.check_move and not _group_found_at(ctx, rt, spec, path):
        message = (
            f"spec.zookeeper.connect changed from {before} to {spec.zookeeper.connect}, where {path} does not exist: "
            "the operator does not move a group between ensembles (its members and znodes stay on the old one). "
            "Revert the change, or move the data and retry, or delete and re-create the ResourceGroup"
        )
        _record(rt, fx, plan_invalid(rt.outcome, generation, message))
        raise InvalidSpec(message)
    return placed


def _adopt(rt: GroupRuntime, desired_spec: DesiredSpec, spec: ResourceGroupSpec, path: str, desired: frozenset[str],
           placement: Placement) -> None:
    """The admitted spec becomes the group's."""
    moved = (rt.connect, rt.path) != (spec.zookeeper.connect, path)
    rt.applied = Applied(spec, desired_spec.spec_json, path, spec.zookeeper.connect,
                         spec.zookeeper.session_timeout_seconds, desired, placement.root)
    rt.outcome = replace(rt.outcome, generation=desired_spec.generation, spec_error=None, in_place=False,
                         owned=rt.owned and not moved)  # a new place: not owned until the claim in _sync
    policy = rt.policy()
    if policy is not None and (rt.tuning is None or not policy.adaptive):
        rt.tuning = initial_state(policy, now=time.monotonic(), seed=desired_spec.seed_interval)


def _read_secrets(ctx: Context, rt: GroupRuntime, fx: list[StepEffect], spec: ResourceGroupSpec,
                  received: Callable[[str], Mapping[str, str] | None], retry: int) -> DigestCredentials | None:
    """The credentials and TLS material the spec names (a changed password starts a rotation): as
    ``received`` gives them (what the Secret poll read), else read from the API server."""
    credentials = None
    if (ref := spec.zookeeper.credentials) is not None:
        data = received(ref.name)
        try:
            credentials = _credentials(ctx, rt, ref, data)
        except CredentialsError as exc:
            raise _temporary(ctx, rt, fx, "CredentialsUnavailable", str(exc), backoff(retry)) from exc
        if credentials is not None:
            _check_sizes(ctx, rt, fx, ref.name, credentials_key_sizes(ref, credentials), retry)
    rotate(ctx, rt, CredentialsRead(credentials), fx=fx)
    tls = spec.zookeeper.tls
    if tls is None:
        rotate(ctx, rt, TlsRead(None), fx=fx)
        return credentials
    data = received(tls.secret)
    try:
        material = (
            ctx.kube.read_tls(rt.namespace, tls.secret, verify_hostname=tls.verify_hostname, keys=tls.keys)
            if data is None else
            tls_from(data, f"{rt.namespace}/{tls.secret}", verify_hostname=tls.verify_hostname, keys=tls.keys)
        )
    except CredentialsError as exc:
        raise _temporary(ctx, rt, fx, "TlsSecretUnavailable", str(exc), backoff(retry)) from exc
    _check_sizes(ctx, rt, fx, tls.secret, tls_key_sizes(tls.keys, material), retry)  # before a byte is written
    rotate(ctx, rt, TlsRead(material), fx=fx)
    return credentials


def _credentials(ctx: Context, rt: GroupRuntime, ref: CredentialsSecretRef,
                 received: Mapping[str, str] | None) -> DigestCredentials:
    if received is None:
        return ctx.kube.read_credentials(rt.namespace, ref.name, username_key=ref.username_key,
                                         password_key=ref.password_key)
    return credentials_from(received, f"{rt.namespace}/{ref.name}", username_key=ref.username_key,
                            password_key=ref.password_key)


def rotation_facts(ctx: Context | None, rt: GroupRuntime, now: float | None = None) -> Facts:
    """What the rotation plan knows of the group besides its rotation state."""
    outcome = rt.outcome
    return Facts(rt.namespace, rt.spec, time.monotonic() if now is None else now,
                 ctx.options.credentials_grace if ctx is not None else 0.0,
                 in_place=outcome.in_place and outcome.owned and outcome.acl is not None,
                 identity=ctx.identity if ctx is not None else None,
                 limits=ctx.tenancy.limits if ctx is not None else None,
                 acl=tuple(outcome.acl) if outcome.acl is not None else None)


def rotate(ctx: Context | None, rt: GroupRuntime,
           message: CredentialsRead | TlsRead | GraceFound | Tick | ReapplyFailed,
           now: float | None = None, *, fx: list[StepEffect] | None = None) -> tuple[Effect, ...]:
    """One message of the rotation plan: the state replaced once, its effects (a wake-up, a log line)
    kept in ``fx`` for the step's end, or run at once without it."""
    rt.rotation, effects = plan_rotation(rt.rotation, message, rotation_facts(ctx, rt, now))
    if fx is not None:
        fx.extend(effect for effect in effects if isinstance(effect, Wake | Note))
        return effects
    _run_kept(rt, effects)
    return effects


def _run_kept(rt: GroupRuntime, effects: Sequence[Effect]) -> None:
    """A rotation plan's wake-ups and log lines, run at once (its other effects are the caller's)."""
    for effect in effects:
        if isinstance(effect, Wake):
            rt.wake()
        elif isinstance(effect, Note):
            log.info("%s: %s", rt.user, effect.message)


def _check_sizes(ctx: Context, rt: GroupRuntime, fx: list[StepEffect], secret: str,
                 sizes: tuple[tuple[str, int], ...], retry: int) -> None:
    """A Secret key larger than ``Limits.secret_key_bytes`` is refused (retried: the Secret may shrink)."""
    refusal = ctx.tenancy.limits.check_secret_keys(f"{rt.namespace}/{secret}", sizes)
    if refusal is not None:
        raise _temporary(ctx, rt, fx, refusal.reason, refusal.message, backoff(retry))


def _connect(ctx: Context, rt: GroupRuntime, fx: list[StepEffect], spec: ResourceGroupSpec, retry: int, *,
             rekey: bool = False) -> KazooClient:
    """The group's session, as :func:`~rebalanser_operator.controller.plan.plan_session` plans it
    (reuse the one it holds, join another group's, or open one: the operator's identity, else the group's
    own credentials only), connected. Never waits for it (see
    :mod:`~rebalanser_operator.controller.connectwait`): a session not connected yet ends the step, and
    the group is applied again when it connects. For a ``rekey`` whose new session differs from the old
    only in its credentials (:func:`~rebalanser_operator.controller.plan.credentials_only`) that is
    no failure of the group: its status and Events are left as they are."""
    effect = plan_session(ctx.session_facts(rt))  # reuse, join or open one: never a lookup's side effect
    if effect is None:
        raise _refused(ctx, rt, fx, ctx.tenancy.limits.sessions_refusal(rt.namespace),
                       retry_after=OWNED_ELSEWHERE_RETRY)
    try:
        zk = ctx.session(rt, effect)
    except TlsStoreFull as exc:
        raise _refused(ctx, rt, fx, Refusal(LIMIT_EXCEEDED, str(exc)), retry_after=OWNED_ELSEWHERE_RETRY) from exc
    ctx.metrics.zookeeper_connections.set(ctx.pool.connections())
    fx.append(Wake())
    if not connected(ctx.pool, zk):
        # a re-key still waiting for the session it opened for new credentials (the group left Synced)
        waiting = isinstance(effect, Reuse) and rt.connect_pending and rt.sync is not None and rt.sync.ok
        rt.outcome = replace(rt.outcome, connect_pending=True)
        if rekey and (credentials_only(effect) or waiting):
            fx.append(Note("its session with the new credentials is connecting; re-keyed once it has"))
            raise RetryLater("the session with the new credentials is connecting", backoff(retry))
        tls = spec.zookeeper.tls
        over = f" over TLS (Secret {tls.secret})" if tls is not None else ""
        if ctx.identity is not None and ctx.identity.tls is not None:
            over = (" over TLS with the operator's own certificate (its identity); the group must name a TLS port"
                    + (f", as its Secret {tls.secret} is used by its workers only" if tls is not None else ""))
        message = f"cannot connect to ZooKeeper at {spec.zookeeper.connect}{over}; retried when the session connects"
        raise _temporary(ctx, rt, fx, "ZooKeeperUnreachable", message, backoff(retry))
    rt.outcome = replace(rt.outcome, connect_pending=False)
    if rt.fence is not None and rt.path is not None:
        rt.fence.take(zk, rt.path)  # at the gain's apply, before any write (once; FenceLost: a later owner's)
    return fenced_client(zk, rt.fence, rt.path)


def _sync(ctx: Context, rt: GroupRuntime, fx: list[StepEffect], zk: KazooClient, spec: ResourceGroupSpec,
          credentials: DigestCredentials | None, placement: Placement, retry: int) -> SyncResult:
    """Claims the group root for this object and syncs its znodes; a changed ACL is given to the workers'
    znodes too. Records the ACL; raises the refusal or :class:`RetryLater`."""
    assert rt.path is not None
    path = rt.path
    with _sync_errors(ctx, rt, fx, path, retry):
        if credentials is not None and rt.acl is None and rt.grace_until is None:
            _resume_grace(ctx, rt, fx, zk, path, credentials)
        acl = acl_of(rt.rotation, ctx.identity)
        result = _reconcile_or_take_over(ctx, rt, fx, zk, spec, acl, placement)
        rt.outcome = replace(rt.outcome, owned=True)
        synced = _acl_synced(ctx, rt, zk, path, acl)
        if result.parents_not_taken:
            fx.append(Emit("Warning", "ParentNotTakenOver",
                           f"{', '.join(result.parents_not_taken)}: the ACL refuses the operator's identity; the "
                           "group works, but no new group can be created there until a ZooKeeper administrator "
                           "gives it back"))
    rt.outcome, rt.rotation = replace(rt.outcome, acl=tuple(acl)), synced
    return result


def _acl_synced(ctx: Context, rt: GroupRuntime, zk: KazooClient, path: str, acl: list[ACL]) -> Rotation:
    """The group's znodes carry ``acl``: the rotation's next state, its effect run (a changed ACL goes
    onto the resources and the workers' znodes too)."""
    before = tuple(rt.acl) if rt.acl is not None else None
    synced, effects = plan_rotation(rt.rotation, Synced(tuple(acl), before), rotation_facts(ctx, rt))
    for effect in effects:
        if isinstance(effect, MigrateWorkers):  # a rotation began or its grace period ended
            _migrate(ctx, rt, zk, GroupPaths.of(path), effect)
    return synced


def _migrate(ctx: Context, rt: GroupRuntime, zk: KazooClient, paths: GroupPaths, effect: MigrateWorkers) -> None:
    """The group's changed ACL onto its resources and the workers' znodes."""
    migrated = migrate_worker_nodes_acl(zk, paths, list(effect.acl), resources=True, identity=ctx.identity)
    log.info("%s: group ACL changed (%s); %d worker znodes re-ACLed", rt.user,
             "rotation, both passwords" if effect.both else "new password only", migrated)


@contextmanager
def _sync_errors(ctx: Context, rt: GroupRuntime, fx: list[StepEffect], path: str, retry: int) -> Iterator[None]:
    """A sync's ZooKeeper failures as the refusal or :class:`RetryLater` they are; its time measured."""
    started = time.monotonic()
    try:
        yield
    except NotCreatedByOperatorError as exc:
        raise _refused(ctx, rt, fx, Refusal(NOT_CREATED_BY_OPERATOR, str(exc)),
                       retry_after=OWNED_ELSEWHERE_RETRY) from exc
    except GroupOwnedElsewhereError as exc:
        raise _refused(ctx, rt, fx, Refusal(PATH_IN_USE, str(exc)), retry_after=OWNED_ELSEWHERE_RETRY) from exc
    except ParentNotOwnedError as exc:
        raise _refused(ctx, rt, fx, Refusal(PARENT_NOT_OWNED, str(exc)), retry_after=OWNED_ELSEWHERE_RETRY) from exc
    except NoAuthError as exc:
        message = f"ZooKeeper refused a write under {path}: the group is protected by other credentials"
        raise _temporary(ctx, rt, fx, "NotAuthorized", message, backoff(retry)) from exc
    except (KazooException, KazooTimeoutError) as exc:
        message = f"ZooKeeper error while syncing {path}: {type(exc).__name__} {exc}".strip()
        raise _temporary(ctx, rt, fx, "SyncFailed", message, backoff(retry)) from exc
    finally:
        ctx.metrics.reconcile_seconds.observe(time.monotonic() - started)


def _reconcile_or_take_over(ctx: Context, rt: GroupRuntime, fx: list[StepEffect], zk: KazooClient,
                            spec: ResourceGroupSpec, acl: list[ACL], placement: Placement) -> SyncResult:
    """:func:`reconcile_group` as the operator; with its identity, a group this object owns that an older
    operator created under the tenant's credentials (the operator's identity cannot change it) is first
    taken over on a short session of the group's own credentials (:func:`take_over_group`), then
    reconciled again."""
    assert rt.path is not None
    annotations = ((rt.body or {}).get("metadata") or {}).get("annotations") or {}

    def attempt() -> SyncResult:
        assert rt.path is not None
        return reconcile_group(
            zk, rt.path, desired=rt.desired, config=spec.group_config(rt.effective_interval()), acl=acl,
            owner=owner_marker(ctx, rt), confine=placement.root, identity=ctx.identity,
            adopt=annotations.get(ADOPT_ANNOTATION) == "true",
        )

    try:
        return attempt()
    except NoAuthError:
        if ctx.identity is None or not rt.session_credentials():
            raise
        taken = take_over_group(ctx, rt, acl)
        if taken is None:
            raise
    log.info("%s: took over %s from the tenant's credentials (%d znodes re-ACLed)", rt.user, rt.path, taken)
    fx.append(Emit("Normal", "TakenOver", f"{rt.path}: created by an earlier operator under the group's "
                                          f"credentials; {taken} znodes now name the operator's identity too"))
    return attempt()


def _synced(ctx: Context, rt: GroupRuntime, fx: list[StepEffect], spec: ResourceGroupSpec,
            result: SyncResult) -> None:
    """Records a sync that went through (:func:`~rebalanser_operator.controller.plan.plan_synced`):
    status, metrics, an Event, the workers' ConfigMap."""
    assert rt.path is not None
    path = rt.path
    ctx.metrics.reconciles.labels("ok").inc()
    ctx.metrics.resources_created.inc(result.created)
    ctx.metrics.resources_deleted.inc(result.deleted)
    log.info(
        "reconciled %s: %d resources (+%d -%d) in %.3fs", rt.user, result.resources, result.created,
        result.deleted, result.elapsed_seconds,
    )
    _record(rt, fx, plan_synced(rt.outcome, result, path, identity=ctx.identity is not None,
                                config=_worker_config_of(ctx, rt, spec, path), published=rt.published_config()))


def group_path(ctx: Context, rt: GroupRuntime, spec: ResourceGroupSpec) -> str:
    """The spec's path, or the default one: the group's name under the namespace's first path root."""
    return spec.group_path(rt.namespace, rt.name, ctx.tenancy.path_roots.default_path(rt.namespace, rt.name))


def owner_marker(ctx: Context, rt: GroupRuntime) -> OwnerMarker:
    """The marker this object puts on (and looks for on) its group root."""
    return OwnerMarker(rt.namespace, rt.name, rt.uid, ctx.tenancy.cluster_id)


def placement_of(ctx: Context, rt: GroupRuntime, spec: ResourceGroupSpec, path: str) -> Placement | Refusal:
    """Where the group may live under the administrator's settings, or why it may not (no I/O)."""
    refusal = ctx.tenancy.ensembles.check(spec.zookeeper.connect)
    if refusal is not None:
        return refusal
    return ctx.tenancy.path_roots.place(rt.namespace, spec.zookeeper.connect, path)


def _refused(ctx: Context, rt: GroupRuntime, fx: list[StepEffect], refusal: Refusal, *,
             retry_after: float | None = None) -> InvalidSpec | RetryLater:
    """A refused group recorded (:func:`~rebalanser_operator.controller.plan.plan_refusal`), as the
    exception the handler raises: permanent unless ``retry_after`` is given."""
    ctx.metrics.reconciles.labels("conflict" if refusal.reason == PATH_IN_USE else "refused").inc()
    _record(rt, fx, plan_refusal(rt.outcome, refusal))
    if retry_after is None:
        return InvalidSpec(refusal.message)
    return RetryLater(refusal.message, retry_after)


def refuse(ctx: Context, rt: GroupRuntime, refusal: Refusal) -> None:
    """Records a refused group (an Error status with the refusal's reason, a Warning Event when it is new)
    and carries its effects out at once (the status loop's own finding); the group is not this object's to
    read or act on."""
    fx: list[StepEffect] = []
    _refused(ctx, rt, fx, refusal)
    run_effects(ctx, rt, fx)


def _resume_grace(ctx: Context, rt: GroupRuntime, fx: list[StepEffect], zk: KazooClient, path: str,
                  credentials: DigestCredentials) -> None:
    """At this operator's first apply of the group: a root ACL naming other digests besides the
    current credentials is a grace period an earlier operator left unfinished; it starts over here."""
    try:
        data, _ = zk.get(path)
        current, _ = zk.get_acls(path)
    except NoNodeError:
        return
    marker = OwnerMarker.parse(data)
    mine = owner_marker(ctx, rt)
    if marker is None or not mine.uid or marker.uid != mine.uid or not mine.same_object(marker):
        return  # only this object's own root says what its own grace period kept
    rotate(ctx, rt, GraceFound(tuple(retained_digests(current, credentials, ctx.identity))), fx=fx)


def hold_grace(ctx: Context, zk: KazooClient, rt: GroupRuntime) -> int:
    """During a rotation's grace period (run on every status refresh): gives the group's ACL, naming
    both passwords, to the worker znodes created since the last pass by workers that have not yet
    noticed the new password (their nodes name only the old one); returns how many changed."""
    if rt.grace_until is None or rt.path is None or rt.acl is None:
        return 0
    try:
        migrated = migrate_worker_nodes_acl(zk, GroupPaths.of(rt.path), rt.acl, identity=ctx.identity)
    except NoAuthError:
        log.warning("%s: a worker znode refuses the operator's credentials; not re-ACLed", rt.user)
        return 0
    if migrated:
        log.info("%s: grace period: %d worker znodes now name both passwords", rt.user, migrated)
    return migrated


def refresh_facts(ctx: Context, rt: GroupRuntime, now: float) -> RefreshFacts:
    """What a refresh of the group finds before it plans (:func:`~rebalanser_operator.controller.plan.plan_refresh`):
    whether the namespace is being deleted (checked every ``period``, one API call per namespace shared
    by its groups: kopf stops serving a terminating namespace, see :mod:`farewell`), whether the object is
    still this one, a grace period over, a re-apply asked for, a session connected since the last apply
    found it not connected (never blocks)."""
    late = rt.connect_pending and rt.connect is not None and \
        ctx.pool.is_connected(rt.connect, rt.tls, rt.session_credentials())
    return RefreshFacts(
        terminating=ctx.namespace_terminating(rt.namespace, ctx.options.period), current=ctx.is_current(rt),
        grace_over=rt.grace_until is not None and now >= rt.grace_until,
        secrets_changed=rt.secrets_changed, connected_late=late,
    )


def end_grace(rt: GroupRuntime, now: float) -> bool:
    """Ends a rotation's grace period that is over at ``now`` and marks the group for re-applying (the
    status loop then re-ACLs it to the current credentials only); True if it did."""
    return bool(rotate(None, rt, Tick(), now=now))


#: Where worker pods mount the ResourceGroup's TLS Secret (published as REBALANSER_ZK_TLS_DIR).
WORKER_TLS_DIR = "/etc/rebalanser/zookeeper-tls"


def secret_changed(rt: GroupRuntime, secret: str, data: Mapping[str, str] | None) -> bool:
    """Whether Secret ``secret`` (its ``data`` as just observed) differs from the credentials or TLS
    material ``rt`` connects with. An unreadable Secret counts as changed (re-applying reports it)."""
    if rt.raw_spec is None:
        return False  # not applied yet: the first reconcile reads the Secret anyway
    return secret_differs(rt.rotation, SecretSeen.of(secret, data), rotation_facts(None, rt))


def take_secret(ctx: Context, rt: GroupRuntime, seen: SecretSeen, reapply: bool) -> bool:
    """The controller's step for a Secret read by the poll, planned in one call
    (:func:`~rebalanser_operator.controller.rotation.plan_secret`): keeps it as received and wakes the
    status loop when it changes the group's connection, then, with ``reapply``, re-applies the group
    there and then (:func:`resync_secrets`' re-apply, already planned). True if it changed the group. A
    group applied not yet, or deleted (or re-created) since the poll found it, is left alone."""
    if rt.raw_spec is None or not ctx.is_current(rt):
        return False  # not applied yet: the first reconcile reads the Secret anyway
    step = plan_secret(rt.rotation, seen, rotation_facts(ctx, rt), reapply=reapply)
    rt.rotation = step.state
    _run_kept(rt, step.effects)
    if step.resync is not None:
        _resync(ctx, rt, step.resync)
    return step.changed


def resync_secrets(ctx: Context, rt: GroupRuntime) -> None:
    """A step of the group's controller (a refresh's retry): re-applies the group after a rotation, as
    :func:`~rebalanser_operator.controller.rotation.plan_resync` plans it (:func:`_resync`)."""
    _resync(ctx, rt, plan_resync(rt.rotation, rotation_facts(ctx, rt)))


def _resync(ctx: Context, rt: GroupRuntime, plan: Resync) -> None:
    """A rotation's re-apply, as planned: a group in place is only re-keyed (:func:`rekey`), anything
    else is applied whole (the last spec, with the Secrets as received: a new TLS Secret means a new
    connection, new credentials become the group znodes' ACL). It never waits for a session: one not
    connected yet leaves the group marked, and the refresh tries again when it connects. On any failure
    the group stays marked for the next try."""
    rt.rotation = plan.started
    raw = rt.raw_spec
    if plan.how is Reapply.NONE or raw is None:
        return
    try:
        if plan.rekey is None or not carry_out(ctx, rt, rekey(ctx, rt, plan.rekey)):
            # The Secrets as the poll received them: used as they are, never read again.
            apply_step(ctx, rt, DesiredSpec.of(raw, generation=rt.generation, received=rt.rotation.received))
    except RetryLater as exc:
        rotate(ctx, rt, ReapplyFailed(plan.changed))
        log.info("%s: re-applying (%s) failed, will retry: %s", rt.user,
                 "a Secret changed" if plan.changed else "its session connected", exc)
    except InvalidSpec:
        pass
    else:
        if plan.changed:
            event(ctx, rt, "Normal", "SecretApplied",
                  f"applied the current contents of Secrets {sorted(rt.secrets())}")


def rekey(ctx: Context, rt: GroupRuntime, plan: Rekey) -> Stepped[bool]:
    """A rotation's re-apply of a group in place (:data:`~rebalanser_operator.controller.rotation.Reapply.REKEY`),
    as ``plan`` has it: its spec, place and root are this object's already, so nothing is parsed,
    admitted, adopted or synced again. The credentials and TLS material as received (else those in use),
    the session that holds them, the group's ACL on its root, containers and ``G/config`` (and, when it
    changed, on the resources and the workers' znodes), the workers' config. False, with nothing written
    to the group: its root is gone or no longer carries this object's marker (then it is applied whole).
    Like :func:`apply_desired`, it returns its effects for :func:`carry_out`."""
    fx: list[StepEffect] = []
    try:
        return Stepped(_rekey(ctx, rt, fx, plan), None, tuple(fx))
    except Exception as exc:  # raised by carry_out, after the effects
        return Stepped(None, exc, tuple(fx))


def _rekey(ctx: Context, rt: GroupRuntime, fx: list[StepEffect], plan: Rekey) -> bool:
    spec, path = rt.spec, rt.path
    assert spec is not None and path is not None
    if plan.unusable is not None:
        raise _temporary(ctx, rt, fx, *plan.unusable, backoff(0))
    rt.rotation = plan.read  # the session follows the credentials and TLS material now in use
    zk = _connect(ctx, rt, fx, spec, 0, rekey=True)
    paths = GroupPaths.of(path)
    with _sync_errors(ctx, rt, fx, path, 0):
        if not reacl_group(zk, paths, plan.acl, owner_marker(ctx, rt)):
            log.info("%s: %s is not as the last sync left it; applying the spec whole", rt.user, path)
            return False
        for effect in plan.effects:
            if isinstance(effect, MigrateWorkers):  # a rotation began or its grace period ended
                _migrate(ctx, rt, zk, paths, effect)
            elif isinstance(effect, Note):
                fx.append(effect)
    assert plan.synced is not None
    rt.outcome, rt.rotation = replace(rt.outcome, acl=plan.acl), plan.synced
    ctx.metrics.reconciles.labels("ok").inc()
    log.info("re-keyed %s: the group's ACL names %d digest(s)", rt.user,
             sum(1 for entry in plan.acl if entry.id.scheme == "digest"))
    # Synced again (an earlier re-key may have met its session connecting), the ConfigMap if it changed
    unchanged = SyncResult(0, 0, len(rt.desired), False, 0.0)
    _record(rt, fx, plan_synced(rt.outcome, unchanged, path, identity=ctx.identity is not None,
                                config=_worker_config_of(ctx, rt, spec, path), published=rt.published_config()))
    return True


def _group_found_at(ctx: Context, rt: GroupRuntime, spec: ResourceGroupSpec, path: str) -> bool:
    """Whether the new connect string reaches a ZooKeeper that already holds this group (the same
    ensemble under another name, or one the data was moved to). Unreachable counts as not found."""
    tls = rt.tls if spec.zookeeper.tls is not None else None  # the material in use (group roots are world-readable)
    zk = ctx.pool.acquire(spec.zookeeper.connect, f"{rt.user}#connect-check", spec.zookeeper.session_timeout_seconds,
                          tls=tls)
    waiting = False
    try:
        if not connected(ctx.pool, zk):
            return False
        data, _ = zk.get(GroupPaths.of(path).root)
        owner = OwnerMarker.parse(data)
        return owner is not None and owner_marker(ctx, rt).same_object(owner)
    except AwaitConnection:
        waiting = True  # the session stays open for the second attempt
        raise
    except (KazooException, KazooTimeoutError):
        return False
    finally:
        if not waiting:
            ctx.pool.release(f"{rt.user}#connect-check")


def config_map_name(name: str) -> str:
    """The ConfigMap the operator publishes for the workers of ResourceGroup ``name``."""
    return f"{name[:242]}-rebalanser"


def worker_config(spec: ResourceGroupSpec, namespace: str, name: str, path: str,
                  operator_id: str | None = None) -> dict[str, str]:
    """What a worker needs to join the group, as environment variables (``envFrom``); credentials only
    by the name of their Secret. ``operator_id``: the operator's identity (``digest:<user>:<hash>`` or
    ``x509:<subject>``), which the workers of a group with credentials name in the ACL of the nodes they
    create."""
    data = {
        "REBALANSER_ZK": spec.zookeeper.connect,
        "REBALANSER_GROUP": path,
        "REBALANSER_RESOURCE_GROUP": f"{namespace}/{name}",
    }
    if spec.zookeeper.credentials_secret is not None:
        data["REBALANSER_CREDENTIALS_SECRET"] = spec.zookeeper.credentials_secret
        if operator_id is not None:
            data["REBALANSER_ZK_OPERATOR_ID"] = operator_id
    if spec.zookeeper.tls is not None:
        # By reference only: the workers mount this Secret at WORKER_TLS_DIR.
        data["REBALANSER_ZK_TLS_SECRET"] = spec.zookeeper.tls.secret
        data["REBALANSER_ZK_TLS_DIR"] = WORKER_TLS_DIR
        if spec.zookeeper.tls.verify_hostname:
            data["REBALANSER_ZK_TLS_VERIFY_HOSTNAME"] = "true"
    return data


def _worker_config_of(ctx: Context, rt: GroupRuntime, spec: ResourceGroupSpec, path: str) -> dict[str, str]:
    return worker_config(spec, rt.namespace, rt.name, path, ctx.identity.acl_id if ctx.identity is not None else None)


def _publish(ctx: Context, rt: GroupRuntime, data: dict[str, str]) -> None:
    """Publishes the workers' ConfigMap (a :class:`PublishConfig` effect); a failure is reported, never
    fatal to the sync (it is published at the next sync)."""
    try:
        ctx.kube.publish_config(rt.namespace, config_map_name(rt.name), data, rt.body, stamp=rt.fence_stamp())
    except Exception as exc:
        log.warning("%s: cannot publish ConfigMap %s: %s", rt.user, config_map_name(rt.name), exc)
        event(ctx, rt, "Warning", "WorkerConfigNotPublished", f"ConfigMap {config_map_name(rt.name)}: {exc}")
        return
    rt.worker_config, rt.config_stamp = data, rt.fence_stamp()


def _temporary(ctx: Context, rt: GroupRuntime, fx: list[StepEffect], reason: str, message: str,
               delay: float) -> RetryLater:
    """A temporary failure recorded (:func:`~rebalanser_operator.controller.plan.plan_temporary`), as the
    exception the handler raises."""
    ctx.metrics.reconciles.labels("retry").inc()
    _record(rt, fx, plan_temporary(rt.outcome, reason, message))
    return RetryLater(message, delay)


def event(ctx: Context, rt: GroupRuntime, type: str, reason: str, message: str) -> None:
    if rt.body is None:
        return
    ctx.metrics.events.labels(reason).inc()
    ctx.kube.post_event(rt.body, type, reason, message)


def delete_znodes(
    ctx: Context,
    rt: GroupRuntime,
    raw_spec: Mapping[str, Any],
    *,
    annotations: Mapping[str, str],
    body: Mapping[str, Any] | None = None,
    retry: int = 0,
    elapsed: float = 0.0,
) -> str:
    """Hands the deletion to the group's controller and waits for the outcome (:func:`delete_desired`)."""
    deletion = Deletion.of(raw_spec, annotations=annotations, body=body, retry=retry, elapsed=elapsed)
    return ctx.controller_of(rt).delete(deletion)


def delete_desired(ctx: Context, rt: GroupRuntime, deletion: Deletion) -> str:
    """Removes the group's znodes unless told otherwise; returns what happened (for the log).

    ``elapsed`` is the time since the first attempt. While live members remain (for at most
    ``MEMBERS_LEAVE_WAIT_SECONDS``) it raises :class:`RetryLater`: workers deleted together with the
    ResourceGroup (a namespace deletion) leave within their grace period, and deleting the group under
    a live worker would only make it re-create its containers. Raises :class:`RetryLater` while
    ZooKeeper is unreachable, up to ``DELETE_GIVE_UP_SECONDS``; after that it gives up with a Warning
    Event so the object can still go away.
    """
    raw_spec, annotations, retry, elapsed = json.loads(deletion.spec_json), dict(deletion.annotations), \
        deletion.retry, deletion.elapsed
    body = json.loads(deletion.body_json) if deletion.body_json is not None else None
    rt.body = body if body is not None else rt.body
    if annotations.get(SKIP_CLEANUP) == "true":
        event(ctx, rt, "Warning", "ZooKeeperCleanupSkipped", f"{SKIP_CLEANUP}=true: znodes left untouched")
        return "skipped (annotation)"
    try:
        spec = ResourceGroupSpec.parse(raw_spec)
        path = group_path(ctx, rt, spec)
    except SpecError:
        return "nothing to delete (the spec was never valid)"
    placed = placement_of(ctx, rt, spec, path)
    if isinstance(placed, Refusal):  # never reconciled: nothing of it exists, and nothing is sent there
        return f"nothing to delete ({placed.reason}: {placed.message})"
    keep = annotations.get(KEEP_ZNODES) == "true"

    tls = rt.tls if spec.zookeeper.tls is not None else None
    if spec.zookeeper.tls is not None:
        try:
            tls = ctx.kube.read_tls(rt.namespace, spec.zookeeper.tls.secret,
                                   verify_hostname=spec.zookeeper.tls.verify_hostname, keys=spec.zookeeper.tls.keys)
        except CredentialsError as exc:  # e.g. deleted with its namespace: use what the last reconcile read
            log.warning("%s: %s; %s", rt.user, exc, "using the TLS material read earlier" if tls else "no TLS")
    credentials = rt.credentials
    if (ref := spec.zookeeper.credentials) is not None:
        try:
            credentials = ctx.kube.read_credentials(rt.namespace, ref.name, username_key=ref.username_key,
                                                    password_key=ref.password_key)
        except CredentialsError as exc:  # e.g. deleted with its namespace: use what the last reconcile read
            log.warning("%s: %s; %s", rt.user, exc,
                        "using the credentials read earlier" if credentials else "deleting without credentials")
    zk = ctx.pool.acquire(spec.zookeeper.connect, rt.user, spec.zookeeper.session_timeout_seconds, tls=tls,
                          credentials=(credentials,) if credentials is not None else ())
    owner = owner_marker(ctx, rt)
    try:
        if not connected(ctx.pool, zk):
            raise KazooTimeoutError(f"cannot connect to ZooKeeper at {spec.zookeeper.connect}")
        mine = _marked_for(zk, path, owner)
        if mine is None:
            return f"nothing to delete ({path} does not exist)"
        if not mine:
            return f"left {path}: it is not this ResourceGroup's"
        if keep:
            _release_marker(zk, path, owner)
            event(ctx, rt, "Normal", "ZnodesKept", f"{KEEP_ZNODES}=true: {path} kept")
            return f"kept {path} (annotation)"
        members = len(list_members(zk, GroupPaths.of(path)))
        if members and elapsed < MEMBERS_LEAVE_WAIT_SECONDS:
            if retry == 0:
                event(ctx, rt, "Normal", "WaitingForMembers",
                      f"{members} members still in {path}; deleting once they leave "
                      f"(at most {MEMBERS_LEAVE_WAIT_SECONDS:.0f}s)")
            raise RetryLater(f"{members} members still in {path}", MEMBERS_POLL_SECONDS)
        outcome = delete_group(zk, path, owner)
    except GroupOwnedElsewhereError:
        return f"left {path}: it is not this ResourceGroup's"
    except (KazooException, KazooTimeoutError, NotEmptyError) as exc:
        if keep:
            event(ctx, rt, "Normal", "ZnodesKept", f"{KEEP_ZNODES}=true: {path} kept")
            return f"kept {path} (annotation; its owner marker could not be released: {type(exc).__name__})"
        message = f"cannot delete {path}: {type(exc).__name__} {exc}".strip()
        if elapsed >= DELETE_GIVE_UP_SECONDS:
            event(ctx, rt, "Warning", "ZooKeeperCleanupAbandoned",
                  f"{message}; gave up after {elapsed:.0f}s ({retry + 1} attempts), znodes may remain")
            return f"gave up on {path}"
        if retry == 0:
            event(ctx, rt, "Warning", "ZooKeeperCleanupFailed",
                  f"{message}; retrying (set annotation {SKIP_CLEANUP}=true to delete without cleanup)")
        raise RetryLater(message, backoff(retry)) from exc
    deleted = outcome.deleted
    if outcome.left:
        shown = ", ".join(outcome.left[:5]) + (", ..." if len(outcome.left) > 5 else "")
        event(ctx, rt, "Warning", "ZnodesLeft",
              f"deleted the group's own znodes ({deleted}) but left {path} with children that are not a "
              f"group's: {shown}")
        return f"deleted the layout of {path} ({deleted} znodes), left {len(outcome.left)} unknown children"
    event(ctx, rt, "Normal", "ZnodesDeleted", f"deleted {path} ({deleted} znodes)")
    return f"deleted {path} ({deleted} znodes)"


def _marked_for(zk: KazooClient, path: str, owner: OwnerMarker) -> bool | None:
    """Whether the group root carries ``owner``'s marker (None: there is no root)."""
    try:
        data, _ = zk.get(GroupPaths.of(path).root)
    except NoNodeError:
        return None
    current = OwnerMarker.parse(data)
    return current is not None and owner.same_object(current)


def _release_marker(zk: KazooClient, path: str, owner: OwnerMarker) -> None:
    """Kept znodes: the marker is released, so that a ResourceGroup of the same namespace and name (in
    this cluster) may take the group over later, and nobody else."""
    root = GroupPaths.of(path).root
    data, stat = zk.get(root)
    current = OwnerMarker.parse(data)
    if current is not None and owner.same_object(current):
        zk.set(root, owner.released().to_json(), version=stat.version)
