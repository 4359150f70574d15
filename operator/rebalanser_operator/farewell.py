"""What the operator does on its way out when its own namespace is being deleted.

A namespace that holds the operator and ResourceGroups (the chart's default: it serves its release
namespace) loses the operator pod together with everything else, and nobody would be left to
release the ResourceGroups' finalizers: the namespace would stay ``Terminating`` forever. So, on
shutdown (kopf's cleanup, within the pod's termination grace period), when the operator's own
namespace is terminating, it does for each of that namespace's ResourceGroups what the deletion
handler does: waits for the live members to leave, deletes the znodes and removes the finalizer.

    release_terminating_namespace(ctx, "shop", finalizer, deadline=time.monotonic() + 40)

Blocking (Kubernetes and ZooKeeper calls); returns what happened per group, for the log.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from rebalanser_operator.actions import MEMBERS_LEAVE_WAIT_SECONDS, RetryLater, delete_znodes
from rebalanser_operator.runtime import OperatorContext

log = logging.getLogger(__name__)

#: Seconds before the deadline at which the group is deleted even under members that did not leave.
LAST_CHANCE = 10.0


def release_terminating_namespace(
    ctx: OperatorContext, namespace: str, finalizer: str, *, deadline: float
) -> dict[str, str]:
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


def _release(ctx: OperatorContext, namespace: str, body: Mapping[str, Any], finalizer: str, deadline: float) -> str:
    meta = body["metadata"]
    runtime = ctx.group(namespace, meta["name"], meta.get("uid", ""))
    started = time.monotonic()
    retry = 0
    while True:
        elapsed = time.monotonic() - started
        if deadline - time.monotonic() < LAST_CHANCE:  # no time left to wait for members: delete now
            elapsed = max(elapsed, MEMBERS_LEAVE_WAIT_SECONDS)
        try:
            outcome = delete_znodes(
                ctx, runtime, dict(body.get("spec") or {}), annotations=dict(meta.get("annotations") or {}),
                body=None, retry=retry, elapsed=elapsed,
            )
            break
        except RetryLater as exc:
            if time.monotonic() + exc.delay >= deadline:
                return f"not released before the pod's grace period ends: {exc}"
            time.sleep(exc.delay)
            retry += 1
    removed = ctx.kube.remove_finalizer(namespace, meta["name"], finalizer)
    ctx.forget(namespace, meta["name"])
    return f"{outcome}; finalizer {'removed' if removed else 'already gone'}"
