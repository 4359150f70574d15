"""Create, fill, configure and delete a group without Kubernetes: the library-only administrator's path.

    from rebalanser import Algorithm, GroupConfig
    from rebalanser.admin import GroupAdmin, connect

    with connect("zk-0:2181,zk-1:2181", credentials=("orders", "s3cret")) as zk:
        group = GroupAdmin(zk, "/rebalanser/orders")
        group.create(GroupConfig(algorithm=Algorithm.GLOBAL_BARRIER))
        group.add_resources([f"orders-{i}" for i in range(12)])
        print(group.resources())

The ``rebalanser group`` commands (:mod:`rebalanser.cli`) are this module on the command line. Where a
ResourceGroup manages the group, the operator is its writer: a group whose root names a ResourceGroup is
refused here.

What it guarantees:

- ``connect`` takes the worker's connection options: the connect string, digest ``credentials`` (a
  ``(user, password)`` pair or a :class:`~rebalanser.credentials.PasswordFile`, read once) and
  :class:`~rebalanser.tls.TlsOptions`. The nodes it creates carry the ACL a worker with the same
  credentials gives its own nodes: all permissions for that digest and nothing for anyone else (open
  without credentials). Missing parents of the group path are created open, since other groups share them.
- Every operation is idempotent: creating an existing group, adding a resource that exists or removing
  one that does not changes nothing and is not an error. The returned lists say what did change.
- :meth:`GroupAdmin.delete` removes only the group's own layout (the children named in
  :mod:`rebalanser.paths` and what lies below them), then the root. It refuses while members are live,
  naming them, unless ``force``: then it first marks the group deleted (the root's data), which has
  every member leave gracefully and end (:class:`~rebalanser.errors.GroupDeletedError`) instead of
  re-creating what is being deleted, and waits for them (bounded) before it deletes. What is left and
  the root go in one transaction, so nothing is re-created in between: it never leaves an empty group
  behind. A root holding anything outside the layout is left in place (unmarked), naming what it found.

It does not promise atomicity across calls: a worker that joins while resources are being added sees
them arrive over several rebalances, which is what the protocol is for.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError, NotEmptyError
from kazoo.protocol.states import WatchedEvent
from kazoo.security import ACL, OPEN_ACL_UNSAFE

from rebalanser import wire
from rebalanser.config import Algorithm, GroupConfig
from rebalanser.connect_string import parse_connect_string
from rebalanser.credentials import DigestState, PasswordFile, PasswordFileError, read_password
from rebalanser.errors import GroupNotFoundError, InvalidInputError, RebalanserError
from rebalanser.paths import GroupPaths, MemberNode, validate_resource_name
from rebalanser.tls import TlsOptions

__all__ = [
    "Credentials",
    "Deletion",
    "GroupAdmin",
    "GroupBusyError",
    "GroupManagedError",
    "GroupNotEmptyError",
    "GroupNotFoundError",
    "connect",
]

Credentials = tuple[str, str] | PasswordFile

#: The group root's children that belong to the protocol (docs/protocol.md): ``delete`` removes these.
KNOWN_CHILDREN = ("resources", "clients", "sessions", "epoch", "config", "owners", "assignment", "barrier", "stopped",
                  "state")
_BATCH = 1000  # requests in flight at once
_AT_ONCE = 500  # at most this many znodes left over are deleted with the root in one transaction
DELETE_PASSES = 8
#: How long :meth:`GroupAdmin.delete` waits for live members to leave a group marked deleted.
MEMBERS_LEAVE_WAIT = 60.0


class GroupManagedError(RebalanserError):
    """A ResourceGroup manages this group: change it through the ResourceGroup, not here."""


class GroupBusyError(RebalanserError):
    """Members are live in the group: deleting it under them would only have them re-create it."""


class GroupNotEmptyError(RebalanserError):
    """The group root holds children that are not the protocol's; they were left in place."""


@dataclass(frozen=True)
class Deletion:
    """What :meth:`GroupAdmin.delete` did: znodes deleted, the members that were live when it began,
    and those of them still there when it stopped waiting (their nodes were deleted with the group)."""

    deleted: int
    members: tuple[str, ...] = ()
    stayed: tuple[str, ...] = ()


@contextmanager
def connect(
    hosts: str, *, credentials: Credentials | None = None, tls: TlsOptions | None = None, timeout: float = 15.0,
) -> Iterator[KazooClient]:
    """A started client with the worker's connection options; closed when the block ends."""
    parse_connect_string(hosts)
    auth, acl = _digest(credentials)
    zk = KazooClient(hosts=hosts, timeout=timeout, auth_data=auth, default_acl=acl,
                     **(tls.kazoo_arguments() if tls is not None else {}))
    zk.start(timeout=timeout)
    try:
        yield zk
    finally:
        zk.stop()
        zk.close()


def _digest(credentials: Credentials | None) -> tuple[list[tuple[str, str]] | None, list[ACL] | None]:
    """kazoo's ``auth_data`` and ``default_acl`` for the credentials (both None without any)."""
    if credentials is None:
        return None, None
    if isinstance(credentials, PasswordFile):
        try:
            user, password = credentials.username, read_password(credentials.path)
        except PasswordFileError as exc:
            raise InvalidInputError(str(exc)) from exc
    else:
        user, password = credentials
    if not user or not password:
        raise InvalidInputError("digest credentials need both a user and a password")
    state = DigestState(user, password)
    return [("digest", state.auth())], state.acl(time.monotonic())


def managed_by(data: bytes) -> str | None:
    """``namespace/name`` of the ResourceGroup a group root's data names (None: no ResourceGroup)."""
    owner = wire.decode_owner(data)
    return None if owner is None else f"{owner.get('namespace')}/{owner.get('name')}"


class GroupAdmin:
    """The administrator's view of one group path on a connected client (:func:`connect`)."""

    def __init__(self, zk: KazooClient, path: str) -> None:
        self._zk = zk
        self.paths = GroupPaths.of(path)

    # ------------------------------------------------------------------------------------ the group

    def exists(self) -> bool:
        return self._zk.exists(self.paths.root) is not None

    def create(self, config: GroupConfig | None = None) -> bool:
        """Makes the group and its containers exist; writes ``config`` to ``G/config`` when given (without
        one, workers use their own options until a config is written). True if the root was created."""
        parent = self.paths.root.rsplit("/", 1)[0]
        if parent:
            self._zk.ensure_path(parent, acl=OPEN_ACL_UNSAFE)
        try:
            self._zk.create(self.paths.root, b"")
            created = True
        except NodeExistsError:
            self._check_unmanaged()
            created = self._unmark()
        for container in self.paths.containers()[1:]:
            try:
                self._zk.create(container, b"")
            except NodeExistsError:
                pass
        if config is not None:
            self.set_config(config)
        return created

    def delete(self, *, force: bool = False, wait: float = MEMBERS_LEAVE_WAIT) -> Deletion:
        """Deletes the group's layout and then its root. Members live in the group refuse it
        (:class:`GroupBusyError`, naming them) unless ``force``: the root is marked deleted first, every
        member leaves (as on a stop) and ends, and the deletion waits up to ``wait`` seconds for them to
        go; the nodes of any that stay are deleted with the group. Other children of the root are left,
        and the root with them, unmarked (:class:`GroupNotEmptyError`). A missing group deletes nothing."""
        if not self.exists():
            return Deletion(0)
        self._check_unmanaged()
        live = tuple(self.members())
        if live and not force:
            raise GroupBusyError(
                f"{len(live)} members are live in {self.paths.root}: {_some(live)}; stop them first, or "
                "delete it with --force (they leave the group and end)"
            )
        self._check_layout()
        self._mark()
        stayed = tuple(self._wait_for_members(wait)) if live else ()
        return Deletion(self._delete_all(), live, stayed)

    def _check_layout(self) -> None:
        unknown = sorted(set(self._children(self.paths.root)) - set(KNOWN_CHILDREN))
        if unknown:
            raise GroupNotEmptyError(
                f"{self.paths.root} holds children that are not the group's ({', '.join(unknown[:10])}); "
                "nothing was deleted"
            )

    def _mark(self) -> None:
        try:
            self._zk.set(self.paths.root, wire.DELETION_MARK)
        except NoNodeError:
            pass

    def _unmark(self) -> bool:
        """Clears a deletion mark left by a deletion that did not finish; True if there was one."""
        data, stat = self._zk.get(self.paths.root)
        if not wire.marks_deletion(data):
            return False
        self._zk.set(self.paths.root, b"", version=stat.version)
        return True

    def _wait_for_members(self, wait: float) -> list[str]:
        """Waits up to ``wait`` seconds for ``G/clients`` to empty; the members still there."""
        changed = threading.Event()

        def fired(_event: WatchedEvent) -> None:
            changed.set()

        deadline = time.monotonic() + wait
        while True:
            changed.clear()
            try:
                left = self._zk.get_children(self.paths.clients, watch=fired)
            except NoNodeError:
                return []
            if not left or time.monotonic() >= deadline:
                return [node.member_id for node in sorted(filter(None, map(MemberNode.parse, left)))]
            changed.wait(max(0.0, deadline - time.monotonic()))

    def _delete_all(self) -> int:
        """The layout's subtrees in bulk, then what is left with the root in one transaction (a member
        re-creating something in between makes it fail: then again, after a growing pause)."""
        deleted = 0
        for attempt in range(DELETE_PASSES):
            if attempt:
                time.sleep(min(0.05 * 2 ** (attempt - 1), 1.0))
            for child in self._children(self.paths.root):
                if child in KNOWN_CHILDREN:
                    deleted += _delete_tree(self._zk, f"{self.paths.root}/{child}")
            removed = self._delete_rest_with_root()
            if removed is not None:
                return deleted + removed
        raise GroupBusyError(f"{self.paths.root} keeps getting new znodes; stop its members and delete it again")

    def _delete_rest_with_root(self) -> int | None:
        """What is left below the root, and the root, in ONE transaction: the count (0: the root is
        already gone), or None when it must be tried again."""
        try:
            children = self._zk.get_children(self.paths.root)
        except NoNodeError:
            return 0
        unknown = sorted(set(children) - set(KNOWN_CHILDREN))
        if unknown:
            self._unmark()
            raise GroupNotEmptyError(
                f"{self.paths.root} holds children that are not the group's ({', '.join(unknown[:10])}); "
                "deleted the group's own znodes and left the root in place"
            )
        nodes: list[str] = []
        if not all(collect_bottom_up(self._zk, f"{self.paths.root}/{child}", nodes) for child in children):
            return None
        if len(nodes) >= _AT_ONCE:
            return None
        transaction = self._zk.transaction()
        for node in [*nodes, self.paths.root]:
            transaction.delete(node)
        if any(isinstance(result, Exception) for result in transaction.commit()):
            return None
        return len(nodes) + 1

    def _children(self, path: str) -> list[str]:
        try:
            return list(self._zk.get_children(path))
        except NoNodeError:
            return []

    def members(self) -> list[str]:
        """The live members' ids, in election order."""
        try:
            children = self._zk.get_children(self.paths.clients)
        except NoNodeError:
            return []
        nodes = sorted(node for node in map(MemberNode.parse, children) if node is not None)
        return [node.member_id for node in nodes]

    # -------------------------------------------------------------------------------- the resources

    def resources(self) -> list[str]:
        """The group's resources, sorted (:class:`GroupNotFoundError` without the group)."""
        try:
            return sorted(self._zk.get_children(self.paths.resources))
        except NoNodeError:
            raise self._not_found() from None

    def add_resources(self, names: Iterable[str]) -> list[str]:
        """Creates ``G/resources/<name>`` for each name; returns the names that were new. Every name is
        checked before anything is written (:class:`~rebalanser.errors.InvalidInputError`)."""
        wanted = _validated(names)
        self._require_resources_container()
        return self._pipelined(wanted, lambda name: self._zk.create_async(self.paths.resource(name), b""),
                               NodeExistsError)

    def remove_resources(self, names: Iterable[str]) -> list[str]:
        """Deletes ``G/resources/<name>`` for each name; returns the names that were there. The owner of a
        removed resource is asked to stop it at the next rebalance."""
        wanted = _validated(names)
        self._require_resources_container()
        return self._pipelined(wanted, lambda name: self._zk.delete_async(self.paths.resource(name)), NoNodeError)

    def _pipelined(self, names: Sequence[str], request: Any, skipped: type[Exception]) -> list[str]:
        done: list[str] = []
        for start in range(0, len(names), _BATCH):
            batch = names[start:start + _BATCH]
            pending = [(name, request(name)) for name in batch]
            for name, result in pending:
                try:
                    result.get()
                except skipped:
                    continue
                done.append(name)
        return done

    def _require_resources_container(self) -> None:
        self._check_unmanaged()
        if self._zk.exists(self.paths.resources) is None:
            raise self._not_found()

    # ----------------------------------------------------------------------------------- the config

    def config(self) -> GroupConfig | None:
        """``G/config`` (None: there is none, and each worker uses its own options)."""
        try:
            data, _ = self._zk.get(self.paths.config)
        except NoNodeError:
            if not self.exists():
                raise self._not_found() from None
            return None
        return wire.decode_config(data, path=self.paths.config)

    def set_config(self, config: GroupConfig) -> None:
        """Writes ``G/config``; every member applies it from its next rebalance on."""
        if not self.exists():
            raise self._not_found()
        self._check_unmanaged()
        data = wire.encode_config(config)
        try:
            self._zk.create(self.paths.config, data)
        except NodeExistsError:
            self._zk.set(self.paths.config, data)

    def update_config(
        self, *, algorithm: Algorithm | None = None, min_interval: float | None = None,
        max_interval: float | None = None, departure_grace: float | None = None,
    ) -> GroupConfig:
        """Changes the named settings of ``G/config`` (the others are kept; a group without a config starts
        from the defaults) and returns what was written."""
        current = self.config() or GroupConfig()
        changes: dict[str, Any] = {
            "algorithm": algorithm, "min_interval_seconds": min_interval, "max_interval_seconds": max_interval,
            "departure_grace_seconds": departure_grace,
        }
        try:
            updated = replace(current, **{key: value for key, value in changes.items() if value is not None})
        except ValueError as exc:
            raise InvalidInputError(str(exc)) from exc
        self.set_config(updated)
        return updated

    def clear_config(self) -> bool:
        """Deletes ``G/config`` (workers go back to their own options); True if there was one."""
        try:
            self._zk.delete(self.paths.config)
        except NoNodeError:
            return False
        return True

    # -------------------------------------------------------------------------------------- helpers

    def _check_unmanaged(self) -> None:
        try:
            data, _ = self._zk.get(self.paths.root)
        except NoNodeError:
            return
        owner = managed_by(data)
        if owner is not None:
            raise GroupManagedError(
                f"{self.paths.root} is managed by ResourceGroup {owner}: change it through the ResourceGroup"
            )

    def _not_found(self) -> GroupNotFoundError:
        return GroupNotFoundError(f"group {self.paths.root} does not exist (rebalanser group create makes it)")


def _some(members: Sequence[str], shown: int = 5) -> str:
    return ", ".join(members[:shown]) + (f", … (+{len(members) - shown})" if len(members) > shown else "")


def collect_bottom_up(zk: KazooClient, node: str, into: list[str], limit: int = _AT_ONCE) -> bool:
    """Appends ``node``'s descendants, then ``node`` (children first); False when it is gone meanwhile
    or there are more than ``limit`` (what one transaction takes). The operator's deletion of a group
    root uses it too."""
    try:
        children = zk.get_children(node)
    except NoNodeError:
        return False
    for child in children:
        if len(into) >= limit or not collect_bottom_up(zk, f"{node}/{child}", into, limit):
            return False
    into.append(node)
    return True


def _validated(names: Iterable[str]) -> list[str]:
    unique = list(dict.fromkeys(names))
    for name in unique:
        validate_resource_name(name)
    return unique


def _delete_tree(zk: KazooClient, node: str, attempts: int = 3) -> int:
    """Deletes ``node`` and everything below it; returns the count. The children are deleted with their
    requests in flight together; those that turn out to have children of their own are descended into.
    Children created meanwhile (a live member's) are deleted in up to ``attempts`` passes."""
    try:
        children = zk.get_children(node)
    except NoNodeError:
        return 0
    deleted = 0
    for start in range(0, len(children), _BATCH):
        pending = [(child, zk.delete_async(f"{node}/{child}")) for child in children[start:start + _BATCH]]
        for child, result in pending:
            try:
                result.get()
                deleted += 1
            except NotEmptyError:
                deleted += _delete_tree(zk, f"{node}/{child}")
            except NoNodeError:
                pass
    try:
        zk.delete(node)
    except NoNodeError:
        return deleted
    except NotEmptyError:
        if attempts <= 1:
            raise
        return deleted + _delete_tree(zk, node, attempts - 1)
    return deleted + 1
