"""Creating a group's persistent containers without ever re-creating a group that is being deleted.

Deleting the group root ``G`` is how an operator or an administrator ends a group. Members create
the containers they need when missing, but only a member's first join, and only when its options ask
for it (``Options.create_group``), may create ``G`` itself; every other creation names a direct child
of ``G`` without ``makepath``, so it fails (NoNode) instead of bringing back a group that was deleted,
even while the deletion is in progress. A root carrying the deletion mark (:data:`wire.DELETION_MARK`,
written by ``rebalanser group delete``) is a group being deleted: nothing is created in it.
"""

from __future__ import annotations

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from rebalanser import wire
from rebalanser.member_state import Found
from rebalanser.paths import GroupPaths

__all__ = ["Found", "check_group", "ensure_container", "ensure_group"]


def ensure_container(zk: KazooClient, path: str) -> bool:
    """Creates ``path`` (a child of an existing node) if missing; False when its parent is gone."""
    if zk.exists(path) is not None:
        return True
    try:
        zk.create(path, b"")
    except NodeExistsError:
        pass
    except NoNodeError:
        return False
    return True


def check_group(zk: KazooClient, paths: GroupPaths, create_root: bool) -> Found:
    """Reads the group root (creating it first when ``create_root``), then creates its missing
    containers unless it is missing or marked deleted."""
    if create_root:
        zk.ensure_path(paths.root)
    try:
        data, _ = zk.get(paths.root)
    except NoNodeError:
        return Found.MISSING
    if wire.marks_deletion(data):
        return Found.DELETED
    pending = [(path, zk.exists_async(path)) for path in paths.containers() if path != paths.root]
    missing = [path for path, reply in pending if reply.get() is None]
    return Found.EXISTS if all(ensure_container(zk, path) for path in missing) else Found.MISSING


def ensure_group(zk: KazooClient, paths: GroupPaths, create_root: bool) -> bool:
    """Creates the missing containers of the group (the root too when ``create_root``); False when
    the root does not exist or is being deleted (then nothing was created)."""
    return check_group(zk, paths, create_root) is Found.EXISTS
