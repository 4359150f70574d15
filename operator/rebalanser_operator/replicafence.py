"""The fence of status writes between operator replicas: an admission policy that refuses a status
update carrying a smaller fencing token than the stored one (docs/operator-replicas.md, "Fenced writes").

    for manifest in fence_manifests("rebalanser-replica-fence"):
        kubectl apply ...                  # what the chart installs with more than one replica

Each replica's status patches carry ``status.servedBy`` (the replica and its claim's token), changed or
not (:class:`rebalanser_operator.replicaserve.ReplicaStatusLoop`). Merged into the stored status, a stale
replica's patch brings its smaller token, and the API server refuses the update: the stale replica's
write is undone before it is stored, whatever the replica believes. A write without ``servedBy`` (one
operator, no replicas) and the first one of a group pass.

Pure data: the ValidatingAdmissionPolicy and its binding, as dicts.
"""

from __future__ import annotations

from typing import Any

from rebalanser_operator.spec.models import GROUP, PLURAL

#: The rule: a status update may keep or raise the stored token, never lower it (nor drop it).
RULE = ("!has(oldObject.status) || !has(oldObject.status.servedBy) || "
        "(has(object.status) && has(object.status.servedBy) && "
        "object.status.servedBy.token >= oldObject.status.servedBy.token)")
MESSAGE = ("status.servedBy.token is smaller than the stored one: a write of an operator replica that no longer "
           "serves this ResourceGroup")


def served_by(replica: str, token: int) -> dict[str, Any]:
    """The status field that names the serving replica and carries its token."""
    return {"servedBy": {"replica": replica, "token": token}}


def fenced(patch: dict[str, Any], replica: str, token: int) -> dict[str, Any]:
    """``patch`` as a replica sends it: with its token whether or not ``servedBy`` changed (merged into the
    stored status, a patch without it would keep a newer owner's token and pass the policy); an empty patch
    stays empty (nothing is sent)."""
    return {**patch, **served_by(replica, token)} if patch else patch


def fence_manifests(name: str) -> list[dict[str, Any]]:
    """The policy and its binding (cluster-scoped, both named ``name``)."""
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [GROUP], "apiVersions": ["*"], "operations": ["UPDATE"],
                "resources": [f"{PLURAL}/status"],
            }]},
            "validations": [{"expression": RULE, "message": MESSAGE, "reason": "Forbidden"}],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }
    return [policy, binding]
