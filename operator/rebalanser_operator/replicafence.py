"""The fence of status writes between operator replicas: an admission policy that refuses a status
update carrying a smaller fencing token than the stored one, or an older release claim
(docs/operator-replicas.md, "Fenced writes", "Two releases").

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

#: The claim number and the release of a status (0 and '' when absent: written before releases claimed).
_CLAIM = "(has({o}.status.servedBy.claim) ? {o}.status.servedBy.claim : 0)"
_RELEASE = "(has({o}.status.servedBy.release) ? {o}.status.servedBy.release : '')"
#: The rule: a status update may raise the stored claim number (another release takes the group over), or
#: keep it, with the same release, and keep or raise the stored token; never lower either, nor drop them.
RULE = ("!has(oldObject.status) || !has(oldObject.status.servedBy) || "
        "(has(object.status) && has(object.status.servedBy) && "
        f"({_CLAIM.format(o='object')} > {_CLAIM.format(o='oldObject')} || "
        f"({_CLAIM.format(o='object')} == {_CLAIM.format(o='oldObject')} && "
        f"{_RELEASE.format(o='object')} == {_RELEASE.format(o='oldObject')} && "
        "object.status.servedBy.token >= oldObject.status.servedBy.token)))")
MESSAGE = ("status.servedBy.token is smaller than the stored one, or its claim older: a write of an operator replica "
           "or release that no longer serves this ResourceGroup")


def served_by(replica: str, token: int, release: str | None = None, claim: int = 0) -> dict[str, Any]:
    """The status field that names the serving replica and carries its token (and, under a release's claim,
    the release and the claim's number)."""
    served: dict[str, Any] = {"replica": replica, "token": token}
    if release is not None:
        served.update(release=release, claim=claim)
    return {"servedBy": served}


def fenced(patch: dict[str, Any], replica: str, token: int, release: str | None = None,
           claim: int = 0) -> dict[str, Any]:
    """``patch`` as a replica sends it: with its token whether or not ``servedBy`` changed (merged into the
    stored status, a patch without it would keep a newer owner's token and pass the policy); an empty patch
    stays empty (nothing is sent)."""
    return {**patch, **served_by(replica, token, release, claim)} if patch else patch


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
