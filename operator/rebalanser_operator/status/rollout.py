"""Whether a Deployment or StatefulSet is rolling out: what ``kubectl rollout status`` waits for.

    rolling_out("Deployment", body)     # body: the object as the API server returns it (camelCase)

Pure functions of the object. A rollout is under way while:

Deployment
    the controller has not observed the latest spec; fewer pods than wanted run the new template;
    pods of the old template are still running (``status.replicas`` > ``updatedReplicas``, e.g.
    terminating during a surge); or updated pods are not yet available (``availableReplicas``).
    A rollout whose ``Progressing`` condition says ``ProgressDeadlineExceeded`` has stopped: not
    rolling out (it will not finish by waiting).

StatefulSet
    the controller has not observed the latest spec; with ``RollingUpdate``: fewer pods ready than
    wanted, or, with a ``partition``, fewer than ``replicas - partition`` updated, or, without one, the
    update revision is not yet the current one. With ``OnDelete`` the controller replaces no pod by
    itself, so there is nothing to wait for once it has observed the spec: not rolling out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def rolling_out(kind: str, body: Mapping[str, Any]) -> bool:
    if kind == "StatefulSet":
        return statefulset_rolling_out(body)
    return deployment_rolling_out(body)


def _unobserved(body: Mapping[str, Any]) -> bool:
    generation = (body.get("metadata") or {}).get("generation") or 0
    observed = (body.get("status") or {}).get("observedGeneration") or 0
    return bool(observed < generation)


def _replicas(spec: Mapping[str, Any]) -> int:
    replicas = spec.get("replicas")
    return 1 if replicas is None else int(replicas)


def deployment_rolling_out(body: Mapping[str, Any]) -> bool:
    if _unobserved(body):
        return True
    spec, status = body.get("spec") or {}, body.get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("type") == "Progressing" and condition.get("reason") == "ProgressDeadlineExceeded":
            return False
    updated = status.get("updatedReplicas") or 0
    if updated < _replicas(spec):
        return True
    if (status.get("replicas") or 0) > updated:
        return True  # old pods still running
    return bool((status.get("availableReplicas") or 0) < updated)


def statefulset_rolling_out(body: Mapping[str, Any]) -> bool:
    if _unobserved(body):
        return True
    spec, status = body.get("spec") or {}, body.get("status") or {}
    strategy = spec.get("updateStrategy") or {}
    if strategy.get("type", "RollingUpdate") != "RollingUpdate":
        return False  # OnDelete: pods change only when someone deletes them
    replicas = _replicas(spec)
    if (status.get("readyReplicas") or 0) < replicas:
        return True
    partition = (strategy.get("rollingUpdate") or {}).get("partition") or 0
    if partition > 0:
        return bool((status.get("updatedReplicas") or 0) < replicas - partition)
    return bool(status.get("updateRevision") != status.get("currentRevision"))
