"""One operator release per ResourceGroup (docs/operator-replicas.md, "Two releases").

Two releases of the operator (two installs of the chart, or any two operators started with different
``--release``) that serve the same namespace would otherwise both apply every ResourceGroup of it, both
mirror its status and both fail its workers over. Instead each group is *claimed* by one release, and
another release that finds it claimed by a live one does nothing for it but say so.

    claims = ReleaseClaims(ReleaseApi(api_client), Release.parse("ops/rebalanser-operator"), holder=pod_name)
    claims.renew()                                  # the release's heartbeat, a Lease (blocking)
    claim = await claims.acquire(...)               # the group's claim number, or None (stopped / gone)
    claims.holds(body["status"])                    # True only while the claim is this release's

* **The claim** is ``status.servedBy.release`` with ``status.servedBy.claim``, a number that grows each
  time the group passes to another release. Only operators write a ResourceGroup's status (tenants'
  ``edit`` role does not reach ``resourcegroups/status``), so nothing a tenant writes can name a release.
  A claim is taken with the object's ``resourceVersion`` as a precondition: of two releases taking a free
  group at once, one wins and the other reads the winner's claim.
* **A release is live** while its heartbeat, the Lease named after the release in the release's
  namespace, was renewed within its ``leaseDurationSeconds``. Each replica of the release renews it every
  quarter of that. A release whose Lease is gone (uninstalled) or has expired holds no claim: another
  release serving the namespace takes its groups over (claim + 1). One whose Lease cannot be read counts
  as live (never shared by doubt).
* **A refused release** writes ``status.refusedReleases[<release>]`` (reason ``ServedByAnotherRelease``,
  a message naming the release that serves the group) and a Warning Event, once per other release, and
  looks again every few seconds. When it takes the group over it removes its entry.
* **Self-fencing.** A replica whose own renewals have failed for three quarters of the lease stops
  serving (:meth:`ReleaseClaims.holds` turns False) before another release can take over at its expiry.

The pure parts are :func:`verdict` and :func:`claim_status`; :class:`ReleaseApi` is the I/O edge.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime
import logging
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from rebalanser_operator.kube import read_group
from rebalanser_operator.spec import models

log = logging.getLogger(__name__)

#: The condition-like reason of a release that does not serve a group another live release serves.
SERVED_BY_ANOTHER_RELEASE = "ServedByAnotherRelease"
DEFAULT_LEASE_SECONDS = 60.0
REQUEST_TIMEOUT = (5.0, 20.0)
_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_NAME = re.compile(rf"^{_LABEL}(\.{_LABEL})*$")


class ReleaseSettingError(ValueError):
    """A release identity that cannot be used as written."""


@dataclass(frozen=True)
class Release:
    """A release's identity: the namespace it runs in and its name (the chart's full name)."""

    namespace: str
    name: str

    @staticmethod
    def parse(text: str) -> Release:
        namespace, slash, name = text.strip().partition("/")
        if not slash or len(namespace) > 63 or len(name) > 253 or not re.fullmatch(_LABEL, namespace) \
                or not _NAME.fullmatch(name):
            raise ReleaseSettingError(f"a release is NAMESPACE/NAME (its namespace and a Lease name), not {text!r}")
        return Release(namespace, name)

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


# ------------------------------------------------------------------------------------------ pure


@dataclass(frozen=True)
class Mine:
    """The group is this release's (claim number ``claim``)."""

    claim: int


@dataclass(frozen=True)
class Free:
    """Nobody live holds the group: this release may take it as claim ``claim``."""

    claim: int
    previous: str | None  # the release that held it (gone or expired), None when nobody did


@dataclass(frozen=True)
class Taken:
    """Another live release serves the group."""

    release: str
    claim: int
    why: str  # "live", or why its liveness is unknown


Verdict = Mine | Free | Taken


def claimed(status: Mapping[str, Any] | None) -> tuple[str | None, int]:
    """The release named in a status (None: none) and its claim number (0 when absent)."""
    served = (status or {}).get("servedBy") or {}
    release = served.get("release") if isinstance(served, Mapping) else None
    claim = served.get("claim") if isinstance(served, Mapping) else None
    return (str(release) if release else None), (int(claim) if isinstance(claim, int) else 0)


def verdict(status: Mapping[str, Any] | None, me: str, alive: Callable[[str], tuple[bool | None, str]]) -> Verdict:
    """Whose the group is, from its status and the other release's liveness (``alive(release)``: True, False,
    or None when unknown, with a few words)."""
    release, claim = claimed(status)
    if release == me:
        return Mine(claim)
    if release is None:
        return Free(claim + 1, None)
    live, why = alive(release)
    if live is False:
        return Free(claim + 1, release)
    return Taken(release, claim, why)


def served_by(release: str, claim: int, replica: str, token: int) -> dict[str, Any]:
    """``status.servedBy`` of a claimed group."""
    return {"replica": replica, "token": token, "release": release, "claim": claim}


def claim_status(release: str, claim: int, replica: str, token: int) -> dict[str, Any]:
    """The status patch that takes a group (sent with the object's resourceVersion as a precondition)."""
    return {"servedBy": served_by(release, claim, replica, token), "refusedReleases": {release: None}}


def said(status: Mapping[str, Any] | None, me: str) -> str | None:
    """The release this one's entry of ``status.refusedReleases`` names (None: no entry)."""
    entries = (status or {}).get("refusedReleases") or {}
    entry = entries.get(me) if isinstance(entries, Mapping) else None
    served = entry.get("servedBy") if isinstance(entry, Mapping) else None
    return str(served) if served else None


def refusal_message(me: str, taken: Taken) -> str:
    return (f"release {me} does not serve this ResourceGroup: release {taken.release} serves it (claim {taken.claim}, "
            f"{taken.why}). Two operator releases that serve the same namespace share no group; narrow one "
            f"release's namespaces or uninstall it (its groups pass to the other when its heartbeat Lease "
            f"{taken.release} is gone or expired)")


def refusal_status(me: str, taken: Taken, now: datetime.datetime) -> dict[str, Any]:
    return {"refusedReleases": {me: {
        "reason": SERVED_BY_ANOTHER_RELEASE, "servedBy": taken.release, "message": refusal_message(me, taken),
        "since": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }}}


def lease_alive(renewed: datetime.datetime | None, duration: float | None, now: datetime.datetime) -> bool:
    """Whether a Lease renewed at ``renewed`` for ``duration`` seconds still stands at ``now``."""
    if renewed is None or not duration:
        return False
    if renewed.tzinfo is None:
        renewed = renewed.replace(tzinfo=datetime.UTC)
    return renewed + datetime.timedelta(seconds=duration) > now


# ------------------------------------------------------------------------------------- the edge


class ReleaseApi:
    """The Kubernetes requests of the claims (blocking: call from a thread)."""

    def __init__(self, api_client: k8s.ApiClient) -> None:
        self._custom = k8s.CustomObjectsApi(api_client)
        self._leases = k8s.CoordinationV1Api(api_client)

    def get_group(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        return read_group(self._custom, namespace, name)

    def patch_status(self, namespace: str, name: str, status: Mapping[str, Any],
                     resource_version: str | None = None) -> str:
        """Merge-patches the status ('ok'), with ``resource_version`` as a precondition when given
        ('conflict' when the object changed since); 'gone' when it no longer exists."""
        body: dict[str, Any] = {"status": dict(status)}
        if resource_version is not None:
            body["metadata"] = {"resourceVersion": resource_version}
        try:
            self._custom.patch_namespaced_custom_object_status(
                models.GROUP, models.VERSION, namespace, models.PLURAL, name, body,
                _content_type="application/merge-patch+json", _request_timeout=REQUEST_TIMEOUT)
        except ApiException as exc:
            if exc.status == 404:
                return "gone"
            if exc.status == 409:
                return "conflict"
            raise
        return "ok"

    def lease(self, release: Release) -> tuple[datetime.datetime | None, float | None] | None:
        """(renewTime, leaseDurationSeconds) of the release's Lease; None when there is none."""
        try:
            lease: Any = self._leases.read_namespaced_lease(release.name, release.namespace,
                                                            _request_timeout=REQUEST_TIMEOUT)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        spec = lease.spec
        return (spec.renew_time, float(spec.lease_duration_seconds)) if spec is not None else (None, None)

    def renew(self, release: Release, holder: str, duration: float, now: datetime.datetime) -> None:
        spec = {"holderIdentity": holder, "leaseDurationSeconds": int(duration),
                "renewTime": now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")}
        try:
            self._leases.patch_namespaced_lease(release.name, release.namespace, {"spec": spec},
                                                _content_type="application/merge-patch+json",
                                                _request_timeout=REQUEST_TIMEOUT)
            return
        except ApiException as exc:
            if exc.status != 404:
                raise
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": release.name, "namespace": release.namespace,
                             "labels": {"app.kubernetes.io/managed-by": "rebalanser-operator"}},
                "spec": {**spec, "acquireTime": spec["renewTime"]}}
        try:  # the body as a plain mapping, which the client validates into its model (as a patch's body)
            self._leases.create_namespaced_lease(release.namespace, cast(Any, body), _request_timeout=REQUEST_TIMEOUT)
        except ApiException as exc:
            if exc.status != 409:  # another replica of the release made it meanwhile: renewed at its next turn
                raise


def _utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class ReleaseClaims:
    """This release's claims on the ResourceGroups it serves, and its heartbeat."""

    def __init__(self, api: ReleaseApi, release: Release, holder: str,
                 lease_seconds: float = DEFAULT_LEASE_SECONDS) -> None:
        if not 2.0 <= lease_seconds <= 3600.0:
            raise ReleaseSettingError("the release's lease must last between 2 and 3600 seconds")
        self.api, self.release, self.holder, self.lease_seconds = api, release, holder, lease_seconds
        self.me = str(release)
        self._renewed = -1e18
        self._lock = threading.Lock()
        self._served: set[tuple[str, str]] = set()
        self._reported: dict[tuple[str, str], str] = {}  # group -> the release it was refused for
        self._alive: dict[str, tuple[float, tuple[bool | None, str]]] = {}

    @property
    def poll(self) -> float:
        """How often a refused group is looked at again."""
        return min(10.0, self.lease_seconds / 2)

    # ------------------------------------------------------------------------------- heartbeat

    def renew(self) -> None:
        """Renews the release's Lease (blocking; raises when the API server refuses)."""
        started = time.monotonic()
        self.api.renew(self.release, self.holder, self.lease_seconds, _utcnow())
        with self._lock:
            self._renewed = started

    def fresh(self) -> bool:
        """Whether this replica renewed the heartbeat within three quarters of the lease (two renewals may
        fail): else it serves nothing, before another release may take its groups over at the lease's end."""
        return time.monotonic() - self._renewed < self.lease_seconds * 3 / 4

    def run_heartbeat(self, stop: threading.Event) -> None:
        """Renews every quarter of the lease until ``stop`` (on a thread of its own)."""
        while not stop.wait(self.lease_seconds / 4):
            try:
                self.renew()
            except Exception as exc:
                log.warning("release %s: renewing its heartbeat Lease failed: %s", self.me, exc)

    def alive(self, release: str) -> tuple[bool | None, str]:
        """Whether another release is live (its Lease stands), cached for a second."""
        cached = self._alive.get(release)
        if cached is not None and time.monotonic() - cached[0] < 1.0:
            return cached[1]
        try:
            other = Release.parse(release)
        except ReleaseSettingError:
            answer: tuple[bool | None, str] = (None, "its name is not a release's")
        else:
            try:
                lease = self.api.lease(other)
            except Exception as exc:
                answer = (None, f"its heartbeat Lease cannot be read: {getattr(exc, 'status', '') or exc}")
            else:
                if lease is None:
                    answer = (False, "its heartbeat Lease is gone")
                elif lease_alive(lease[0], lease[1], _utcnow()):
                    answer = (True, "live")
                else:
                    answer = (False, "its heartbeat Lease expired")
        self._alive[release] = (time.monotonic(), answer)
        return answer

    # ----------------------------------------------------------------------------------- claims

    def holds(self, status: Mapping[str, Any] | None) -> bool:
        """Whether a group of this status is this release's, and this replica's heartbeat is fresh."""
        return claimed(status)[0] == self.me and self.fresh()

    def still_ours(self, status: Mapping[str, Any] | None, claim: int) -> bool:
        """Whether claim ``claim`` of this release still stands, as far as ``status`` (kopf's live body, which
        may lag behind the claim's own write) and this replica's heartbeat tell."""
        release, number = claimed(status)
        if number > claim or (number == claim and release not in (None, self.me)):
            return False
        return self.fresh()

    def serves(self, namespace: str, name: str) -> bool:
        """Whether this replica serves the group under this release's claim now."""
        with self._lock:
            return (namespace, name) in self._served

    def serving(self, namespace: str, name: str, on: bool) -> None:
        with self._lock:
            if on:
                self._served.add((namespace, name))
            else:
                self._served.discard((namespace, name))

    async def acquire(
        self, executor: concurrent.futures.Executor, namespace: str, name: str, *, replica: str, token: int,
        stopped: Callable[[], bool], event: Callable[[str, str, str], None],
    ) -> tuple[int, bool] | None:
        """Waits until this release holds the group (taking it when free) and returns its claim number, and
        whether it took it now (False: it was already this release's); None once ``stopped()`` or the object
        is gone. While another live release serves it, says so once
        (``event(type, reason, message)`` and ``status.refusedReleases``) and looks again every :attr:`poll`."""
        loop = asyncio.get_running_loop()
        while not stopped():
            if not self.fresh():
                await self._pause(stopped)
                continue
            try:
                body = await loop.run_in_executor(executor, self.api.get_group, namespace, name)
            except Exception as exc:
                log.info("release %s: reading %s/%s failed: %s", self.me, namespace, name, exc)
                await self._pause(stopped)
                continue
            if body is None:
                return None
            found = await loop.run_in_executor(executor, verdict, body.get("status"), self.me, self.alive)
            if isinstance(found, Mine):
                self._reported.pop((namespace, name), None)
                return found.claim, False
            if isinstance(found, Free):
                rv = str((body.get("metadata") or {}).get("resourceVersion") or "")
                patch = claim_status(self.me, found.claim, replica, token)
                try:
                    outcome = await loop.run_in_executor(executor, self.api.patch_status, namespace, name, patch, rv)
                except Exception as exc:
                    log.info("release %s: claiming %s/%s failed: %s", self.me, namespace, name, exc)
                    await self._pause(stopped)
                    continue
                if outcome == "gone":
                    return None
                if outcome == "ok":
                    log.info("release-claim release=%s group=%s/%s claim=%d previous=%s at=%.3f", self.me, namespace,
                             name, found.claim, found.previous or "-", time.time())
                    self._reported.pop((namespace, name), None)
                    return found.claim, True
                continue  # changed meanwhile: read again
            await self._refused(executor, namespace, name, found, event, body.get("status"))
            await self._pause(stopped)
        return None

    async def _refused(self, executor: concurrent.futures.Executor, namespace: str, name: str, taken: Taken,
                       event: Callable[[str, str, str], None], status: Mapping[str, Any] | None) -> None:
        if self._reported.get((namespace, name)) == taken.release:
            return
        if said(status, self.me) == taken.release:  # said before this process started: the refusal is unchanged
            self._reported[(namespace, name)] = taken.release
            return
        loop = asyncio.get_running_loop()
        message = refusal_message(self.me, taken)
        log.warning("release-refused release=%s group=%s/%s served-by=%s at=%.3f", self.me, namespace, name,
                    taken.release, time.time())
        try:
            await loop.run_in_executor(executor, self.api.patch_status, namespace, name,
                                       refusal_status(self.me, taken, _utcnow()), None)
        except Exception as exc:
            log.info("release %s: writing the refusal of %s/%s failed: %s", self.me, namespace, name, exc)
            return
        event("Warning", SERVED_BY_ANOTHER_RELEASE, message)
        self._reported[(namespace, name)] = taken.release

    async def _pause(self, stopped: Callable[[], bool]) -> None:
        deadline = time.monotonic() + self.poll
        while not stopped() and time.monotonic() < deadline:
            await asyncio.sleep(min(1.0, deadline - time.monotonic()))
