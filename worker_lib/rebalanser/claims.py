"""Exclusive per-resource claims: ``G/owners/<resource>``, ephemeral, created by the owner's session.

ZooKeeper itself enforces that at most one session holds a claim. A claim is released only by the
session that holds it, or by the server when that session ends; nobody else ever deletes it (not even
when the resource is deleted). The claim's creation zxid (``czxid``) is the resource's fencing token:
zxids grow with every write to the ensemble, so each new claim of a resource carries a larger token
than every claim before it, across owners, sessions, and deletion and re-creation of the resource.

A persistent node at a claim's path is not a claim (claims are ephemeral) and would block the resource
for good: the member that wants the resource reports it and removes it, in one transaction that fails
if the node has turned into a real claim meanwhile (an ephemeral node cannot have children).

Claims are created and released in ``multi`` batches: one transaction, one zxid, so the resources of
a batch share one token and their next owners are woken together. Cost: one round trip per batch of
up to :data:`BATCH` resources; a batch that meets claims still held by others costs one pipelined
read per resource of the batch, then one read per resource still held (its watch). A release is one
transaction fenced by the member node (see :meth:`ClaimBook._delete_fenced`); only when that fails
does it read each claim first.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss, KazooException, NodeExistsError, NoNodeError, OperationTimeoutError
from kazoo.protocol.states import WatchedEvent

from rebalanser.containers import ensure_container
from rebalanser.paths import GroupPaths
from rebalanser.zk import ephemeral_of

log = logging.getLogger(__name__)

BATCH = 500
_PROBE = "persistent-probe"  # a child only a persistent node can have
CONTENDED = 2  # failed attempts of one batch before the rest waits for the event loop


@dataclass(frozen=True)
class ClaimResult:
    claimed: dict[str, int]  # resource -> fencing token
    blocked: list[str]  # held by another session (or contended): watch, retry when released
    deferred: list[str] = field(default_factory=list)  # not tried: the round was abandoned


@dataclass
class ClaimBook:
    """The claims one session holds. ``uncertain`` claims are those whose last write's outcome is
    unknown (ConnectionLoss): they are verified through ``ephemeralOwner`` before anything else."""

    zk: KazooClient
    paths: GroupPaths
    member_id: str
    session_id: int = 0
    member_path: str = ""  # the member node this session joined with; every claim in ``held`` is newer
    held: dict[str, int] = field(default_factory=dict)
    uncertain: set[str] = field(default_factory=set)
    on_fake: Callable[[str], None] | None = None  # told of each persistent node removed from a claim path

    def reset(self, session_id: int, member_path: str = "") -> None:
        """A new join: ``session_id`` and the member node it created (empty: always release carefully)."""
        self.session_id, self.member_path, self.held, self.uncertain = session_id, member_path, {}, set()

    # -- claiming ------------------------------------------------------------------------------

    def claim(self, resources: Iterable[str], abandon: Callable[[], bool] | None = None) -> ClaimResult:
        """Claims ``resources`` in batches. ``abandon`` is asked between batches: once it is True the
        rest is left untried (``deferred``), e.g. because a newer assignment has arrived that may no
        longer name them (claiming them would be a write to undo)."""
        claimed: dict[str, int] = {}
        blocked: list[str] = []
        fresh = []
        for resource in resources:
            if resource in self.uncertain:
                self._verify(resource)
            if resource in self.held:
                claimed[resource] = self.held[resource]
            else:
                fresh.append(resource)
        data = json.dumps({"member": self.member_id}).encode()
        for start in range(0, len(fresh), BATCH):
            if start and abandon is not None and abandon():
                return ClaimResult(claimed, blocked, fresh[start:])
            self._create(fresh[start : start + BATCH], data, claimed, blocked)
        return ClaimResult(claimed, blocked)

    def _create(self, batch: list[str], data: bytes, claimed: dict[str, int], blocked: list[str]) -> None:
        """Creates one batch. A batch fails as a whole when any of its claims exists; after
        :data:`CONTENDED` such failures the rest is returned as blocked (the caller watches it and
        retries from its event loop), so a member racing many others, or claiming for an assignment
        that a newer one already replaced, never spins here re-reading the same batch."""
        failures = 0
        while batch:
            txn = self.zk.transaction()
            for resource in batch:
                txn.create(self.paths.owner(resource), data, ephemeral=True)
            try:
                results = txn.commit()
            except (ConnectionLoss, OperationTimeoutError):
                self.uncertain |= set(batch)
                raise
            failed = next((i for i, r in enumerate(results) if isinstance(r, NodeExistsError | NoNodeError)), None)
            if failed is None:
                token = self._token_of(batch[0])
                self.held.update(dict.fromkeys(batch, token))
                claimed.update(dict.fromkeys(batch, token))
                return
            if isinstance(results[failed], NoNodeError):
                if not ensure_container(self.zk, self.paths.owners):
                    raise NoNodeError(f"{self.paths.root} does not exist")  # never re-created here
                continue
            taken = self._taken(batch)
            blocked.extend(r for r in batch if r in taken)
            claimed.update({r: self.held[r] for r in batch if r in self.held})
            batch = [r for r in batch if r not in taken and r not in self.held]
            failures += 1
            if failures >= CONTENDED:
                blocked.extend(batch)
                return

    def _token_of(self, resource: str) -> int:
        stat = self.zk.exists(self.paths.owner(resource))
        if not ephemeral_of(stat, self.session_id):
            raise KazooException(f"claim on {resource} vanished right after it was created")
        return int(stat.czxid)

    def _taken(self, batch: list[str]) -> set[str]:
        """Which of ``batch`` someone else holds now: one pipelined read per resource of the batch
        (all in flight at once), so the cost follows the batch, never the number of claims in the
        group (listing ``G/owners`` returns every claim: megabytes for 100,000 resources)."""
        pending = [(r, self.zk.exists_async(self.paths.owner(r))) for r in batch]
        taken: set[str] = set()
        for resource, result in pending:
            stat = result.get()
            self.uncertain.discard(resource)
            if ephemeral_of(stat, self.session_id):
                self.held[resource] = int(stat.czxid)
            elif stat is not None and not stat.ephemeralOwner and self._remove_fake(resource):
                self.held.pop(resource, None)  # created again by the next attempt
            elif stat is not None:
                self.held.pop(resource, None)
                taken.add(resource)
        return taken

    def _remove_fake(self, resource: str) -> bool:
        """Removes a persistent node from ``resource``'s claim path; True if it is gone. Whatever is
        below it goes first (a real claim has no children, so nothing of one is ever deleted)."""
        path = self.paths.owner(resource)
        try:
            for child in self.zk.get_children(path):
                self.zk.delete(f"{path}/{child}", recursive=True)
            txn = self.zk.transaction()
            txn.create(f"{path}/{_PROBE}")  # fails on an ephemeral node: then nothing is deleted
            txn.delete(f"{path}/{_PROBE}")
            txn.delete(path)
            results = txn.commit()
        except NoNodeError:
            return True
        if any(isinstance(r, Exception) for r in results):
            log.warning("could not remove the persistent node at %s: %r", path, results)
            return False
        log.error("removed a persistent node at %s: it is not a claim and blocked the resource", path)
        if self.on_fake is not None:
            self.on_fake(path)
        return True

    def _verify(self, resource: str) -> bool:
        """Settles an uncertain claim by ``ephemeralOwner``; True if it is ours."""
        self.uncertain.discard(resource)
        stat = self.zk.exists(self.paths.owner(resource))
        if ephemeral_of(stat, self.session_id):
            self.held[resource] = int(stat.czxid)
            return True
        self.held.pop(resource, None)
        return False

    def watch_releases(self, resources: list[str], on_release: Callable[[str], None]) -> list[str]:
        """Arms one-shot watches on other sessions' claims; returns those already gone."""

        def watcher(resource: str) -> Callable[[WatchedEvent], None]:
            return lambda _event: on_release(resource)

        pending = [(r, self.zk.exists_async(self.paths.owner(r), watch=watcher(r))) for r in resources]
        return [r for r, result in pending if result.get() is None]

    # -- releasing -----------------------------------------------------------------------------

    def release(self, resources: Iterable[str]) -> None:
        """Deletes this session's claims on ``resources``; never another session's. Raises
        ConnectionLoss etc. to be retried later (each retry re-checks ownership first)."""
        wanted = [r for r in resources if r in self.held or r in self.uncertain]
        for resource in [r for r in wanted if r in self.uncertain]:
            self._verify(resource)
        ours = [r for r in wanted if r in self.held]
        for start in range(0, len(ours), BATCH):
            self._delete(ours[start : start + BATCH])

    def _delete(self, batch: list[str]) -> None:
        """Deletes the claims of ``batch`` that this session still holds: in one transaction fenced by
        our member node when that node still exists, else carefully (:meth:`_delete_checked`)."""
        if self.member_path and self._delete_fenced(batch):
            for resource in batch:
                self.held.pop(resource, None)
            return
        self._delete_checked(batch)

    def _delete_fenced(self, batch: list[str]) -> bool:
        """One transaction: our member node exists, and each claim of ``batch`` is deleted. Every
        claim in ``held`` was created after that node, in this session; the node exists only while
        neither the session nor the group has ended since (deleting the group deletes it, and it is
        never created again under the same name). So each path still holds the claim we made: no
        read is needed first, and a releasing owner frees its resources one round trip sooner. False
        when the transaction failed as a whole (nothing was deleted)."""
        txn = self.zk.transaction()
        txn.check(self.member_path, -1)
        for resource in batch:
            txn.delete(self.paths.owner(resource))
        try:
            results = txn.commit()
        except (ConnectionLoss, OperationTimeoutError):
            self.uncertain |= set(batch)
            raise
        return not any(isinstance(r, Exception) for r in results)

    def _delete_checked(self, batch: list[str]) -> None:
        """Deletes the claims of ``batch`` that this session still holds. Each claim is read first
        (one pipelined round) and deleted only if its ``ephemeralOwner`` is this session and its
        ``czxid`` is the token we hold, at the version read: a claim path deleted by someone else
        (an administrator deleting the group) and re-created by another member is never touched."""
        mine = self._still_ours(batch)
        if not mine:
            return
        txn = self.zk.transaction()
        for resource, version in mine.items():
            txn.delete(self.paths.owner(resource), version=version)
        try:
            results = txn.commit()
        except (ConnectionLoss, OperationTimeoutError):
            self.uncertain |= set(mine)
            raise
        if any(isinstance(r, Exception) for r in results):
            for resource in mine:  # one changed between the read and the delete: settle one by one
                self._delete_one(resource)
            return
        for resource in mine:
            self.held.pop(resource, None)

    def _still_ours(self, batch: list[str]) -> dict[str, int]:
        """resource -> version of each claim in ``batch`` that is still this session's own claim;
        the others are forgotten (they were deleted, or now belong to another session)."""
        pending = [(r, self.zk.exists_async(self.paths.owner(r))) for r in batch]
        mine: dict[str, int] = {}
        for resource, result in pending:
            stat = result.get()
            if ephemeral_of(stat, self.session_id) and stat.czxid == self.held.get(resource):
                mine[resource] = int(stat.version)
            else:
                if stat is not None and stat.ephemeralOwner != self.session_id:
                    log.warning("claim on %s is no longer ours (the group was re-created?): not released", resource)
                self.held.pop(resource, None)
        return mine

    def _delete_one(self, resource: str) -> None:
        stat = self.zk.exists(self.paths.owner(resource))
        if ephemeral_of(stat, self.session_id):
            try:
                self.zk.delete(self.paths.owner(resource), version=stat.version)
            except NoNodeError:
                pass
        self.held.pop(resource, None)
