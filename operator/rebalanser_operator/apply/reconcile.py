"""Make a ZooKeeper group match a ResourceGroup spec: plain functions on a started KazooClient.

    result = reconcile_group(zk, "/rebalanser/shop/orders", desired={"orders-0", "orders-1"},
                             config=spec.group_config(2.0), acl=group_acl(credentials),
                             owner=OwnerMarker("shop", "orders", uid))
    delete_group(zk, "/rebalanser/shop/orders", OwnerMarker("shop", "orders", uid))

Guarantees, given a connected client:

* after :func:`reconcile_group` returns, the children of ``G/resources`` are exactly ``desired`` (as of
  that moment) and ``G/config`` holds ``config``; a name in ``desired`` is never deleted;
* every call is idempotent and safe to repeat after a failure at any point (creates tolerate
  existing nodes, deletes tolerate missing ones, a failed ``multi`` is redone op by op);
* writes go out as ``multi`` transactions of at most ``batch_size`` operations and ~512 KiB, several in
  flight at once, so 10,000 resources take well under a second on a local ensemble;
* group znodes get ``acl`` (digest-protected when credentials are given); existing group znodes with a
  different ACL are corrected. Without the operator's identity the parents above the group are shared
  and left open; with it (``identity``) they are the operator's alone (:func:`ensure_parents`) and an
  existing root counts only when the operator created it (:func:`_check_created_here`);
* the group root records which ResourceGroup owns it (namespace, name, UID, cluster id), so two
  ResourceGroups, of one cluster or of two sharing the ensemble, can never fight over one path, and
  nothing that is not the object's own is ever taken over or deleted (:class:`GroupOwnedElsewhereError`):
  an existing root is adopted only when it carries the object's marker, or holds no data and nothing but
  the documented layout (:data:`LAYOUT`); deletion removes only that layout and the root.

Connection failures (``ConnectionLoss``, ``SessionExpired``...) propagate; callers retry.
"""

from __future__ import annotations

import json
import logging
import time
from collections import deque
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NoAuthError, NodeExistsError, NoNodeError, NotEmptyError
from kazoo.security import ACL, OPEN_ACL_UNSAFE, Id, Permissions, make_acl, make_digest_acl
from rebalanser import wire
from rebalanser.admin import collect_bottom_up
from rebalanser.config import GroupConfig
from rebalanser.paths import GroupPaths

from rebalanser_operator.apply.aclwalk import settle_acl_writes, walk_acls
from rebalanser_operator.controller.messages import SyncResult as SyncResult  # re-exported
from rebalanser_operator.identity import DigestCredentials, OperatorIdentity, parent_acl
from rebalanser_operator.status.groupread import config_of

log = logging.getLogger(__name__)

DEFAULT_BATCH = 1000
MAX_BATCH_BYTES = 512 * 1024
IN_FLIGHT = 4
_OP_OVERHEAD = 64
#: Inner nodes with at most this many children are descended into rather than batch-deleted.
_DESCEND_BELOW = 32


class GroupOwnedElsewhereError(RuntimeError):
    """The group path holds something that is not this ResourceGroup's: another one's group, another
    cluster's, or data that is not a group at all (it is never taken over)."""


class NotCreatedByOperatorError(GroupOwnedElsewhereError):
    """With the operator's identity: the group root exists but this operator did not create it (its ACL
    does not name the operator), and it is not this object's own group of an older operator; it is
    adopted only when the administrator asks (:data:`ADOPT_ANNOTATION`)."""


class ParentNotOwnedError(RuntimeError):
    """With the operator's identity: a node above the group (``/rebalanser``, the namespace root) has an
    ACL that refuses the operator, so the group root cannot be created there."""


#: The annotation by which the administrator asks the operator to adopt an existing root it did not create.
ADOPT_ANNOTATION = "rebalanser.io/adopt-znodes"


@dataclass(frozen=True)
class OwnerMarker:
    """Which ResourceGroup manages a group path (stored as JSON in the group root's data): the object's
    namespace, name and UID, and the id of the cluster it lives in. A marker whose ``uid`` is empty was
    released by its object (deleted with the znodes kept): the same namespace and name of the same
    cluster may take the group back. ``cluster_id`` None: a marker written before cluster ids."""

    namespace: str
    name: str
    uid: str = ""
    cluster_id: str | None = ""

    def to_json(self) -> bytes:
        body = {"resourceGroup": {"namespace": self.namespace, "name": self.name, "uid": self.uid,
                                  "clusterId": self.cluster_id or ""}}
        return json.dumps(body, sort_keys=True).encode()

    @staticmethod
    def parse(data: bytes) -> OwnerMarker | None:
        """The marker in a group root's data; None for no marker, or for anything else (foreign data)."""
        owner = wire.decode_owner(data)
        if owner is None:
            return None
        namespace, name, uid = owner.get("namespace"), owner.get("name"), owner.get("uid", "")
        cluster = owner.get("clusterId")
        if not (isinstance(namespace, str) and isinstance(name, str) and isinstance(uid, str)):
            return None
        if cluster is not None and not isinstance(cluster, str):
            return None
        return OwnerMarker(namespace, name, uid, cluster)

    def released(self) -> OwnerMarker:
        return OwnerMarker(self.namespace, self.name, "", self.cluster_id)

    def same_object(self, other: OwnerMarker) -> bool:
        """Whether ``other`` (found on a group root) lets this object (``self``) manage the group: it is
        this very object (same namespace, name and UID; the same cluster, or a marker older than cluster
        ids), or the same namespace and name of the same cluster released it."""
        if (self.namespace, self.name) != (other.namespace, other.name):
            return False
        if self.uid and other.uid == self.uid:
            return other.cluster_id is None or other.cluster_id == (self.cluster_id or "")
        return other.uid == "" and other.cluster_id is not None and other.cluster_id == (self.cluster_id or "")

    def marks(self, data: bytes) -> bool:
        """Whether a group root's ``data`` is this very object's marker (its UID; a released marker is
        nobody's)."""
        found = OwnerMarker.parse(data)
        return found is not None and bool(self.uid) and found.uid == self.uid and self.same_object(found)

    def describe(self, seen_from: OwnerMarker) -> str:
        """Who owns the group, as much as ``seen_from``'s tenant may know (another namespace stays unnamed)."""
        if self.cluster_id is not None and self.cluster_id != (seen_from.cluster_id or ""):
            return "a ResourceGroup of another cluster"
        if self.namespace != seen_from.namespace:
            return "a ResourceGroup of another namespace"
        if self.name != seen_from.name:
            return f"ResourceGroup {self.namespace}/{self.name}"
        return f"an earlier ResourceGroup {self.namespace}/{self.name} (uid {self.uid or '?'})"


def layout_names() -> frozenset[str]:
    """The names of a group root's children in the documented layout (every ``GroupPaths`` property
    naming a direct child of the root): the only children the operator adopts or deletes."""
    probe = GroupPaths("/g")
    names = set()
    for attribute in dir(GroupPaths):
        if isinstance(getattr(GroupPaths, attribute), property):
            value = getattr(probe, attribute)
            if isinstance(value, str) and value.startswith("/g/") and value.count("/") == 2:
                names.add(value[3:])
    return frozenset(names)


LAYOUT = layout_names()


def group_acl(credentials: DigestCredentials | None, previous: Sequence[ACL] = ()) -> list[ACL]:
    """Digest-protected writes (everything for the credentials' holder, and for the ``previous``
    credentials' entries during a rotation's grace period), world-readable; open without."""
    if credentials is None:
        return list(OPEN_ACL_UNSAFE)
    own = make_digest_acl(credentials.username, credentials.password, all=True)
    return [own, *(entry for entry in previous if entry != own), make_acl("world", "anyone", read=True)]


def retained_digests(current: Sequence[ACL], credentials: DigestCredentials,
                     identity: OperatorIdentity | None = None) -> list[ACL]:
    """The digest entries of ``current`` (a group root's ACL) other than ``credentials``' own and the
    operator's, provided that ``current`` names ``credentials`` too: what a rotation's grace period left
    in place (an operator restarted inside it finds them there). Empty when ``current`` does not name
    ``credentials`` (then it is not a grace period of theirs)."""
    own = make_digest_acl(credentials.username, credentials.password, all=True)
    if own.id not in {entry.id for entry in current}:
        return []
    operator = identity.id if identity is not None else None
    return [make_digest_acl_of(entry.id) for entry in current
            if entry.id.scheme == "digest" and entry.id != own.id and entry.id != operator]


def make_digest_acl_of(id_: Id) -> ACL:
    """Every permission for the digest ``id_`` (the form the grace period keeps a previous password in)."""
    return ACL(Permissions.ALL, id_)


def reconcile_group(
    zk: KazooClient,
    path: str,
    *,
    desired: Collection[str],
    config: GroupConfig,
    acl: Sequence[ACL],
    owner: OwnerMarker,
    confine: str | None = None,
    batch_size: int = DEFAULT_BATCH,
    identity: OperatorIdentity | None = None,
    adopt: bool = False,
) -> SyncResult:
    """Creates the group if needed, syncs ``G/resources`` to ``desired`` and writes ``G/config``.

    ``confine``: the namespace root the group lies in; no node below it down to the group's parent may
    be another group's root (a group inside another group's znodes is refused). ``identity``: the
    operator's own; the nodes above the group are then created (or taken over) with
    :func:`~rebalanser_operator.identity.parent_acl`, and an existing root is claimed only when this
    operator created it, or it is this object's own group (an older operator's), or ``adopt`` (the
    administrator's annotation) and the whole subtree can be re-ACLed."""
    started = time.monotonic()
    paths = GroupPaths.of(path)
    if confine is not None:
        check_not_nested(zk, paths.root, confine, owner, identity=identity)
    refused: tuple[str, ...] = ()
    if identity is not None:
        refused = ensure_parents(zk, paths.root, confine, identity)
        if refused and zk.exists(paths.root) is None:
            raise ParentNotOwnedError(_parents_message(refused))
    fresh = create_new_group(zk, paths, desired, config, acl, owner, batch_size=batch_size, identity=identity)
    if fresh is not None:
        return SyncResult(fresh, 0, len(desired), True, time.monotonic() - started, refused)
    ensure_group(zk, paths, acl, owner, identity=identity, adopt=adopt)
    created, deleted = sync_resources(zk, paths, desired, acl, batch_size=batch_size)
    written = write_config(zk, paths, config, acl)
    return SyncResult(created, deleted, len(desired), written, time.monotonic() - started, refused)


def _parents_message(nodes: Sequence[str]) -> str:
    return (f"the ACL of {', '.join(nodes)} does not let the operator's identity in (it was set by someone "
            "else): the operator cannot create groups below it. A ZooKeeper administrator must give it back "
            "(setAcl with the operator's identity, see docs/operator.md, Security model)")


def parent_nodes(root: str, confine: str | None) -> tuple[list[str], list[str]]:
    """The nodes above group ``root``: (the namespace root ``confine`` and the nodes above it, the nodes
    between it and the group). Without ``confine``: every node above the group counts as the first kind."""
    segments = [s for s in root.split("/") if s][:-1]
    nodes = ["/" + "/".join(segments[: i + 1]) for i in range(len(segments))]
    if confine is None:
        return nodes, []
    depth = len([s for s in confine.split("/") if s])
    return nodes[:depth], nodes[depth:]


def ensure_parents(zk: KazooClient, root: str, confine: str | None, identity: OperatorIdentity) -> tuple[str, ...]:
    """Creates the nodes above group ``root`` with :func:`parent_acl`, and takes over the namespace root
    and the nodes above it when they exist with another ACL (an older operator created them open):
    their ACL becomes :func:`parent_acl`. Nodes between the namespace root and the group that the
    operator did not create are left as they are. Returns the nodes whose ACL refused the operator."""
    acl = parent_acl(identity)
    shared, inner = parent_nodes(root, confine)
    refused: list[str] = []
    for node in [*shared, *inner]:
        try:
            zk.create(node, b"", acl=acl)
            continue
        except NodeExistsError:
            pass
        except NoAuthError:
            refused.append(node)
            continue
        if node in inner:
            continue
        try:
            current, stat = zk.get_acls(node)
            if set(current) != set(acl):
                zk.set_acls(node, acl, version=stat.aversion)
                log.info("took over %s (its ACL was %s)", node, _describe_acl(current))
        except NoAuthError:
            refused.append(node)
        except (NoNodeError, BadVersionError):
            continue  # changed meanwhile: the next reconcile looks again
    if refused:
        log.warning("%s", _parents_message(refused))
    return tuple(refused)


def _describe_acl(acl: Sequence[ACL]) -> str:
    return ", ".join(f"{entry.id.scheme}:{entry.id.id.partition(':')[0]}={entry.perms}" for entry in acl)


def create_new_group(
    zk: KazooClient,
    paths: GroupPaths,
    desired: Collection[str],
    config: GroupConfig,
    acl: Sequence[ACL],
    owner: OwnerMarker,
    *,
    batch_size: int = DEFAULT_BATCH,
    identity: OperatorIdentity | None = None,
) -> int | None:
    """A group that does not exist yet, in as few round trips as possible: the root (claimed for
    ``owner``), its containers, ``G/config`` and the first resources in one ``multi``, the remaining
    resources in pipelined batches. Returns how many resources it created, or None when the root already
    exists (or the transaction failed for another reason): the caller then takes the general path.
    With a thousand groups applied at once this is what keeps the first sync short: a new group costs
    one or two round trips instead of one per container, ACL check and config read."""
    acl_list = list(acl)
    head: list[_Op] = [_Create(paths.root, acl_list, owner.to_json())]
    head += [_Create(node, acl_list) for node in paths.containers() if node != paths.root]
    head.append(_Create(paths.config, acl_list, wire.encode_config(config)))
    resources: list[_Op] = [_Create(paths.resource(name), acl_list) for name in sorted(desired)]
    first = next(_batches([*head, *resources], max(batch_size, len(head))), [])
    rest = resources[len(first) - len(head):]
    for attempt in range(2):
        transaction = zk.transaction()
        for op in first:
            op.add_to(transaction)
        outcomes = transaction.commit()
        failure = next((outcome for outcome in outcomes if isinstance(outcome, Exception)), None)
        if failure is None:
            return len(first) - len(head) + run_batches(zk, rest, batch_size)
        if isinstance(outcomes[0], NoNodeError) and attempt == 0:
            parent = paths.root.rsplit("/", 1)[0]
            if not parent or identity is not None:
                return None  # with an identity, reconcile_group created the parents (or says why not)
            zk.ensure_path(parent)  # the parents above the group are shared and left open
            continue
        return None
    return None


def ensure_group(zk: KazooClient, paths: GroupPaths, acl: Sequence[ACL], owner: OwnerMarker, *,
                 identity: OperatorIdentity | None = None, adopt: bool = False) -> None:
    """Creates the group root (claimed for ``owner``) and its containers with ``acl``."""
    parent = paths.root.rsplit("/", 1)[0]
    if parent and identity is None:
        zk.ensure_path(parent)
    try:
        if identity is not None and zk.exists(paths.root) is not None:
            raise NodeExistsError()  # under a parent that refuses the operator, create says NoAuth first
        zk.create(paths.root, owner.to_json(), acl=list(acl))
    except NodeExistsError:
        if identity is not None:
            _check_created_here(zk, paths, owner, identity, acl, adopt)
        _claim(zk, paths, owner)
    for container in paths.containers():
        if container == paths.root:
            continue
        try:
            zk.create(container, b"", acl=list(acl))
        except NodeExistsError:
            pass
    for node in (paths.root, *paths.containers()[1:], paths.config):
        _ensure_acl(zk, node, acl)


def _check_created_here(zk: KazooClient, paths: GroupPaths, owner: OwnerMarker, identity: OperatorIdentity,
                        acl: Sequence[ACL], adopt: bool) -> None:
    """With the operator's identity, an existing root is claimed only when this operator created it (its
    ACL names the operator's identity with every permission), or it carries this very object's marker
    (its own group, created by an older operator: the upgrade), or the administrator asked for its
    adoption, which re-ACLs the whole subtree first (:func:`adopt_subtree`). Anything else raises
    :class:`NotCreatedByOperatorError` and nothing is written."""
    data, _ = zk.get(paths.root)
    current, _ = zk.get_acls(paths.root)
    if identity.names(current):
        return
    marker = OwnerMarker.parse(data)
    if marker is not None and owner.uid and marker.uid == owner.uid and owner.same_object(marker):
        return  # this object's own group of an older operator: the ACLs are corrected after the claim
    if adopt:
        adopt_subtree(zk, paths, acl, identity)
        return
    raise NotCreatedByOperatorError(
        f"znode {paths.root} exists but this operator did not create it (its ACL does not name the operator's "
        f"identity); it is left untouched. If it is this group's, annotate the ResourceGroup {ADOPT_ANNOTATION}=true "
        "to have the operator re-ACL and adopt it; otherwise choose another spec.zookeeper.path")


def adopt_subtree(zk: KazooClient, paths: GroupPaths, acl: Sequence[ACL], identity: OperatorIdentity) -> int:
    """The administrator's explicit adoption of a root this operator did not create: refused (raising
    :class:`NotCreatedByOperatorError`, nothing written) while any node of the subtree is ephemeral (a
    member or claim of a session nobody vouches for is never counted) or has an ACL that would refuse
    the operator; otherwise every node of the subtree gets ``acl``. Returns how many nodes changed."""
    nodes: list[tuple[str, list[ACL], int]] = []
    for read in walk_acls(zk, [paths.root]):
        node, current, stat = read.node, read.acl, read.stat
        if current is None or stat is None:
            raise NotCreatedByOperatorError(
                f"adopting {paths.root} refused: {node}'s ACL does not let the operator read it, so the "
                "subtree cannot be re-ACLed as a whole; nothing was changed")
        if stat.ephemeralOwner:
            raise NotCreatedByOperatorError(
                f"adopting {paths.root} refused: {node} is an ephemeral znode of a session the operator "
                "cannot vouch for (a member or claim planted before the adoption?); stop whoever holds it "
                "and retry")
        if not any(entry.perms & Permissions.ADMIN and entry.id in (Id("world", "anyone"), identity.id)
                   for entry in current):
            raise NotCreatedByOperatorError(
                f"adopting {paths.root} refused: {node}'s ACL ({_describe_acl(current)}) does not let the "
                "operator change it, so the subtree cannot be re-ACLed as a whole; nothing was changed")
        nodes.append((node, current, stat.aversion))
    changed = 0
    for node, current, aversion in nodes:
        if set(current) != set(acl):
            zk.set_acls(node, list(acl), version=aversion)
            changed += 1
    log.info("adopted %s: %d of %d znodes re-ACLed", paths.root, changed, len(nodes))
    return changed


def _claim(zk: KazooClient, paths: GroupPaths, owner: OwnerMarker) -> None:
    """Takes an existing group root only when it is this object's (or released to it), or holds no data
    and nothing but the documented layout (a group its workers created before the operator's first
    reconcile); anything else raises :class:`GroupOwnedElsewhereError` and nothing is written."""
    root = paths.root
    data, stat = zk.get(root)
    current = OwnerMarker.parse(data)
    if current is None:
        if data:
            raise GroupOwnedElsewhereError(
                f"znode {root} holds data that is not a ResourceGroup's owner marker (another application's "
                "znode?); it is left untouched: choose another spec.zookeeper.path")
        unknown = sorted(set(zk.get_children(root)) - LAYOUT)
        if unknown:
            shown = ", ".join(unknown[:5]) + (", ..." if len(unknown) > 5 else "")
            raise GroupOwnedElsewhereError(
                f"znode {root} has children that are not a group's ({shown}); it is left untouched: "
                "choose another spec.zookeeper.path")
    elif not owner.same_object(current):
        raise GroupOwnedElsewhereError(
            f"znode {root} is managed by {current.describe(owner)}; choose another spec.zookeeper.path "
            "(or delete that ResourceGroup first)")
    if current != owner:
        zk.set(root, owner.to_json(), version=stat.version)


def check_not_nested(zk: KazooClient, root: str, confine: str, owner: OwnerMarker, *,
                     identity: OperatorIdentity | None = None) -> None:
    """Raises :class:`GroupOwnedElsewhereError` when a node below ``confine`` (a namespace root, "" for
    the top of a chroot) down to ``root``'s parent is a group root: ``root`` would lie inside it. The
    namespace root itself is never a group's (a group lies strictly below it), so a marker there counts
    for nothing; with the operator's ``identity``, a marker counts only on a node this operator created."""
    prefix = confine.rstrip("/")
    rest = root[len(prefix):].strip("/").split("/")[:-1]
    nodes = []
    for segment in rest:
        prefix = f"{prefix}/{segment}"
        nodes.append(prefix)
    for node in nodes:
        try:
            data, _ = zk.get(node)
            if identity is not None and not identity.names(zk.get_acls(node)[0]):
                continue
        except NoNodeError:
            return
        marker = OwnerMarker.parse(data)
        if marker is not None:
            raise GroupOwnedElsewhereError(
                f"{root} lies inside the znodes of {marker.describe(owner)} (its root {node}); "
                "choose another spec.zookeeper.path")


def _ensure_acl(zk: KazooClient, node: str, acl: Sequence[ACL]) -> None:
    try:
        current, stat = zk.get_acls(node)
    except NoNodeError:
        return
    if set(current) != set(acl):
        zk.set_acls(node, list(acl), version=stat.aversion)


def reacl_group(zk: KazooClient, paths: GroupPaths, acl: Sequence[ACL], owner: OwnerMarker) -> bool:
    """A rotation's re-ACL of a group its last sync left in place: ``acl`` on the root, its containers and
    ``G/config`` (what :func:`ensure_group` gives them; the resources and the workers' znodes follow with
    :func:`migrate_worker_nodes_acl`), every read pipelined, then the writes. False, with nothing
    written, when the root or one of those nodes is gone, or the root no longer carries ``owner``'s very
    marker. A node changed meanwhile (``BadVersionError``) or refusing the session fails the call."""
    nodes = [paths.root, *paths.containers()[1:], paths.config]
    root = zk.get_async(paths.root)
    reads = [(node, zk.get_acls_async(node)) for node in nodes]
    try:
        data, _ = root.get()
        found = [(node, *reply.get()) for node, reply in reads]
    except NoNodeError:
        return False
    if OwnerMarker.parse(data) != owner:
        return False
    writes = [zk.set_acls_async(node, list(acl), version=stat.aversion)
              for node, current, stat in found if set(current) != set(acl)]
    for reply in writes:
        reply.get()
    return True


def retargeted(current: Sequence[ACL], acl: Sequence[ACL], keep: Id | None = None) -> list[ACL]:
    """A node's ACL moved to the digests of ``acl`` (a group's, during or after a rotation), keeping
    what the node was given: its digest entries are replaced by ``acl``'s digests, each with the
    permissions the node gave its digests (every permission when it named none), and its other entries
    (world, the operator's ``keep``) stay as they are. So a member's record stays unreadable to the
    world, a session record keeps READ only, a container keeps its world read."""
    digests = [entry.id for entry in acl if entry.id.scheme == "digest" and entry.id != keep]
    granted = 0
    others: list[ACL] = []
    for entry in current:
        if entry.id.scheme == "digest" and entry.id != keep:
            granted |= entry.perms
        else:
            others.append(entry)
    if not digests:
        return list(current)
    perms = granted or Permissions.ALL
    return [*others, *(ACL(perms, id_) for id_ in digests)]


def migrate_worker_nodes_acl(
    zk: KazooClient, paths: GroupPaths, acl: Sequence[ACL], *, resources: bool = False,
    identity: OperatorIdentity | None = None,
) -> int:
    """Moves every znode under the group root except ``G/config`` and ``G/resources`` (the
    operator's own, set by :func:`reconcile_group`) to the digests of ``acl`` (:func:`retargeted`: each
    keeps the permissions it gave its digests, and the world's): the containers' children workers create,
    persistent (``G/epoch``, ``G/state``, ``G/barrier``, the ``G/assignment`` and ``G/stopped``
    subtrees) and ephemeral (member nodes, claims, stop markers) alike; returns how many changed.
    With ``resources``, the resource nodes too (``G/resources/*``, created with the ACL of their day):
    when the group's ACL changes, so that a retired password keeps no write access anywhere.

    Run when the group's credentials rotate, and again during the rotation's grace period, on a session
    holding the old and the new ones (with the operator's ``identity``, a tenant session of the group's
    credentials only; the operator's entry is kept): the workers' nodes carry the credentials they were
    created with,
    and running workers move to the new password one by one, so each must still read and write what the
    others created. One level at a time, its reads and writes pipelined."""
    skip = {paths.config} if resources else {paths.config, paths.resources}
    level = [f"{paths.root}/{child}" for child in _children(zk, paths.root) if f"{paths.root}/{child}" not in skip]
    keep = identity.id if identity is not None else None
    writes = []
    unreadable = 0
    for read in walk_acls(zk, level):
        if read.acl is None or read.stat is None:
            unreadable += 1
            continue
        node = read.node
        wanted = list(acl) if node.rsplit("/", 1)[0] == paths.resources else retargeted(read.acl, acl, keep)
        if set(read.acl) != set(wanted):
            writes.append(zk.set_acls_async(node, wanted, version=read.stat.aversion))
    # a write refused: the node names none of the session's credentials; left as it is, the rest goes on
    changed, refused = settle_acl_writes(writes)
    refused += unreadable
    if refused:
        log.warning("%s: %d worker znodes refuse the operator's credentials; their ACL is left as it is",
                    paths.root, refused)
    return changed


def _children(zk: KazooClient, node: str) -> list[str]:
    try:
        return list(zk.get_children(node))
    except NoNodeError:
        return []


def sync_resources(
    zk: KazooClient,
    paths: GroupPaths,
    desired: Collection[str],
    acl: Sequence[ACL],
    *,
    batch_size: int = DEFAULT_BATCH,
) -> tuple[int, int]:
    """Makes the children of ``G/resources`` equal to ``desired``; returns (created, deleted)."""
    wanted = set(desired)
    existing = set(zk.get_children(paths.resources))
    missing = sorted(wanted - existing)
    removed = sorted(existing - wanted)
    acl_list = list(acl)
    run_batches(zk, [_Create(paths.resource(name), acl_list) for name in missing], batch_size)
    run_batches(zk, [_Delete(paths.resource(name)) for name in removed], batch_size)
    return len(missing), len(removed)


def write_config(zk: KazooClient, paths: GroupPaths, config: GroupConfig, acl: Sequence[ACL]) -> bool:
    """Writes ``G/config`` when its content differs; returns whether it wrote."""
    data = wire.encode_config(config)
    try:
        current, stat = zk.get(paths.config)
    except NoNodeError:
        try:
            zk.create(paths.config, data, acl=list(acl))
            return True
        except NodeExistsError:
            current, stat = zk.get(paths.config)
    if current == data:
        return False
    zk.set(paths.config, data, version=stat.version)
    return True


def read_config(zk: KazooClient, path: str) -> GroupConfig | None:
    """``G/config``; None when it is missing or not a valid config (either way, drift to repair)."""
    config = GroupPaths.of(path).config
    return config_of(zk.get_async(config), config)


@dataclass(frozen=True)
class Deletion:
    deleted: int
    left: tuple[str, ...] = ()  # children of the root outside the layout, left in place with the root


def delete_group(
    zk: KazooClient, path: str, owner: OwnerMarker, *, batch_size: int = DEFAULT_BATCH, attempts: int = 8
) -> Deletion:
    """Deletes the documented layout of a group ``owner`` manages, then its root; returns what it did.

    Raises :class:`GroupOwnedElsewhereError`, deleting nothing, when the root does not carry
    ``owner``'s marker (another object's, another cluster's, none at all). Children of the root outside
    the layout (:data:`LAYOUT`) are never deleted: the root then stays, with them and a released marker
    (the same namespace and name may take it back). Live workers may recreate their znodes meanwhile,
    so the deletion is repeated, up to ``attempts`` passes, each after a growing pause (50 ms doubling
    up to 1 s: a member whose claim or node was just deleted stops and re-reads before it gives up on
    the group). Each pass ends with what is left and the root deleted in one transaction, so that a
    member cannot re-create a container between the two; raises :class:`NotEmptyError` if the group
    still exists after every pass.
    """
    root = GroupPaths.of(path).root
    try:
        data, _ = zk.get(root)
    except NoNodeError:
        return Deletion(0)
    current = OwnerMarker.parse(data)
    if current is None or not owner.same_object(current):
        whose = current.describe(owner) if current is not None else "nobody (no owner marker)"
        raise GroupOwnedElsewhereError(f"znode {root} is managed by {whose}; it was not deleted")
    deleted = 0
    for attempt in range(attempts):
        if attempt:
            time.sleep(min(0.05 * 2 ** (attempt - 1), 1.0))
        children = set(_children(zk, root))
        for child in sorted(children & LAYOUT):
            deleted += delete_tree(zk, f"{root}/{child}", batch_size=batch_size)
        unknown = tuple(sorted(set(_children(zk, root)) - LAYOUT))
        if unknown:
            zk.set(root, owner.released().to_json())
            return Deletion(deleted, unknown)
        removed = _delete_rest_with_root(zk, root)
        if removed is not None:
            return Deletion(deleted + removed)
    raise NotEmptyError(f"{root} keeps getting new children; stop the workers and retry")


_AT_ONCE = 500  # at most this many znodes left over are deleted with the root in one transaction


def _delete_rest_with_root(zk: KazooClient, root: str) -> int | None:
    """Deletes what live members re-created since the bulk deletion (their member nodes, claims and
    containers) and the root in ONE transaction, so that nothing can be re-created in between: the
    count, 0 when the root is already gone, None when it must be tried again (a znode was created or
    deleted meanwhile, a child outside the layout appeared, or too much is left for one transaction)."""
    try:
        children = zk.get_children(root)
    except NoNodeError:
        return 0
    if set(children) - LAYOUT:
        return None  # the next pass releases the root to them
    paths: list[str] = []
    for child in children:
        if not collect_bottom_up(zk, f"{root}/{child}", paths, _AT_ONCE):
            return None
    if len(paths) >= _AT_ONCE:
        return None
    transaction = zk.transaction()
    for node in [*paths, root]:
        transaction.delete(node)
    results = transaction.commit()
    if any(isinstance(result, Exception) for result in results):
        return None
    return len(paths) + 1


def delete_tree(zk: KazooClient, node: str, *, batch_size: int = DEFAULT_BATCH) -> int:
    """Deletes ``node`` and its descendants; tolerates concurrent deletions; returns the count.

    Nodes with few children are descended into; large child lists (resources, owners) are deleted
    optimistically as leaves in ``multi`` batches, descending only into the ones that turn out to
    have children: one ``get_children`` per inner node instead of one per znode.
    """
    try:
        children = zk.get_children(node)
    except NoNodeError:
        return 0
    deleted = 0
    if len(children) <= _DESCEND_BELOW:
        for child in children:
            deleted += delete_tree(zk, f"{node}/{child}", batch_size=batch_size)
    else:
        deleted += run_batches(zk, [_Delete(f"{node}/{child}") for child in children], batch_size)
    return deleted + _Delete(node).apply_alone(zk)


# ----------------------------------------------------------------------------------------- batching


class _Op:
    path: str

    def add_to(self, transaction: Any) -> None:
        raise NotImplementedError

    def apply_alone(self, zk: KazooClient) -> int:
        """Applies the operation outside a transaction, tolerating an already-reached outcome."""
        raise NotImplementedError

    def size(self) -> int:
        return len(self.path) + _OP_OVERHEAD


@dataclass
class _Create(_Op):
    path: str
    acl: list[ACL]
    data: bytes = b""

    def add_to(self, transaction: Any) -> None:
        transaction.create(self.path, self.data, acl=self.acl)

    def apply_alone(self, zk: KazooClient) -> int:
        try:
            zk.create(self.path, self.data, acl=self.acl)
            return 1
        except NodeExistsError:
            return 0

    def size(self) -> int:
        return len(self.path) + len(self.data) + _OP_OVERHEAD * (1 + len(self.acl))


@dataclass
class _Delete(_Op):
    path: str

    def add_to(self, transaction: Any) -> None:
        transaction.delete(self.path)

    def apply_alone(self, zk: KazooClient) -> int:
        try:
            zk.delete(self.path)
            return 1
        except NoNodeError:
            return 0
        except NotEmptyError:
            return delete_tree(zk, self.path)


def _batches(ops: Iterable[_Op], batch_size: int) -> Iterator[list[_Op]]:
    batch: list[_Op] = []
    used = 0
    for op in ops:
        cost = op.size()
        if batch and (len(batch) >= batch_size or used + cost > MAX_BATCH_BYTES):
            yield batch
            batch, used = [], 0
        batch.append(op)
        used += cost
    if batch:
        yield batch


def run_batches(zk: KazooClient, ops: Sequence[_Op], batch_size: int = DEFAULT_BATCH) -> int:
    """Applies ``ops`` in order as ``multi`` batches, ``IN_FLIGHT`` at a time; returns ops applied.

    Batches are independent (callers order ops so that any prefix is a valid state); a batch that
    fails as a whole (a node appeared or vanished meanwhile) is redone op by op, tolerantly.
    """
    applied = 0
    in_flight: deque[tuple[list[_Op], Any]] = deque()

    def finish(batch: list[_Op], result: Any) -> int:
        outcomes = result.get()
        if any(isinstance(outcome, Exception) for outcome in outcomes):
            return sum(op.apply_alone(zk) for op in batch)
        return len(batch)

    for batch in _batches(ops, batch_size):
        transaction = zk.transaction()
        for op in batch:
            op.add_to(transaction)
        in_flight.append((batch, transaction.commit_async()))
        if len(in_flight) >= IN_FLIGHT:
            applied += finish(*in_flight.popleft())
    while in_flight:
        applied += finish(*in_flight.popleft())
    return applied

