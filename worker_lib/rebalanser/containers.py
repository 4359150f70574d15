"""Creating a group's persistent containers without ever re-creating a group that is being deleted.

Deleting the group root ``G`` is how an operator or an administrator ends a group. Members create
the containers they need when missing, but only a member's first join may create ``G`` itself;
every other creation names a direct child of ``G`` without ``makepath``, so it fails (NoNode)
instead of bringing back a group that was deleted, even while the deletion is in progress.
"""

from __future__ import annotations

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from rebalanser.paths import GroupPaths


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


def ensure_group(zk: KazooClient, paths: GroupPaths, create_root: bool) -> bool:
    """Creates the missing containers of the group (the root too when ``create_root``); False when
    the root does not exist (then nothing was created)."""
    if create_root:
        zk.ensure_path(paths.root)
    pending = [(path, zk.exists_async(path)) for path in paths.containers() if path != paths.root]
    missing = [path for path, reply in pending if reply.get() is None]
    return all(ensure_container(zk, path) for path in missing)
