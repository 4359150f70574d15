"""A subtree's ACLs, read level by level with each level's reads pipelined, and the re-ACL writes that
follow them settled: the one walk behind an adoption, a rotation's re-ACL of the worker znodes and the
takeover of an older operator's group.

    for read in walk_acls(zk, [root]):
        if read.acl is None: ...            # its ACL refuses this session (its children are not walked)
        writes.append(zk.set_acls_async(read.node, wanted, version=read.stat.aversion))
    changed, refused = settle_acl_writes(writes)
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NoAuthError, NoNodeError
from kazoo.interfaces import IAsyncResult
from kazoo.protocol.states import ZnodeStat
from kazoo.security import ACL


@dataclass(frozen=True)
class AclRead:
    """One node's ACL and stat as read; ``acl`` and ``stat`` are None when its ACL refuses this session."""

    node: str
    acl: list[ACL] | None
    stat: ZnodeStat | None


def walk_acls(zk: KazooClient, first: Iterable[str]) -> Iterator[AclRead]:
    """Every node of the subtrees under ``first`` (themselves included), a level at a time, each level's
    ACL and children reads pipelined. A node gone meanwhile is left out; one that refuses this session
    is yielded with no ACL, and its children (unreadable too) are not walked."""
    level = list(first)
    while level:
        replies = [(node, zk.get_acls_async(node), zk.get_children_async(node)) for node in level]
        level = []
        for node, acl_reply, children_reply in replies:
            try:
                current, stat = acl_reply.get()
                children = children_reply.get()
            except NoNodeError:
                continue
            except NoAuthError:
                yield AclRead(node, None, None)
                continue
            yield AclRead(node, current, stat)
            level.extend(f"{node}/{child}" for child in children)


def settle_acl_writes(writes: Iterable[IAsyncResult]) -> tuple[int, int]:
    """Waits for ``set_acls_async`` replies: (how many changed, how many the node's ACL refused). A node
    gone or changed meanwhile (its version moved) counts as neither: the next pass sees it again."""
    changed = refused = 0
    for reply in writes:
        try:
            reply.get()
            changed += 1
        except (NoNodeError, BadVersionError):
            continue
        except NoAuthError:
            refused += 1
    return changed, refused
