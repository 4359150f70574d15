"""Confirmed-death failover, the pure part: which member nodes a pod's status proves dead.

The kubelet copies a container instance's termination-message file into ``terminated.message``
once that instance has ended. A worker started with ``--termination-log`` wrote its instance nonce
there and recorded it, with its pod's name, in its member nodes. A member node is ended only when
the pod that reports the ended instance is the pod it records and the nonces match; everything
else (no message, another message, no nonce recorded, another pod) falls back to session expiry
(docs/protocol.md, "Confirmed-death failover").

    nonces = ended_instances(pod_body)           # {"3f…"}: instances the kubelet reports ended
    doomed = members_to_end("orders-0", nonces, {"<node>": record_or_None, ...})
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from rebalanser.instance import parse_termination_message
from rebalanser.wire import MemberRecord

_STATUS_KEYS = ("containerStatuses", "initContainerStatuses")


def ended_instances(pod: Mapping[str, Any]) -> frozenset[str]:
    """The nonces of every container instance of ``pod`` that the kubelet reports terminated."""
    status = pod.get("status") or {}
    found: set[str] = set()
    for key in _STATUS_KEYS:
        for container in status.get(key) or ():
            for which in ("state", "lastState"):
                terminated = ((container or {}).get(which) or {}).get("terminated")
                if isinstance(terminated, Mapping):
                    nonce = parse_termination_message(terminated.get("message"))
                    if nonce is not None:
                        found.add(nonce)
    return frozenset(found)


def members_to_end(pod_name: str, nonces: Iterable[str], members: Mapping[str, MemberRecord | None]) -> list[str]:
    """Member node names (sorted) whose record names ``pod_name`` and one of ``nonces``. A member
    whose data could not be read or parsed (None), or that records no nonce, is never chosen."""
    wanted = frozenset(nonces)
    if not wanted:
        return []
    return sorted(
        name for name, record in members.items()
        if record is not None and record.instance is not None and record.instance in wanted
        and record.pod == pod_name
    )
