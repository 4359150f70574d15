"""The shell of a replica's share (docs/operator-replicas.md): serving a ResourceGroup while this replica
owns it, keeping the operator group's resource list, and the deletion handler's wait.

Only with an operator group (:attr:`Replicas.enabled`); without one the handlers run as before.

* :func:`serve_while_owned` is the body of a group's status daemon: it waits until this replica owns
  the group, then creates its controller, applies the current spec from kopf's live body (a new owner
  does not wait for an event) and runs the status loop until the group is lost or the daemon stopped;
  then it lets the controller finish its step, forgets the group and tells :class:`Replicas` it stopped
  (the member's ``on_revoked`` waits for that before letting the claim go).
* :class:`ListKeeper` runs while the operator runs: when this replica is in office it makes the operator
  group's resources those of the ResourceGroups kopf's index holds (:meth:`Replicas.write_list`).
* :func:`wait_to_delete`: a replica that does not own a group being deleted waits, bounded, until it
  does, or the object is gone.

Each serving step writes one log line (``replica-serve``, ``replica-write``, ``replica-stop``) with the
replica, the group, the token and the wall-clock time: the evidence the tests read.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from rebalanser_operator.apply.actions import InvalidSpec, RetryLater, owner_marker
from rebalanser_operator.controller.messages import DesiredSpec
from rebalanser_operator.releaseclaim import ReleaseClaims
from rebalanser_operator.replicafence import fenced, served_by
from rebalanser_operator.replicas import Replicas
from rebalanser_operator.runtime import GroupRuntime, OperatorContext
from rebalanser_operator.status.view import Observation
from rebalanser_operator.statusloop import StatusLoop
from rebalanser_operator.zkfence import Fence

log = logging.getLogger(__name__)

#: The kopf index of every ResourceGroup (namespace, name), under this one key.
ALL = "all"
#: How often the replica in office compares the list even when nothing was reported.
LIST_RESYNC = 30.0
#: How often it also asks the API server for the groups (kopf re-lists after a watch's history expired
#: without reporting the objects deleted meanwhile, and its index keeps them).
LIST_PRUNE = 300.0
LIST_CHECK = 2.0
LIST_DEBOUNCE = 0.2
#: The pause before serving a group again whose serving ended while it was still owned.
RESERVE_PAUSE = 1.0
#: How long a deletion handler of a replica that does not own the group waits before kopf retries it.
DELETE_WAIT = 120.0
#: The status field where releases refused a group say why (written by them, never by the serving one).
REFUSED_RELEASES = "refusedReleases"


class ReplicaStatusLoop(StatusLoop):
    """The status loop of a group served by a replica (or under a release's claim): each status patch
    carries ``servedBy`` and is logged with the token, and is sent only while the replica still owns the
    group (``owned``, asked right before the patch: a refresh queued, or frozen half-way, when the group
    was lost writes nothing)."""

    def __init__(self, ctx: OperatorContext, rt: GroupRuntime, *, initial_status: Mapping[str, Any],
                 replica: str, token: int, owned: Callable[[], bool], release: str | None = None,
                 claim: int = 0) -> None:
        initial = {k: v for k, v in initial_status.items() if k != REFUSED_RELEASES}  # other releases' entries
        super().__init__(ctx, rt, initial_status=initial)
        # not "release": StatusLoop.release() lets a terminating namespace's group go
        self.replica, self.token, self.owned, self.release_name, self.claim = replica, token, owned, release, claim

    def status_extra(self) -> dict[str, Any]:
        return served_by(self.replica, self.token, self.release_name, self.claim)

    def may_patch(self) -> bool:
        if self.owned():
            return True
        log.info("replica-withheld member=%s group=%s/%s token=%d at=%.3f", self.replica, self.rt.namespace,
                 self.rt.name, self.token, time.time())
        return False

    def fenced(self, patch: dict[str, Any]) -> dict[str, Any]:
        return fenced(patch, self.replica, self.token, self.release_name, self.claim)

    def publish(self, obs: Observation) -> None:
        before = self.patches
        super().publish(obs)
        if self.patches != before:
            log.info("replica-write member=%s group=%s/%s token=%d at=%.3f phase=%s release=%s", self.replica,
                     self.rt.namespace, self.rt.name, self.token, time.time(), self.published.get("phase"),
                     self.release_name or "-")


def _member(replicas: Replicas, claims: ReleaseClaims | None) -> str:
    """The name this replica serves under: its member id, or without an operator group its release's holder."""
    return replicas.member_id if replicas.enabled or claims is None else claims.holder


async def serve_while_owned(
    ctx: OperatorContext, replicas: Replicas, *, body: Mapping[str, Any], ref: Mapping[str, Any],
    namespace: str, name: str, uid: str, stopped: Callable[[], bool],
    catch_up: Callable[[], Awaitable[object]] | None = None, claims: ReleaseClaims | None = None,
) -> None:
    """Serves the group whenever this replica owns it (and, with ``claims``, this release holds it), until
    ``stopped()`` (the daemon's end). ``catch_up``: run at each gain, beside the status loop (the failover
    of worker deaths reported while nobody served the group)."""
    first = True
    while not stopped():
        token = await replicas.until_owned(namespace, name, stopped)
        if token is None:
            return
        claim, apply = 0, True
        if claims is not None:
            def not_owned(held: int = token) -> bool:
                return stopped() or not replicas.owns(namespace, name) or replicas.token(namespace, name) != held

            def event(type_: str, reason: str, message: str) -> None:
                ctx.kube.post_event(ref, type_, reason, message)

            taken = await claims.acquire(ctx.executor, namespace, name, replica=_member(replicas, claims),
                                         token=token, stopped=not_owned, event=event)
            if taken is None:
                if not stopped() and replicas.owns(namespace, name):
                    await asyncio.sleep(RESERVE_PAUSE)  # the object gone: its daemon ends soon
                continue
            # One operator of a release finding its own claim at its start: kopf's resume handler applies the
            # spec, and its pod watch sees every pod
            claim, apply = taken[0], replicas.enabled or taken[1] or not first
        first = False
        await _serve_once(ctx, replicas, body=body, ref=ref, namespace=namespace, name=name, uid=uid,
                          stopped=stopped, token=token, catch_up=catch_up if apply else None, claims=claims,
                          claim=claim, apply=apply)
        if not stopped() and replicas.owns(namespace, name):
            await asyncio.sleep(RESERVE_PAUSE)  # ended while owned (the object gone or replaced): not in a tight loop


async def _serve_once(
    ctx: OperatorContext, replicas: Replicas, *, body: Mapping[str, Any], ref: Mapping[str, Any],
    namespace: str, name: str, uid: str, stopped: Callable[[], bool], token: int,
    catch_up: Callable[[], Awaitable[object]] | None, claims: ReleaseClaims | None = None, claim: int = 0,
    apply: bool = True,
) -> None:
    member = _member(replicas, claims)
    wakes: list[Callable[[], None]] = []
    # Registered first, and only while still owned with this token (Replicas.serving checks it under the lock
    # its revocation takes): a group lost since until_owned found it (or during the release's claim) was let
    # go without waiting for a loop that had not started, and must not be served now.

    def wake() -> None:
        for each in wakes:
            each()

    serving = replicas.serving(namespace, name, token, wake)
    if serving is None:
        log.info("replica-late member=%s group=%s/%s token=%d at=%.3f", member, namespace, name, token, time.time())
        return
    log.info("replica-serve member=%s group=%s/%s token=%d at=%.3f release=%s claim=%d", member, namespace, name,
             token, time.time(), claims.me if claims is not None else "-", claim)
    controller = ctx.controller(namespace, name, uid)
    if replicas.enabled or claims is not None:  # its ZooKeeper writes carry the token too (before any step)
        controller.rt.fence = Fence(member, token, ours=owner_marker(ctx, controller.rt).marks, claim=claim)
    controller.introduce(ref)

    def owned() -> bool:
        if stopped() or not replicas.owns(namespace, name) or replicas.token(namespace, name) != token:
            return False
        return claims is None or claims.still_ours(body.get("status"), claim)

    loop = ReplicaStatusLoop(ctx, controller.rt, initial_status=dict(body.get("status") or {}),
                             replica=member, token=token, owned=owned,
                             release=claims.me if claims is not None else None, claim=claim)
    wakes.append(loop.wake)
    if claims is not None:
        claims.serving(namespace, name, True)
    # The token is stored before this replica's first status write; the spec's apply and the failover's
    # catch-up (ZooKeeper, not the status) do not wait for it.
    registering = asyncio.create_task(_register_token(ctx, member, namespace, name, token, owned, claims=claims,
                                                      claim=claim))
    applying = asyncio.create_task(_apply_current(ctx, controller, body, ref, owned) if apply else asyncio.sleep(0))
    catching = asyncio.create_task(_guarded(catch_up(), f"catching up on {namespace}/{name}")) if catch_up else None
    try:
        await registering
        await loop.run(should_stop=lambda: not owned() or not ctx.is_current(controller.rt))
    finally:
        registering.cancel()
        applying.cancel()
        if catching is not None:
            catching.cancel()
        try:
            await asyncio.wrap_future(controller.submit(lambda: None))  # the step under way ends first
        finally:
            if not stopped() and ctx.is_current(controller.rt):
                ctx.forget(namespace, name)  # lost: nothing of the group stays here (a newer object's is kept)
            log.info("replica-stop member=%s group=%s/%s token=%d at=%.3f", member, namespace, name, token,
                     time.time())
            if claims is not None:
                claims.serving(namespace, name, False)
            serving.done()


async def _register_token(ctx: OperatorContext, replica: str, namespace: str, name: str, token: int,
                          owned: Callable[[], bool], *, claims: ReleaseClaims | None = None, claim: int = 0) -> None:
    """Stores this owner's token in the group's status at its gain, before its first status write: from
    then on the admission policy refuses every status write of an earlier owner (one thawed after a freeze,
    or whose patch was on its way), instead of from the new owner's first full status, a reconcile later.
    Sent only while the group is still this replica's with this token (a group lost meanwhile, the patch
    would name a replica that no longer serves it)."""
    if not owned():
        return
    loop = asyncio.get_running_loop()
    context = contextvars.copy_context()
    release = claims.me if claims is not None else None
    try:
        await loop.run_in_executor(ctx.executor, context.run, ctx.kube.patch_status, namespace, name,
                                   served_by(replica, token, release, claim))
    except Exception as exc:  # refused (a later owner's token is stored) or unreachable: the loop decides
        log.warning("replica %s: storing token %d in %s/%s failed: %s", replica, token, namespace, name, exc)
        return
    log.info("replica-fence member=%s group=%s/%s token=%d at=%.3f", replica, namespace, name, token, time.time())


async def _apply_current(ctx: OperatorContext, controller: Any, body: Mapping[str, Any], ref: Mapping[str, Any],
                         owned: Callable[[], bool]) -> None:
    """Applies the live body's spec, retrying as kopf would, while the group is owned (never raises).
    Not in a namespace being deleted: its group goes with it (the status loop's release), and an apply
    after that release, before the namespace's deletion reaches the object, would create the group's
    znodes again, with nobody left to delete them."""
    retry = 0
    loop = asyncio.get_running_loop()
    while owned():
        meta = body.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            return  # its deletion handler does the rest
        namespace = controller.rt.namespace
        if await loop.run_in_executor(ctx.executor, ctx.namespace_terminating, namespace, ctx.options.period):
            log.info("%s/%s: its namespace is being deleted: the spec is not applied", namespace, controller.rt.name)
            return
        status = body.get("status") or {}
        desired = DesiredSpec.of(
            dict(body.get("spec") or {}), generation=meta.get("generation"), body=ref, retry=retry,
            seed_interval=status.get("effectiveIntervalSeconds"), recorded_path=status.get("zookeeperPath"),
            recorded_connect=status.get("zookeeperConnect"),
        )
        try:
            await controller.apply_async(desired)
            return
        except InvalidSpec as exc:
            log.warning("%s/%s: %s", ref.get("metadata", {}).get("namespace"), ref.get("metadata", {}).get("name"),
                        exc)
            return
        except RetryLater as exc:
            await asyncio.sleep(exc.delay)
        except Exception:
            log.exception("applying the spec of %s at its gain failed", controller.rt.user)
            await asyncio.sleep(5.0)
        retry += 1


async def _guarded(work: Awaitable[object], what: str) -> None:
    try:
        await work
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("%s failed", what)


def index_entry(namespace: str | None, name: str) -> dict[str, tuple[str, str]] | None:
    """The kopf index function's value: every ResourceGroup under :data:`ALL`."""
    if namespace is None:
        return None
    return {ALL: (namespace, name)}


def admission_entry(namespace: str | None, name: str, created: str | None) -> dict[str, tuple[str, str]] | None:
    """The kopf index of every ResourceGroup by namespace, with its creation time (the admission's order)."""
    if namespace is None:
        return None
    return {namespace: (created or "", name)}


def within_limit(groups: Iterable[tuple[str, str]], name: str, limit: int) -> bool | None:
    """Whether ``name`` is among the ``limit`` oldest of a namespace's ``groups`` ((creationTimestamp,
    name) pairs; equal times by name): the same verdict on every replica. None when ``name`` is not
    among them (a watch that has not seen it yet)."""
    ordered = sorted(groups)
    names = [n for _, n in ordered]
    if name not in names:
        return None
    return names.index(name) < limit


class Admission:
    """``--max-groups-per-namespace`` over every ResourceGroup of the namespace, as kopf's index holds them,
    instead of over this replica's share (each replica would otherwise admit up to the limit of its own)."""

    def __init__(self) -> None:
        self.index: Mapping[str, Iterable[tuple[str, str]]] | None = None

    def admits(self, namespace: str, name: str, limit: int) -> bool | None:
        """Called on the operator's threads; the index changes on kopf's event loop, so a read that meets a
        change is made again (None, after three: the replica's own count decides)."""
        index = self.index
        if index is None:
            return None
        for _ in range(3):
            try:
                groups = list(index.get(namespace, ()))
            except RuntimeError:  # changed during the read
                continue
            return within_limit(groups, name, limit)
        return None


def live_only(groups: Iterable[tuple[str, str]], live: Mapping[str, set[str]]) -> list[tuple[str, str]]:
    """The (namespace, name) pairs the API server still lists; a namespace it was not asked about, or did
    not answer for, keeps its own."""
    return [(ns, name) for ns, name in groups if ns not in live or name in live[ns]]


class ListKeeper:
    """Keeps the operator group's resources equal to the ResourceGroups kopf's index holds, while this
    replica is in office. :meth:`seen` is called on kopf's event loop with the index (after kopf has
    filled it from its first listing: no list is written from a partial view)."""

    def __init__(self, ctx: OperatorContext, replicas: Replicas) -> None:
        self.ctx, self.replicas = ctx, replicas
        self._index: Mapping[str, Iterable[tuple[str, str]]] | None = None
        self._changed: asyncio.Event | None = None

    def seen(self, index: Mapping[str, Iterable[tuple[str, str]]]) -> None:
        self._index = index
        if self._changed is not None:
            self._changed.set()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        self._changed = asyncio.Event()
        in_office, last, pruned = False, -1e9, time.monotonic()
        while True:
            try:
                await asyncio.wait_for(self._changed.wait(), LIST_CHECK)
                woken = True
            except TimeoutError:
                woken = False
            if woken:
                await asyncio.sleep(LIST_DEBOUNCE)
                self._changed.clear()
            now = self.replicas.in_office()
            if self._index is None or not now:
                in_office = False
                continue
            prune = time.monotonic() - pruned > LIST_PRUNE
            if woken or not in_office or prune or time.monotonic() - last > LIST_RESYNC:
                groups = list(self._index.get(ALL, ()))
                context = contextvars.copy_context()
                try:
                    if prune:  # the API server's own list, now and then: kopf's index keeps a missed deletion
                        live = await loop.run_in_executor(self.ctx.executor, context.run, self._live,
                                                          {ns for ns, _ in groups})
                        groups, pruned = live_only(groups, live), time.monotonic()
                    await loop.run_in_executor(self.ctx.executor, context.run, self.replicas.write_list, groups)
                except Exception:
                    log.exception("replica %s: keeping the operator group's resources failed", self.replicas.member_id)
                    continue
                in_office, last = True, time.monotonic()

    def _live(self, namespaces: Iterable[str]) -> dict[str, set[str]]:
        """The names of each namespace's ResourceGroups as the API server lists them now (a namespace it
        does not answer for is left out)."""
        live: dict[str, set[str]] = {}
        for namespace in sorted(namespaces):
            try:
                bodies = self.ctx.kube.list_groups(namespace)
            except Exception as exc:
                log.debug("listing the ResourceGroups of %s failed: %s", namespace, exc)
                continue
            live[namespace] = {str((b.get("metadata") or {}).get("name")) for b in bodies}
        return live


async def wait_to_delete(ctx: OperatorContext, replicas: Replicas, namespace: str, name: str, uid: str) -> bool:
    """For a deletion handler: True once this replica owns the group (it deletes), False when the object
    is gone (its owner deleted it); raises :class:`RetryLater` after :data:`DELETE_WAIT`."""
    deadline = time.monotonic() + DELETE_WAIT
    loop = asyncio.get_running_loop()
    while True:
        if replicas.owns(namespace, name):
            return True
        try:  # this one object (a list per group, with thousands deleted at once, is their number squared)
            body = await loop.run_in_executor(ctx.executor, ctx.kube.get_group, namespace, name)
        except Exception as exc:  # an API hiccup: ask again at the next turn
            log.debug("reading ResourceGroup %s/%s failed: %s", namespace, name, exc)
            body = {"metadata": {"uid": uid}}
        if body is None or (body.get("metadata") or {}).get("uid") != uid:
            return False
        if time.monotonic() > deadline:
            raise RetryLater(f"{namespace}/{name} is served by another operator replica; waiting for its deletion",
                             delay=5.0)
        token = await replicas.until_owned(namespace, name, _after(min(deadline, time.monotonic() + 2.0)), poll=2.0)
        if token is not None:
            return True


def _after(instant: float) -> Callable[[], bool]:
    """True once the monotonic clock has passed ``instant``."""
    return lambda: time.monotonic() >= instant
