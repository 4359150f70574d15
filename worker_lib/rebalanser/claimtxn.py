"""A claim round's transaction: ephemeral creates that share their data, ACL and flags, built and
encoded with what they share done once.

A claim batch is up to 500 creates of ``G/owners/<resource>``, each with the member's record as data
and the client's default ACL. kazoo's ``TransactionRequest.create`` checks its arguments and
normalises the path (with the chroot) for each of them, and kazoo's ``Transaction`` encodes each
create's header, data and ACL anew. In a cold start of 50 members that was half of what the members'
processes computed while they claimed (py-spy, samples holding the interpreter lock), on a machine
whose cores the server needed for the same creates.

:func:`claim_transaction` prefixes the owners' folder once (resource names are checked when an
assignment is read: none holds a ``/``), and :class:`SharedCreates` encodes the part every create
shares once. The bytes are kazoo's, operation for operation (``tests/unit/test_claimtxn.py``
compares them), and the reply is read by kazoo's ``Transaction.deserialize``.
"""

from __future__ import annotations

from collections.abc import Sequence

from kazoo.protocol.serialization import (
    Create,
    Transaction,
    int_struct,
    multiheader_struct,
    write_buffer,
    write_string,
)
from kazoo.security import ACL

EPHEMERAL = 1  # ZooKeeper's create flag
_CREATE_HEADER = multiheader_struct.pack(Create.type, False, -1)
_END = multiheader_struct.pack(-1, True, -1)


def _shared_tail(data: bytes, acl: Sequence[ACL], flags: int) -> bytes:
    """What follows a create's path on the wire: its data, its ACL and its flags."""
    parts = [write_buffer(data), int_struct.pack(len(acl))]
    for entry in acl:
        parts += [int_struct.pack(entry.perms), write_string(entry.id.scheme), write_string(entry.id.id)]
    parts.append(int_struct.pack(flags))
    return b"".join(parts)


class SharedCreates(Transaction):  # type: ignore[misc]
    """kazoo's ``Transaction`` whose operations are creates with one data, ACL and flags (as
    :func:`claim_transaction` makes them), encoded with that shared part once."""

    __slots__ = ()

    def serialize(self) -> bytes:
        first = self.operations[0]
        tail = _shared_tail(first.data, first.acl, first.flags)
        parts = []
        for op in self.operations:
            path = op.path.encode("utf-8")
            parts += [_CREATE_HEADER, int_struct.pack(len(path)), path, tail]
        parts.append(_END)
        return b"".join(parts)


def claim_transaction(owners: str, resources: Sequence[str], data: bytes, acl: Sequence[ACL]) -> SharedCreates:
    """The transaction creating ``owners/<resource>`` for each of ``resources`` (at least one), as
    ephemeral nodes holding ``data`` with ``acl``; ``owners`` is the folder's full path on the
    server (with the chroot)."""
    if not resources:
        raise ValueError("a claim transaction creates at least one claim")
    acl = list(acl)
    return SharedCreates([Create(f"{owners}/{resource}", data, acl, EPHEMERAL) for resource in resources])
