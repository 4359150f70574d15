"""Confirmed-death failover, the pure part: which member nodes a pod's status proves dead.

The kubelet copies a container instance's termination-message file into ``terminated.message``
once that instance has ended. A worker whose library was given that file wrote a fresh nonce there
at its start and recorded the nonce's SHA-256 digest, with its pod's namespace, UID and container
name, in its member nodes. A member node is ended only when the pod that reports the ended instance
is the pod it records (same namespace and UID), the instance is of the container it records, and the
digest matches; everything else (no message, another message, no digest recorded, no pod UID
recorded, another pod, another container) falls back to session expiry (docs/protocol.md,
"Confirmed-death failover").

    pod = PodRef.of(pod_body)                     # namespace, name, UID
    ended = ended_instances(pod_body)             # {("worker", "3f…")}: (container, nonce) ended
    doomed = members_to_end(pod, ended, {"<node>": record_or_None, ...})
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from rebalanser.instance import instance_digest, parse_termination_message
from rebalanser.wire import MemberRecord

_STATUS_KEYS = ("containerStatuses", "initContainerStatuses")


@dataclass(frozen=True)
class PodRef:
    """A pod as the API server names it: the UID is never reused, unlike the name."""

    namespace: str
    name: str
    uid: str

    @staticmethod
    def of(pod: Mapping[str, Any]) -> PodRef | None:
        meta = pod.get("metadata") or {}
        namespace, name, uid = meta.get("namespace"), meta.get("name"), meta.get("uid")
        if not (isinstance(namespace, str) and isinstance(name, str) and isinstance(uid, str)):
            return None
        if not (namespace and name and uid):
            return None
        return PodRef(namespace, name, uid)


@dataclass(frozen=True, order=True)
class EndedInstance:
    """A container instance the kubelet reports terminated, with the nonce its file held."""

    container: str
    nonce: str


def ended_instances(pod: Mapping[str, Any]) -> frozenset[EndedInstance]:
    """Every container instance of ``pod`` that the kubelet reports terminated with a nonce."""
    status = pod.get("status") or {}
    found: set[EndedInstance] = set()
    for key in _STATUS_KEYS:
        for container in status.get(key) or ():
            name = (container or {}).get("name")
            if not isinstance(name, str) or not name:
                continue
            for which in ("state", "lastState"):
                terminated = ((container or {}).get(which) or {}).get("terminated")
                if isinstance(terminated, Mapping):
                    nonce = parse_termination_message(terminated.get("message"))
                    if nonce is not None:
                        found.add(EndedInstance(name, nonce))
    return frozenset(found)


def records_instance(record: MemberRecord, pod: PodRef, ended: EndedInstance) -> bool:
    """Whether ``record`` names this very container instance: the pod's UID (required), its namespace
    and the container (each when recorded), and the nonce's digest (or, in a member node written
    before the digest, the nonce itself)."""
    if record.pod_uid != pod.uid:
        return False
    if record.pod_namespace is not None and record.pod_namespace != pod.namespace:
        return False
    if record.container is not None and record.container != ended.container:
        return False
    if record.instance_digest is not None:
        return record.instance_digest == instance_digest(ended.nonce)
    return record.instance is not None and record.instance == ended.nonce


def members_to_end(
    pod: PodRef, ended: Iterable[EndedInstance], members: Mapping[str, MemberRecord | None],
) -> dict[str, EndedInstance]:
    """Member node name -> the ended instance it records, for every member node that records one of
    ``ended`` of ``pod``. A member whose data could not be read or parsed (None) is never chosen."""
    instances = sorted(ended)
    chosen: dict[str, EndedInstance] = {}
    for name, record in sorted(members.items()):
        if record is None:
            continue
        match = next((e for e in instances if records_instance(record, pod, e)), None)
        if match is not None:
            chosen[name] = match
    return chosen
