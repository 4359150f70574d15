"""``getEphemerals``: the session's own ephemeral nodes under a prefix, in one request (with and without
a chroot in the connect string)."""

from __future__ import annotations

from kazoo.client import KazooClient
from rebalanser.ephemerals import own_ephemerals

from tests.support.zk import admin_client


def test_only_the_sessions_own_ephemeral_nodes_under_the_prefix_are_listed(
    zk: KazooClient, zk_hosts: str, group_path: str
) -> None:
    owners = f"{group_path}/owners"
    zk.ensure_path(owners)
    zk.create(f"{owners}/mine", ephemeral=True)
    zk.create(f"{owners}/persistent")
    zk.create(f"{owners}x", ephemeral=True)  # the same prefix without the slash
    with admin_client(zk_hosts) as other:
        other.create(f"{owners}/theirs", ephemeral=True)
        assert own_ephemerals(zk, f"{owners}/") == {f"{owners}/mine"}
        assert own_ephemerals(other, f"{owners}/") == {f"{owners}/theirs"}
    with admin_client(zk_hosts + group_path) as rooted:
        rooted.create("/owners/rooted", ephemeral=True)
        assert own_ephemerals(rooted, "/owners/") == {"/owners/rooted"}
