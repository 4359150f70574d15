"""The upgrade to an operator identity: a group an older operator created under the tenant's
credentials (its nodes name the group's digest and the world, not the operator) is taken over once.

    taken = take_over_group(ctx, rt, acl)     # rt's own group; acl: identity.group_acl(...)

Only this object's own group is taken over (its root carries this object's marker, UID included: a
root someone planted cannot know a UID the API server gave later). The group's credentials open a
short session of their own for it (the operator's identity cannot change those nodes), closed at once:
the operator's nodes (root, containers, ``G/config``, the resources) get ``acl``; the workers' nodes
keep their ACL with the operator's identity added, so that the operator's own session can read and
re-ACL them from then on; a node the group's credentials may not re-ACL (a member's session record,
READ only) is left as it is. Returns None for any other root; raises ``NoAuthError`` when the group's
credentials do not open it either.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.security import ACL
from rebalanser.paths import GroupPaths

from rebalanser_operator.apply.aclwalk import settle_acl_writes, walk_acls
from rebalanser_operator.apply.reconcile import OwnerMarker, retargeted

if TYPE_CHECKING:
    from rebalanser_operator.controller.context import Context
    from rebalanser_operator.controller.state import GroupRuntime


def take_over_group(ctx: Context, rt: GroupRuntime, acl: Sequence[ACL]) -> int | None:
    """Re-ACLs ``rt``'s own group for the operator's identity (see the module); returns how many nodes
    changed, None (nothing done) when the root is not this object's own."""
    assert rt.path is not None and rt.connect is not None and ctx.identity is not None
    user = f"{rt.user}#takeover"
    zk = ctx.pool.acquire(rt.connect, user, rt.session_timeout, tls=rt.tls, credentials=rt.session_credentials(),
                          tenant=True)
    try:
        if not ctx.pool.wait_connected(zk, ctx.options.connect_wait):
            raise KazooTimeoutError(f"cannot connect to ZooKeeper at {rt.connect} with the group's credentials")
        paths = GroupPaths.of(rt.path)
        data, _ = zk.get(paths.root)
        marker = OwnerMarker.parse(data)
        own = OwnerMarker(rt.namespace, rt.name, rt.uid, ctx.tenancy.cluster_id)
        if marker is None or marker.uid != rt.uid or not own.same_object(marker):
            return None
        return _re_acl(zk, paths, list(acl), ACL(ctx.identity.all().perms, ctx.identity.id))
    finally:
        ctx.pool.release(user)


def _re_acl(zk: KazooClient, paths: GroupPaths, acl: list[ACL], operator: ACL) -> int:
    """The operator's nodes get ``acl``; every other node its own ACL (:func:`retargeted` to ``acl``'s
    digests) with ``operator`` added. Level by level, pipelined."""
    own_nodes = {paths.root, *paths.containers(), paths.config}
    writes = []
    for read in walk_acls(zk, [paths.root]):
        if read.acl is None or read.stat is None:
            continue
        node, current = read.node, read.acl
        if node in own_nodes or node.rsplit("/", 1)[0] == paths.resources:
            wanted = acl
        else:
            wanted = [*(e for e in retargeted(current, acl, operator.id) if e.id != operator.id), operator]
        if set(current) != set(wanted):
            writes.append(zk.set_acls_async(node, wanted, version=read.stat.aversion))
    changed, _ = settle_acl_writes(writes)  # a write refused: a member's session record (READ only for the group)
    return changed
