"""A claim round's transaction (rebalanser.claimtxn) is kazoo's own, byte for byte: the same
operations as ``TransactionRequest.create`` makes (chroot, flags, the default ACL or the open one),
and the same encoding as kazoo's ``Transaction``, for every shape of ACL and data a member uses."""

from __future__ import annotations

import pytest
from kazoo.client import KazooClient
from kazoo.protocol.serialization import Transaction
from kazoo.security import OPEN_ACL_UNSAFE, make_acl, make_digest_acl
from rebalanser.claimtxn import SharedCreates, claim_transaction
from rebalanser.kazoo_private import full_path

ACLS = {
    "open": OPEN_ACL_UNSAFE,
    "digest": [make_digest_acl("tenant", "secret", all=True)],
    "digest and operator": [make_digest_acl("tenant", "secret", all=True),
                            make_acl("x509", "CN=rebalanser-operator,O=ops", all=True)],
}


@pytest.mark.parametrize("hosts", ["127.0.0.1:1", "127.0.0.1:1/apps/chroot"])
@pytest.mark.parametrize("acl", list(ACLS), ids=list(ACLS))
@pytest.mark.parametrize("data", [b'{"member": "m-1"}', b"", "{\"member\": \"p\u00e9\"}".encode()])
def test_the_claim_transaction_is_kazoos(hosts: str, acl: str, data: bytes) -> None:
    zk = KazooClient(hosts=hosts, default_acl=None if acl == "open" else ACLS[acl])
    resources = ["r-0", "queue.\u00e9t\u00e9", "x" * 200, "r-1"]
    theirs = zk.transaction()
    for resource in resources:
        theirs.create(f"/g/owners/{resource}", data, ephemeral=True)
    ours = claim_transaction(full_path(zk, "/g/owners"), resources, data, zk.default_acl or OPEN_ACL_UNSAFE)
    assert list(ours.operations) == theirs.operations, "the operations kazoo's builder makes"
    assert bytes(ours.serialize()) == bytes(Transaction(theirs.operations).serialize()), "kazoo's bytes"
    assert isinstance(ours, Transaction) and ours.type == Transaction.type  # kazoo reads its reply as one


def test_a_transaction_of_one_claim_and_of_none() -> None:
    one = claim_transaction("/g/owners", ["r"], b"d", OPEN_ACL_UNSAFE)
    assert isinstance(one, SharedCreates) and len(one.operations) == 1
    assert bytes(one.serialize()) == bytes(Transaction(one.operations).serialize())
    with pytest.raises(ValueError, match="at least one"):
        claim_transaction("/g/owners", [], b"d", OPEN_ACL_UNSAFE)
