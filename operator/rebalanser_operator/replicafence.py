"""The fence of Kubernetes writes between operator replicas (docs/operator-replicas.md, "Fenced writes",
"Two releases"), three admission policies:

- the status fence refuses a status update carrying a smaller fencing token than the stored one, or an
  older release claim;
- the writer fence refuses an update of the main resource (kopf's finalizer, its progress annotations and
  last-handled digest, the operator's own finalizer removal) sent by an operator pod other than the one
  the stored ``status.servedBy`` names. The pod is known from the request itself: a pod's service-account
  token carries its pod's name, which the API server gives the policy as ``request.userInfo.extra``;
- the config fence refuses a replace of a workers' ConfigMap whose publisher's fence (claim and token
  annotations) is older than the stored one.

    for manifest in fence_manifests("rebalanser-replica-fence"):
        kubectl apply ...                  # what the chart installs with more than one replica
    for manifest in writer_manifests("rebalanser-replica-writer", "system:serviceaccount:ops:rebalanser"):
        kubectl apply ...
    for manifest in config_manifests("rebalanser-replica-config", "system:serviceaccount:ops:rebalanser"):
        kubectl apply ...

Each replica's status patches carry ``status.servedBy`` (the replica and its claim's token), changed or
not (:class:`rebalanser_operator.replicaserve.ReplicaStatusLoop`). Merged into the stored status, a stale
replica's patch brings its smaller token, and the API server refuses the update: the stale replica's
write is undone before it is stored, whatever the replica believes. A write without ``servedBy`` (one
operator, no replicas) and the first one of a group pass.

Pure data: the ValidatingAdmissionPolicy and its binding, as dicts.
"""

from __future__ import annotations

from typing import Any

from rebalanser_operator.kube import FENCE_CLAIM, FENCE_TOKEN
from rebalanser_operator.spec.models import FINALIZER, GROUP, PLURAL

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


#: The key of ``request.userInfo.extra`` that names the pod a service-account token was bound to.
POD_NAME_KEY = "authentication.kubernetes.io/pod-name"
#: The writer fence: an update of the main resource passes when no replica serves the group yet, while the
#: object is being deleted (the finalizer's removal by the replica that deletes it, whichever it is: a
#: stale one's deletion is refused in ZooKeeper first), when our finalizer is missing (put back by any
#: replica), or when the writing pod is the one ``status.servedBy`` names.
WRITER_RULE = ("!has(oldObject.status) || !has(oldObject.status.servedBy) || "
               "!has(oldObject.status.servedBy.replica) || has(oldObject.metadata.deletionTimestamp) || "
               f"!has(oldObject.metadata.finalizers) || !('{FINALIZER}' in oldObject.metadata.finalizers) || "
               f"oldObject.status.servedBy.replica == request.userInfo.extra['{POD_NAME_KEY}'][0]")
WRITER_MESSAGE = ("this operator pod is not the replica that status.servedBy names: a write of an operator replica "
                  "that no longer serves this ResourceGroup")


def writer_conditions(username: str) -> list[dict[str, str]]:
    """The requests the writer fence judges: the operator's own service account, with a pod-bound token."""
    return [
        {"name": "operator", "expression": f"request.userInfo.username == '{username}'"},
        {"name": "pod-bound",
         "expression": f"has(request.userInfo.extra) && '{POD_NAME_KEY}' in request.userInfo.extra"},
    ]


#: The config fence: an update of a workers' ConfigMap that carries a publisher's fence keeps one, with a
#: later release claim, or the same claim and no smaller token (the ConfigMap's annotations, as
#: :meth:`rebalanser_operator.kube.KubernetesGateway.publish_config` writes them).
_ANNOTATION = "int({o}.metadata.annotations['{key}'])"
_NEW_CLAIM, _OLD_CLAIM = (_ANNOTATION.format(o=o, key=FENCE_CLAIM) for o in ("object", "oldObject"))
_NEW_TOKEN, _OLD_TOKEN = (_ANNOTATION.format(o=o, key=FENCE_TOKEN) for o in ("object", "oldObject"))
CONFIG_RULE = (f"has(object.metadata.annotations) && '{FENCE_CLAIM}' in object.metadata.annotations && "
               f"'{FENCE_TOKEN}' in object.metadata.annotations && "
               f"({_NEW_CLAIM} > {_OLD_CLAIM} || ({_NEW_CLAIM} == {_OLD_CLAIM} && {_NEW_TOKEN} >= {_OLD_TOKEN}))")
CONFIG_MESSAGE = ("the ConfigMap's fence (rebalanser.io/fence-claim, rebalanser.io/fence-token) is older than the "
                  "stored one: a write of an operator replica that no longer serves its ResourceGroup")


def config_conditions(username: str) -> list[dict[str, str]]:
    """The requests the config fence judges: the operator's own, on a ConfigMap a fenced publisher wrote."""
    stamped = (f"has(oldObject.metadata.annotations) && '{FENCE_CLAIM}' in oldObject.metadata.annotations && "
               f"'{FENCE_TOKEN}' in oldObject.metadata.annotations")
    return [{"name": "operator", "expression": f"request.userInfo.username == '{username}'"},
            {"name": "stamped", "expression": stamped}]


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
    """The status fence and its binding (cluster-scoped, both named ``name``)."""
    return _manifests(name, f"{PLURAL}/status", {"expression": RULE, "message": MESSAGE, "reason": "Forbidden"})


def writer_manifests(name: str, username: str) -> list[dict[str, Any]]:
    """The writer fence and its binding (cluster-scoped, both named ``name``), for the operator's service
    account ``username`` (``system:serviceaccount:NAMESPACE:NAME``)."""
    return _manifests(name, PLURAL, {"expression": WRITER_RULE, "message": WRITER_MESSAGE, "reason": "Forbidden"},
                      writer_conditions(username))


def config_manifests(name: str, username: str) -> list[dict[str, Any]]:
    """The config fence and its binding (cluster-scoped, both named ``name``), for the operator's service
    account ``username``: the workers' ConfigMaps."""
    return _manifests(name, "configmaps", {"expression": CONFIG_RULE, "message": CONFIG_MESSAGE, "reason": "Forbidden"},
                      config_conditions(username), group="", version="v1")


def _manifests(name: str, resource: str, validation: dict[str, str], conditions: list[dict[str, str]] | None = None,
               group: str = GROUP, version: str = "*") -> list[dict[str, Any]]:
    spec: dict[str, Any] = {
        "failurePolicy": "Fail",
        "matchConstraints": {"resourceRules": [{
            "apiGroups": [group], "apiVersions": [version], "operations": ["UPDATE"], "resources": [resource],
        }]},
        "validations": [validation],
    }
    if conditions:
        spec["matchConditions"] = conditions
    policy = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
              "metadata": {"name": name}, "spec": spec}
    binding = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
               "metadata": {"name": name}, "spec": {"policyName": name, "validationActions": ["Deny"]}}
    return [policy, binding]
