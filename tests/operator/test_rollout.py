"""The rollout check: what ``kubectl rollout status`` waits for, as a pure function of the object."""

from __future__ import annotations

from typing import Any

import pytest
from rebalanser_operator.status.rollout import rolling_out


def deployment(generation: int = 2, observed: int = 2, wanted: int | None = 3, **status: Any) -> dict[str, Any]:
    done = {"replicas": 3, "updatedReplicas": 3, "availableReplicas": 3, "readyReplicas": 3}
    return {"metadata": {"generation": generation}, "spec": {} if wanted is None else {"replicas": wanted},
            "status": {"observedGeneration": observed, **done, **status}}


def statefulset(strategy: dict[str, Any] | None = None, generation: int = 2, observed: int = 2,
                **status: Any) -> dict[str, Any]:
    done = {"replicas": 3, "readyReplicas": 3, "updatedReplicas": 3, "currentRevision": "r2", "updateRevision": "r2"}
    return {"metadata": {"generation": generation},
            "spec": {"replicas": 3, **({"updateStrategy": strategy} if strategy else {})},
            "status": {"observedGeneration": observed, **done, **status}}


@pytest.mark.parametrize(("body", "rolling"), [
    (deployment(), False),
    (deployment(generation=3), True),  # the controller has not seen the new spec
    (deployment(updatedReplicas=1), True),  # pods still being replaced
    (deployment(wanted=None, updatedReplicas=1, availableReplicas=1, replicas=1), False),  # default 1
    (deployment(replicas=4), True),  # an old pod still running (surge, terminating)
    (deployment(availableReplicas=2), True),  # an updated pod not available yet
    (deployment(wanted=0, updatedReplicas=0, availableReplicas=0, replicas=0), False),  # scaled to zero
    (deployment(updatedReplicas=1, conditions=[{"type": "Progressing", "reason": "ProgressDeadlineExceeded"}]),
     False),  # stalled: waiting will not finish it
], ids=["done", "unobserved", "updating", "default-replicas", "old-pods", "unavailable", "zero", "stalled"])
def test_deployment(body: dict[str, Any], rolling: bool) -> None:
    assert rolling_out("Deployment", body) is rolling


@pytest.mark.parametrize(("body", "rolling"), [
    (statefulset(), False),
    (statefulset(generation=3), True),
    (statefulset(readyReplicas=2), True),
    (statefulset(updateRevision="r3"), True),  # revision not rolled out to every pod yet
    (statefulset({"type": "RollingUpdate", "rollingUpdate": {"partition": 2}}, updatedReplicas=1,
                 updateRevision="r3"), False),  # partitioned: only ordinals >= 2 are updated, and one is
    (statefulset({"type": "RollingUpdate", "rollingUpdate": {"partition": 1}}, updatedReplicas=1,
                 updateRevision="r3"), True),  # partitioned: two to update, one done
    (statefulset({"type": "OnDelete"}, updateRevision="r3", updatedReplicas=0), False),  # pods change on delete only
    (statefulset({"type": "OnDelete"}, generation=3), True),
], ids=["done", "unobserved", "not-ready", "revision", "partition-done", "partition-pending", "on-delete",
        "on-delete-unobserved"])
def test_statefulset(body: dict[str, Any], rolling: bool) -> None:
    assert rolling_out("StatefulSet", body) is rolling
