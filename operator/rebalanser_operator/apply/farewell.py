"""Releasing the ResourceGroups of a namespace that is being deleted, without kopf's deletion handler.

kopf stops serving a namespace once the namespace controller has marked it terminating (the namespace
has ``deletionTimestamp`` and status conditions): a ResourceGroup deleted with its namespace may then
never reach the ``on.delete`` handler, and its finalizer would keep the namespace ``Terminating``
forever. Two paths avoid that, both doing what the deletion handler does (wait for the live members
to leave, delete the znodes, remove the finalizer):

* :func:`release_group` is called by the group's status loop, which keeps running (it is the group's
  daemon) and checks every few seconds whether the namespace is terminating;
* :func:`release_terminating_namespace` is called on shutdown (kopf's cleanup, within the pod's
  termination grace period) for the operator's own namespace, which a namespace deletion takes away
  together with the operator pod.

Blocking (Kubernetes and ZooKeeper calls); they return what happened, for the log.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from rebalanser_operator.apply.actions import MEMBERS_LEAVE_WAIT_SECONDS, RetryLater
from rebalanser_operator.controller.context import Context
from rebalanser_operator.controller.messages import Deletion

log = logging.getLogger(__name__)

#: Seconds before the deadline at which the group is deleted even under members that did not leave.
LAST_CHANCE = 10.0


def release_terminating_namespace(
    ctx: Context, namespace: str, finalizer: str, *, deadline: float
) -> dict[str, str]:
    """Releases every ResourceGroup of ``namespace`` if the namespace is terminating."""
    if not ctx.kube.namespace_terminating(namespace):
        return {}
    outcomes: dict[str, str] = {}
    for body in ctx.kube.list_groups(namespace):
        meta = body.get("metadata", {})
        name = str(meta.get("name"))
        if finalizer not in (meta.get("finalizers") or []):
            continue
        outcomes[name] = _release(ctx, namespace, body, finalizer, deadline)
        log.info("namespace %s is being deleted: ResourceGroup %s: %s", namespace, name, outcomes[name])
    return outcomes


def release_group(ctx: Context, namespace: str, name: str, finalizer: str, *, deadline: float) -> str:
    """Releases one ResourceGroup of a terminating namespace (its status loop calls this)."""
    body = ctx.kube.get_group(namespace, name)
    if body is None:
        ctx.forget(namespace, name)
        return "already gone"
    if finalizer not in (body.get("metadata", {}).get("finalizers") or []):
        ctx.forget(namespace, name)
        return "finalizer already gone"
    outcome = _release(ctx, namespace, body, finalizer, deadline)
    log.info("namespace %s is being deleted: ResourceGroup %s: %s", namespace, name, outcome)
    return outcome


def _release(ctx: Context, namespace: str, body: Mapping[str, Any], finalizer: str, deadline: float) -> str:
    meta = body["metadata"]
    controller = ctx.controller(namespace, meta["name"], meta.get("uid", ""))
    started = time.monotonic()
    retry = 0
    while True:
        elapsed = time.monotonic() - started
        if deadline - time.monotonic() < LAST_CHANCE:  # no time left to wait for members: delete now
            elapsed = max(elapsed, MEMBERS_LEAVE_WAIT_SECONDS)
        try:
            outcome = controller.delete(Deletion.of(
                dict(body.get("spec") or {}), annotations=dict(meta.get("annotations") or {}), retry=retry,
                elapsed=elapsed))
            break
        except RetryLater as exc:
            if time.monotonic() + exc.delay >= deadline:
                return f"not released in time: {exc}"
            time.sleep(exc.delay)
            retry += 1
    removed = ctx.kube.remove_finalizer(namespace, meta["name"], finalizer)
    ctx.forget(namespace, meta["name"])
    return f"{outcome}; finalizer {'removed' if removed else 'already gone'}"
