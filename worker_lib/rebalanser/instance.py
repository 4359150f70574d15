"""The container instance's nonce: what ties a member to exactly one container instance.

The library owns the nonce. Every :meth:`Client.start <rebalanser.Client.start>` of a worker given a
termination-message file (``Options.termination_log``, a pod's ``/dev/termination-log``) draws a fresh
nonce, writes it to that file (the kubelet copies the file into ``terminated.message`` once the
instance has ended) and records only its SHA-256 digest in every member node it creates: the member
node is readable by more parties than the file, and the digest lets nobody write the nonce elsewhere.
The operator's confirmed-death failover ends only member nodes whose digest matches a nonce that the
kubelet reports from an ended instance of the pod, container and namespace the node records
(docs/protocol.md, "Confirmed-death failover").

    digest = begin_instance("/dev/termination-log")          # before joining; None without a file
    parse_termination_message("rebalanser-instance=" + nonce)  # -> nonce; anything else -> None
    instance_digest(nonce) == digest
"""

from __future__ import annotations

import hashlib
import re
import secrets

from rebalanser.errors import InvalidInputError

PREFIX = "rebalanser-instance="
_NONCE = re.compile(r"[0-9a-f]{32}")
_DIGEST = re.compile(r"[0-9a-f]{64}")
_MESSAGE = re.compile(r"rebalanser-instance=([0-9a-f]{32})\n?")


def new_instance() -> str:
    """A fresh nonce: 128 random bits as 32 lowercase hex digits."""
    return secrets.token_hex(16)


def validate_instance(nonce: str) -> str:
    if not isinstance(nonce, str) or not _NONCE.fullmatch(nonce):
        raise InvalidInputError(f"an instance nonce is 32 lowercase hex digits, got {nonce!r}")
    return nonce


def instance_digest(nonce: str) -> str:
    """What a member node records of a nonce: its SHA-256, 64 lowercase hex digits."""
    return hashlib.sha256(validate_instance(nonce).encode("ascii")).hexdigest()


def is_digest(value: object) -> bool:
    return isinstance(value, str) and _DIGEST.fullmatch(value) is not None


def termination_record(nonce: str) -> str:
    return f"{PREFIX}{validate_instance(nonce)}\n"


def write_termination_record(path: str, nonce: str) -> None:
    """Replaces the file's content with the nonce's record (the file is the kubelet's: truncate it)."""
    with open(path, "w", encoding="ascii") as f:
        f.write(termination_record(nonce))
        f.flush()


def begin_instance(termination_log: str | None) -> str | None:
    """One start of a worker: a fresh nonce written to ``termination_log``; returns its digest (None,
    and nothing written, without a file). The nonce itself is never kept: it lives only in the file."""
    if termination_log is None:
        return None
    nonce = new_instance()
    write_termination_record(termination_log, nonce)
    return instance_digest(nonce)


def parse_termination_message(message: object) -> str | None:
    """The nonce when ``message`` is exactly one record line; None for anything else (ambiguous)."""
    if not isinstance(message, str):
        return None
    found = _MESSAGE.fullmatch(message)
    return found.group(1) if found else None
