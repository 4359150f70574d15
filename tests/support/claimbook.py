"""A ClaimBook of a member that joined, for the tests that drive the claim book alone."""

from __future__ import annotations

from kazoo.client import KazooClient
from rebalanser.claims import ClaimBook
from rebalanser.containers import ensure_group
from rebalanser.paths import GroupPaths


def joined(member: KazooClient, paths: GroupPaths) -> ClaimBook:
    """A ClaimBook of a member that joined: its ephemeral member node exists."""
    assert ensure_group(member, paths, create_root=True)
    node = member.create(f"{paths.clients}/m0-", b"", ephemeral=True, sequence=True)
    book = ClaimBook(member, paths, "m0")
    book.reset(member.client_id[0], node)
    return book
