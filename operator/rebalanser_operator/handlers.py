"""kopf handlers: thin adapters from kopf's callbacks to :mod:`actions` and :mod:`statusloop`.

``build_registry(ctx)`` returns a registry with:

* create / update (``spec`` only) / resume  -> the group's controller (:mod:`controller`), a
  :class:`~controller.messages.DesiredSpec`; kopf's retries follow the controller's answer
* delete (holds the ``rebalanser.io/finalizer``) -> the group's controller, a
  :class:`~controller.messages.Deletion`
* one daemon per ResourceGroup              -> :class:`statusloop.StatusLoop`, the controller's shell
* Secrets are never listed or watched: :mod:`secretpoll` re-reads the ones ResourceGroups reference, by
  name, every ``secret_poll`` seconds; a change is re-applied by the group's own step
  (:func:`actions.take_secret`; its status loop retries one that did not go through), with no
  restart and no spec change
* only with ``watch_pods`` (the chart's ``failover.enabled``): pod events (terminated container
  instances) -> :class:`podwatch.Failover` for the groups that opted in to
  ``spec.failover: KubeletConfirmed`` (a kopf index of them by namespace)
* login via the official client, a liveness probe, cleanup of ZooKeeper connections;
* on shutdown, when the operator's own namespace is being deleted, :mod:`farewell` releases that
  namespace's ResourceGroups (nobody else would).

``operator_settings()`` keeps every kopf artefact in the project's own domain and sets the watch
timeouts (silent stalls of watch streams are a known kopf/API-server failure mode).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import socket
import time
from collections.abc import Callable, Mapping
from typing import Any

import kopf

from rebalanser_operator.apply.actions import InvalidSpec, RetryLater
from rebalanser_operator.apply.farewell import release_terminating_namespace
from rebalanser_operator.apply.secretpoll import DEFAULT_INTERVAL, poll_forever
from rebalanser_operator.controller.messages import Deletion, DesiredSpec
from rebalanser_operator.diffbase import SpecDigestStorage
from rebalanser_operator.failover.choice import ended_instances
from rebalanser_operator.podwatch import Failover, OptedIn, index_entry
from rebalanser_operator.readiness import serve as serve_readiness
from rebalanser_operator.releaseclaim import ReleaseClaims
from rebalanser_operator.replicas import Replicas
from rebalanser_operator.replicaserve import (
    DELETE_WAIT,
    Admission,
    ListKeeper,
    admission_entry,
    serve_while_owned,
    wait_to_delete,
)
from rebalanser_operator.replicaserve import index_entry as replica_index_entry
from rebalanser_operator.runtime import EXECUTOR_THREADS, OperatorContext
from rebalanser_operator.spec.models import FINALIZER, GROUP, PLURAL, VERSION
from rebalanser_operator.status.rollout import rolling_out
from rebalanser_operator.statusloop import StatusLoop

#: How long shutdown may spend releasing the ResourceGroups of the operator's own terminating namespace
#: (the chart's terminationGracePeriodSeconds is longer).
FAREWELL_SECONDS = 40.0
ANNOTATION_PREFIX = "rebalanser.io"


def operator_settings(handled: Callable[[kopf.Body], bool] | None = None) -> kopf.OperatorSettings:
    """``handled``: whether this replica serves a group (:func:`handled_here`), so that kopf stores the last
    handled spec of the groups it serves only (:mod:`diffbase`)."""
    settings = kopf.OperatorSettings()
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=ANNOTATION_PREFIX)
    # A digest of the last handled spec, not a copy: annotations are limited to 256 KiB in all.
    settings.persistence.diffbase_storage = SpecDigestStorage(prefix=ANNOTATION_PREFIX, handled=handled)
    # Watch streams: end each request server-side, cap it client-side, reconnect when silent.
    settings.watching.server_timeout = 240
    settings.watching.client_timeout = 270
    settings.watching.connect_timeout = 10
    settings.watching.inactivity_timeout = 70
    settings.networking.request_timeout = 30
    settings.networking.connect_timeout = 10
    settings.posting.reporting_component = "rebalanser-operator"
    settings.posting.reporting_instance = socket.gethostname()
    settings.posting.event_name_prefix = "rebalanser-"
    settings.posting.level = logging.INFO
    settings.execution.max_workers = EXECUTOR_THREADS
    settings.background.cancellation_polling = 5
    return settings


def object_ref(body: Mapping[str, Any]) -> dict[str, Any]:
    """The parts of a body kopf needs to post an Event about it."""
    meta = body.get("metadata", {})
    return {
        "apiVersion": body.get("apiVersion"),
        "kind": body.get("kind"),
        "metadata": {key: meta.get(key) for key in ("name", "namespace", "uid")},
    }


def handled_here(replicas: Replicas, claims: ReleaseClaims | None) -> Callable[[kopf.Body], bool] | None:
    """Whether this replica serves a group's body: owned here and, with release claims, held by this release
    (None: one operator without a release serves every group)."""
    if not replicas.enabled and claims is None:
        return None

    def handled(body: kopf.Body) -> bool:
        meta = body.get("metadata") or {}
        if not replicas.owns(str(meta.get("namespace") or ""), str(meta.get("name") or "")):
            return False
        return claims is None or claims.holds(body.get("status"))

    return handled


def replica_ready(share: Replicas, claims: ReleaseClaims | None) -> tuple[bool, str]:
    """The readiness of a replica: its membership of the operator group in good standing, and, with a release
    identity, its release's heartbeat renewed (a replica that cannot renew it serves nothing)."""
    ok, text = share.ready()
    if claims is not None and not claims.fresh():
        return False, f"{text}; the heartbeat of release {claims.me} is not renewed: serving nothing"
    return ok, text


def build_registry(
    ctx: OperatorContext, own_namespace: str | None = None, *, watch_pods: bool = True,
    secret_poll: float = DEFAULT_INTERVAL, replicas: Replicas | None = None, readiness: str = "",
    claims: ReleaseClaims | None = None,
) -> kopf.OperatorRegistry:
    """``own_namespace``: the operator pod's namespace when it also serves it (see :mod:`farewell`).
    ``watch_pods``: register the pod watch for ``spec.failover: KubeletConfirmed`` (the chart's RBAC
    grants pods only with ``failover.enabled``). ``secret_poll``: seconds between re-reads of the
    referenced Secrets. ``replicas``: this replica's share of the groups (docs/operator-replicas.md;
    None: every group, as one operator). ``readiness``: the URL of the replica's readiness endpoint
    (:mod:`readiness`; '' for none). ``claims``: this release's claims (:mod:`releaseclaim`; None: no
    release identity, every group of the served namespaces is served as before)."""
    registry = kopf.OperatorRegistry()
    poller: list[asyncio.Task[None]] = []
    share = replicas if replicas is not None else Replicas.single()

    @kopf.on.startup(id="secrets", registry=registry)
    async def start_secret_poll(**_: Any) -> None:
        poller.append(asyncio.create_task(poll_forever(ctx, ctx.kube.secret_data, secret_poll)))

    def owned(namespace: str | None, name: str, status: kopf.Status | None = None, **_: Any) -> bool:
        return share.owns(namespace or "", name) and (claims is None or claims.holds(status))

    def serves(namespace: str, name: str) -> bool:
        """Whether this replica acts for the group now (its pods' deaths, a catch-up)."""
        return share.owns(namespace, name) and (claims is None or claims.serves(namespace, name))

    # kopf is blind to a change of a group another replica owns, or another release holds: it runs nothing
    # and stores nothing
    owned_only = owned if share.enabled or claims is not None else None

    @kopf.on.login(id="login", registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        return kopf.login_via_client(**kwargs)

    @kopf.on.probe(id="zookeeperConnections", registry=registry)
    async def probe(**_: Any) -> int:
        # On the event loop, not in the executor: a liveness check must not queue behind slow reconciles.
        return ctx.pool.connections()

    if share.enabled:
        @kopf.on.probe(id="operatorGroup", registry=registry)
        async def operator_group(**_: Any) -> str:
            """This replica's membership of the operator group (Assigned, Suspended...) and its share."""
            return share.describe()

    @kopf.on.cleanup(id="cleanup", registry=registry)
    def cleanup(logger: kopf.Logger, **_: Any) -> None:
        try:
            if own_namespace:
                deadline = time.monotonic() + FAREWELL_SECONDS
                outcomes = release_terminating_namespace(ctx, own_namespace, FINALIZER, deadline=deadline)
                if outcomes:
                    logger.info("namespace %s is being deleted; released: %s", own_namespace, outcomes)
        except Exception:
            logger.exception("could not release the ResourceGroups of namespace %s", own_namespace)
        finally:
            for task in poller:
                task.cancel()
            share.stop()  # a graceful leave: the groups still served here stop before their claims go
            ctx.close()

    @kopf.on.resume(GROUP, VERSION, PLURAL, id="reconcile", registry=registry, when=owned_only)
    @kopf.on.create(GROUP, VERSION, PLURAL, id="reconcile", registry=registry, when=owned_only)
    @kopf.on.update(GROUP, VERSION, PLURAL, id="reconcile", field="spec", registry=registry, when=owned_only)
    async def reconcile(
        spec: kopf.Spec, meta: kopf.Meta, status: kopf.Status, body: kopf.Body,
        namespace: str | None, name: str, uid: str, retry: int, **_: Any,
    ) -> None:
        desired = DesiredSpec.of(
            dict(spec), generation=meta.get("generation"), body=object_ref(body), retry=retry,
            seed_interval=status.get("effectiveIntervalSeconds"), recorded_path=status.get("zookeeperPath"),
            recorded_connect=status.get("zookeeperConnect"),
        )
        try:  # on the event loop: no thread of kopf's or the operator's waits for ZooKeeper or for a turn
            await ctx.controller(namespace or "", name, uid).apply_async(desired)
        except InvalidSpec as exc:
            raise kopf.PermanentError(str(exc)) from exc
        except RetryLater as exc:
            raise kopf.TemporaryError(str(exc), delay=exc.delay) from exc

    @kopf.on.delete(GROUP, VERSION, PLURAL, id="cleanup-znodes", registry=registry)
    async def delete(
        spec: kopf.Spec, meta: kopf.Meta, body: kopf.Body, namespace: str | None, name: str, uid: str, retry: int,
        runtime: datetime.timedelta, logger: kopf.Logger, **_: Any,
    ) -> None:
        # Not filtered: kopf would release the finalizer of a group another replica is deleting.
        try:
            if share.enabled and not await wait_to_delete(ctx, share, namespace or "", name, uid):
                return  # gone: its owner deleted it
            if claims is not None and not await claimed_to_delete(namespace or "", name, object_ref(body)):
                return  # gone: the release that held it deleted it
        except RetryLater as exc:
            raise kopf.TemporaryError(str(exc), delay=exc.delay) from exc
        deletion = Deletion.of(dict(spec), annotations=dict(meta.annotations), body=object_ref(body), retry=retry,
                               elapsed=runtime.total_seconds())
        try:
            outcome = await ctx.controller(namespace or "", name, uid).delete_async(deletion)
        except RetryLater as exc:
            raise kopf.TemporaryError(str(exc), delay=exc.delay) from exc
        logger.info("deletion: %s", outcome)
        ctx.forget(namespace or "", name)

    async def claimed_to_delete(namespace: str, name: str, ref: Mapping[str, Any]) -> bool:
        """With release claims: True once this release holds the group (it deletes it), False when the object
        is gone; RetryLater while another live release holds it."""
        assert claims is not None
        deadline = time.monotonic() + DELETE_WAIT

        def event(type_: str, reason: str, message: str) -> None:
            ctx.kube.post_event(ref, type_, reason, message)

        member = share.member_id if share.enabled else claims.holder
        held = await claims.acquire(ctx.executor, namespace, name, replica=member,
                                     token=share.token(namespace, name) or 0,
                                     stopped=lambda: time.monotonic() > deadline, event=event)
        if held is not None:
            return True
        if time.monotonic() > deadline:
            raise RetryLater(f"{namespace}/{name} is served by another operator release; waiting for its deletion",
                             delay=5.0)
        return False

    @kopf.daemon(
        GROUP, VERSION, PLURAL, id="status", registry=registry, cancellation_backoff=1.0, cancellation_timeout=10.0
    )
    async def mirror_status(
        status: kopf.Status, body: kopf.Body, namespace: str | None, name: str, uid: str,
        stopped: kopf.DaemonStopped, **kwargs: Any,
    ) -> None:
        if share.enabled or claims is not None:  # serves the group whenever this replica (release) holds it
            index: kopf.Index[str, OptedIn] = kwargs["failover_groups"]
            await serve_while_owned(ctx, share, body=body, ref=object_ref(body), namespace=namespace or "", name=name,
                                    uid=uid, stopped=lambda: bool(stopped),
                                    catch_up=lambda: catch_up_failover(namespace or "", name, index), claims=claims)
            return
        controller = ctx.controller(namespace or "", name, uid)
        controller.introduce(object_ref(body))
        loop = StatusLoop(ctx, controller.rt, initial_status=dict(status))

        async def wake_when_stopped() -> None:
            await stopped.wait()
            loop.wake()

        waker = asyncio.create_task(wake_when_stopped())
        try:
            await loop.run(should_stop=lambda: bool(stopped) or not ctx.is_current(controller.rt))
        finally:
            waker.cancel()

    failover = Failover(ctx)
    ctx.watch_pods = watch_pods

    @kopf.index(GROUP, VERSION, PLURAL, id="failover_groups", registry=registry)
    def failover_groups(spec: kopf.Spec, namespace: str | None, name: str, **_: Any) -> dict[str, OptedIn] | None:
        return index_entry(namespace, name, dict(spec))

    def reports_ended_instance(body: kopf.Body, **_: Any) -> bool:
        return bool(ended_instances(body))

    async def pod_event(body: kopf.Body, namespace: str | None, **kwargs: Any) -> None:
        index: kopf.Index[str, OptedIn] = kwargs["failover_groups"]
        opted_in = [group for group in index.get(namespace or "", ()) if serves(namespace or "", group.name)]
        if opted_in:
            await failover.handle_pod(body, opted_in)

    if share.enabled:
        keeper = ListKeeper(ctx, share)
        admission = Admission()
        ctx.admission = admission.admits

        @kopf.index(GROUP, VERSION, PLURAL, id="replica_groups", registry=registry)
        def replica_groups(namespace: str | None, name: str, **_: Any) -> dict[str, tuple[str, str]] | None:
            return replica_index_entry(namespace, name)

        @kopf.index(GROUP, VERSION, PLURAL, id="replica_admission", registry=registry)
        def replica_admission(
            namespace: str | None, name: str, meta: kopf.Meta, **_: Any
        ) -> dict[str, tuple[str, str]] | None:
            return admission_entry(namespace, name, meta.get("creationTimestamp"))

        @kopf.on.event(GROUP, VERSION, PLURAL, id="replica_list", registry=registry)
        async def replica_list(**kwargs: Any) -> None:
            keeper.seen(kwargs["replica_groups"])  # kopf has filled the index from its first listing
            admission.index = kwargs["replica_admission"]

        @kopf.on.startup(id="replica_list", registry=registry)
        async def start_list_keeper(**_: Any) -> None:
            poller.append(asyncio.create_task(keeper.run()))
            if readiness:
                poller.append(asyncio.create_task(serve_readiness(readiness, lambda: replica_ready(share, claims))))

    async def catch_up_failover(namespace: str, name: str, index: kopf.Index[str, OptedIn]) -> None:
        """A replica that gains a group with KubeletConfirmed fails over the ended instances the pods of its
        namespace report now: those reported while nobody served the group were acted on by nobody."""
        opted_in = [group for group in index.get(namespace, ()) if group.name == name]
        if not watch_pods or not opted_in:
            return
        loop = asyncio.get_running_loop()
        pods = await loop.run_in_executor(ctx.executor, ctx.kube.list_pods, namespace)
        for pod in pods:
            if ended_instances(pod) and serves(namespace, name):
                await failover.handle_pod(pod, opted_in)

    if watch_pods:
        kopf.on.event("", "v1", "pods", id="failover", when=reports_ended_instance, registry=registry)(pod_event)

    def named_by_a_group(kind: str) -> Any:
        """Only the workloads some ResourceGroup names (``spec.workload``) reach the handler."""

        def check(namespace: str | None, name: str, **_: Any) -> bool:
            return ctx.names_workload(namespace or "", kind, name)

        return check

    # Rollout-aware tuning: each change of a named workload is seen as it happens (no polling).
    for kind, plural in (("Deployment", "deployments"), ("StatefulSet", "statefulsets")):
        async def seen(body: kopf.Body, namespace: str | None, name: str, _kind: str = kind, **_: Any) -> None:
            ctx.workload_seen(namespace or "", _kind, name, rolling_out(_kind, body))

        kopf.on.event("apps", "v1", plural, id=f"rollouts-{plural}", when=named_by_a_group(kind),
                      registry=registry)(seen)

    return registry
