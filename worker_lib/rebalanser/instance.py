"""The container instance's nonce: what ties a member to exactly one container instance.

A worker in a pod draws a fresh nonce when it starts, writes it to its container's
termination-message file (the kubelet copies that file into ``terminated.message`` once the instance
has ended) and records it in every member node it creates. The operator's confirmed-death failover
ends only member nodes whose nonce the kubelet reports from an ended instance (docs/protocol.md,
"Confirmed-death failover").

    nonce = new_instance()
    write_termination_record("/dev/termination-log", nonce)   # before joining
    parse_termination_message("rebalanser-instance=" + nonce)  # -> nonce; anything else -> None
"""

from __future__ import annotations

import re
import secrets

from rebalanser.errors import InvalidInputError

PREFIX = "rebalanser-instance="
_NONCE = re.compile(r"[0-9a-f]{32}")
_MESSAGE = re.compile(r"rebalanser-instance=([0-9a-f]{32})\n?")


def new_instance() -> str:
    """A fresh nonce: 128 random bits as 32 lowercase hex digits."""
    return secrets.token_hex(16)


def validate_instance(nonce: str) -> str:
    if not isinstance(nonce, str) or not _NONCE.fullmatch(nonce):
        raise InvalidInputError(f"an instance nonce is 32 lowercase hex digits, got {nonce!r}")
    return nonce


def termination_record(nonce: str) -> str:
    return f"{PREFIX}{validate_instance(nonce)}\n"


def write_termination_record(path: str, nonce: str) -> None:
    """Replaces the file's content with the nonce's record (the file is the kubelet's: truncate it)."""
    with open(path, "w", encoding="ascii") as f:
        f.write(termination_record(nonce))
        f.flush()


def parse_termination_message(message: object) -> str | None:
    """The nonce when ``message`` is exactly one record line; None for anything else (ambiguous)."""
    if not isinstance(message, str):
        return None
    found = _MESSAGE.fullmatch(message)
    return found.group(1) if found else None
