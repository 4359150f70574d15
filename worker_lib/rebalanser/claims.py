"""Exclusive per-resource claims: ``G/owners/<resource>``, ephemeral, created by the owner's session.

ZooKeeper itself enforces that at most one session holds a claim. A member deletes only claims of its
own session, and never the resource's claim when the resource is deleted. Others may delete a claim
(an administrator, the operator's failover, a group deletion): so every claim a member holds is
watched, and its deletion is reported (``on_lost``) so the member stops work on it at once. The
claim's creation zxid (``czxid``) is the resource's fencing token:
zxids grow with every write to the ensemble, so each new claim of a resource carries a larger token
than every claim before it, across owners, sessions, and deletion and re-creation of the resource.

A persistent node at a claim's path is not a claim (claims are ephemeral) and would block the resource
for good: the member that wants the resource reports it and removes it, in one transaction that fails
if the node has turned into a real claim meanwhile (an ephemeral node cannot have children).

Claims are created and released in ``multi`` batches: one transaction, one zxid, so the resources of
a batch share one token and their next owners are woken together. Cost: one round trip per batch of
up to :data:`BATCH` resources; a batch that meets claims still held by others costs one pipelined
read per resource of the batch, then one read per resource still held (its watch). The reads that
arm the watch on each claim won and give its token are sent with the transaction, in the same round
trip (a small batch: one read per claim, which also tells who holds a claim the batch failed on; a
large one: one read, then one ``setWatches`` for the rest). A remembered claim is re-taken without
a request only while it is verified on the current connection (its watch armed on it and not fired:
its deletion would have been reported); any other is read first. A release likewise deletes a
verified claim without a read and reads the others first, deleting only those of this session, at the
version read (see :meth:`ClaimBook.release`).
"""

from __future__ import annotations

import json
import logging
import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadArgumentsError,
    ConnectionLoss,
    NodeExistsError,
    NoNodeError,
    OperationTimeoutError,
    RolledBackError,
    RuntimeInconsistency,
    UnimplementedError,
)
from kazoo.interfaces import IAsyncResult
from kazoo.protocol.states import EventType, WatchedEvent, ZnodeStat
from kazoo.security import OPEN_ACL_UNSAFE

from rebalanser.claimcheck import Verified
from rebalanser.claimtxn import claim_transaction
from rebalanser.containers import ensure_container
from rebalanser.ephemerals import own_ephemerals
from rebalanser.kazoo_private import discard_data_watcher, full_path, send
from rebalanser.paths import GroupPaths
from rebalanser.setwatches import watch_unchanged
from rebalanser.zk import ephemeral_of

log = logging.getLogger(__name__)

BATCH = 500
_PROBE = "persistent-probe"  # a child only a persistent node can have
CONTENDED = 2  # failed attempts of one batch before the rest waits for the event loop
IN_FLIGHT = 4  # claim transactions sent before the first is answered (a round's later batches)
READ_EACH = 8  # a batch of up to this many claims won is read claim by claim (one pipelined round)


def _unexpected(results: list[object]) -> Exception | None:
    """The error a failed claim transaction reports, unless it is one a claim round expects (a claim
    that exists, a missing ``G/owners``). The other operations of a failed transaction report that
    they were rolled back (or not tried)."""
    for result in results:
        if isinstance(result, Exception) and not isinstance(
                result, NodeExistsError | NoNodeError | RolledBackError | RuntimeInconsistency):
            return result
    return None


@dataclass(frozen=True)
class _Round:
    """One batch's claim transaction sent, and the reads sent right after it (:meth:`ClaimBook._send`)."""

    batch: list[str]
    start: int  # where the batch starts in the round's resources
    probe: list[str]  # the resources read after it
    connection: int  # the latest connection when the reads were sent
    pending: IAsyncResult
    reads: list[tuple[str, IAsyncResult]]


@dataclass(frozen=True)
class ClaimResult:
    claimed: dict[str, int]  # resource -> fencing token
    blocked: list[str]  # held by another session (or contended): watch, retry when released
    deferred: list[str] = field(default_factory=list)  # not tried: the round was abandoned
    # not claimed: a transaction failed with an error other than a claim held or a missing parent
    # (NoAuth, say); the round stopped there. The caller tries them again later.
    failed: list[str] = field(default_factory=list)
    error: Exception | None = None


@dataclass
class ClaimBook:
    """The claims one session holds. ``uncertain`` claims are those whose last write's outcome is
    unknown (ConnectionLoss): they are verified through ``ephemeralOwner`` before anything else."""

    zk: KazooClient
    paths: GroupPaths
    member_id: str
    session_id: int = 0
    member_path: str = ""  # the member node this session joined with (for diagnostics)
    held: dict[str, int] = field(default_factory=dict)
    uncertain: set[str] = field(default_factory=set)
    on_fake: Callable[[str], None] | None = None  # told of each persistent node removed from a claim path
    # Told (on kazoo's thread: never block, never call ZooKeeper) that a watched claim of ours was
    # deleted: ``(resource, token)``, the token being the one held when the watch fired.
    on_lost: Callable[[str, int], None] | None = None
    # Which claims are verified on the current connection (:mod:`rebalanser.claimcheck`): each read
    # that arms a claim's watch marks it, with the connection that was the latest when it was sent.
    verified: Verified = field(default_factory=Verified)
    # Other sessions' claims read by a failed claim round, their watch armed by that read: resource ->
    # the callback :meth:`watch_releases` gave for it (None until it does); ``_gone_early``: those whose
    # watch fired before it did. So a blocked resource is read once, not once more for its release watch.
    _awaiting: dict[str, Callable[[str], None] | None] = field(default_factory=dict, repr=False)
    _gone_early: set[str] = field(default_factory=set, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def reset(self, session_id: int, member_path: str = "") -> None:
        """A new join: ``session_id`` and the member node it created. A join in a new session forgets
        every claim (they ended with the old session). A join again in the same session (after
        standby, or an eviction) forgets nothing: that session may still hold them, and they are
        released, or re-taken after reading them, like any other."""
        if session_id != self.session_id:
            self.verified.revoke(self.held)
            self.held, self.uncertain = {}, set()
            with self._lock:
                self._awaiting, self._gone_early = {}, set()
        self.session_id, self.member_path = session_id, member_path

    # -- claiming ------------------------------------------------------------------------------

    def claim(self, resources: Iterable[str], abandon: Callable[[], bool] | None = None) -> ClaimResult:
        """Claims ``resources`` in batches, up to :data:`IN_FLIGHT` of them sent before the first is
        answered (ZooKeeper applies a session's requests in order, back to back, while the replies
        travel). ``abandon`` is asked before each batch after the first is sent: once it is True the
        rest is left untried (``deferred``), e.g. because a newer assignment has arrived that may no
        longer name them (claiming them would be a write to undo); the batches already sent are
        settled first. A batch that fails with an unexpected error (NoAuth, say) stops the round: no
        batch is sent after it, those sent are settled, and the resources from the failed batch on
        that are neither claimed nor blocked are ``failed``."""
        claimed: dict[str, int] = {}
        blocked: list[str] = []
        wanted = list(resources)
        mine = self._remembered(wanted)  # re-taken without a request only if verified (see there)
        claimed.update(mine)
        fresh = [r for r in wanted if r not in mine]
        data = json.dumps({"member": self.member_id}).encode()
        window: deque[_Round] = deque()
        errors: list[tuple[_Round, Exception]] = []  # batches that failed with an unexpected error
        deferred: list[str] = []
        try:
            for start in range(0, len(fresh), BATCH):
                if errors or (start and abandon is not None and abandon()):
                    deferred = [] if errors else fresh[start:]
                    break
                window.append(self._send(fresh[start : start + BATCH], start, data))
                if len(window) >= IN_FLIGHT:
                    self._settle_first(window, data, claimed, blocked, errors)
            while window:  # the batches sent (after a failure too: they may have landed)
                self._settle_first(window, data, claimed, blocked, errors)
        except Exception:
            for round_ in window:  # sent, and unanswered: their outcome is unknown (read before reuse)
                self.uncertain |= set(round_.batch)
                self._unexpect(round_.probe)
            raise
        if not errors:
            return ClaimResult(claimed, blocked, deferred)
        done = set(claimed) | set(blocked) | set(deferred)
        failed = [r for r in fresh[errors[0][0].start:] if r not in done]
        return ClaimResult(claimed, blocked, deferred, failed=failed, error=errors[0][1])

    def _settle_first(self, window: deque[_Round], data: bytes, claimed: dict[str, int], blocked: list[str],
                      errors: list[tuple[_Round, Exception]]) -> None:
        """Settles the oldest batch in flight (:meth:`_settle`); an unexpected error is noted in
        ``errors``: no further batch is sent after it."""
        round_ = window.popleft()
        try:
            error = self._settle(round_, data, claimed, blocked)
        except Exception:
            window.appendleft(round_)  # its outcome unknown, as the others'
            raise
        if error is not None:
            errors.append((round_, error))

    def _send(self, batch: list[str], start: int, data: bytes) -> _Round:
        """Sends the transaction creating ``batch``'s claims, and the reads that follow it in the same
        round trip: ZooKeeper answers a session's requests in order, and a read after our own write
        sees it. For a batch of up to :data:`READ_EACH` claims that is a read of each (its token and
        watch if the transaction created it, who holds it if not); for a larger one, of the first
        claim."""
        probe = batch if len(batch) <= READ_EACH else batch[:1]
        self._expect(probe)  # before the read arms the watch: a claim of another may go at once
        txn = claim_transaction(full_path(self.zk, self.paths.owners), batch, data,
                                self.zk.default_acl or OPEN_ACL_UNSAFE)
        try:
            connection = self.verified.connection()  # before the reads that verify are sent
            pending = send(self.zk, txn)
            reads = [(r, self.zk.exists_async(self.paths.owner(r), watch=self.claim_watch)) for r in probe]
        except (ConnectionLoss, OperationTimeoutError):
            self.uncertain |= set(batch)
            self._unexpect(probe)
            raise
        return _Round(batch, start, probe, connection, pending, reads)

    def _settle(self, sent: _Round, data: bytes, claimed: dict[str, int], blocked: list[str]) -> Exception | None:
        """Waits for one batch sent by :meth:`_send`. A batch fails as a whole when any of its claims
        exists: it is sent again without those, one batch at a time; after :data:`CONTENDED` such
        failures the rest is returned as blocked (the caller watches it and retries from its event
        loop), so a member racing many others, or claiming for an assignment that a newer one already
        replaced, never spins here re-reading the same batch.

        A transaction that fails otherwise (NoAuth, say: an ACL on ``G/owners``) created nothing: the
        error is returned, and the batch's resources are neither claimed nor blocked (they were once
        taken as claimed and found gone at once, then claimed again, in a loop with no pause)."""
        failures = 0
        while True:
            batch, probe, reads, connection = sent.batch, sent.probe, sent.reads, sent.connection
            try:
                results = sent.pending.get()
            except (ConnectionLoss, OperationTimeoutError):
                self.uncertain |= set(batch)
                self._unexpect(probe)
                raise
            unexpected = _unexpected(results)
            if unexpected is not None:
                self._unexpect(probe)
                return unexpected
            failed = next((i for i, r in enumerate(results) if isinstance(r, NodeExistsError | NoNodeError)), None)
            if failed is None:
                try:
                    won = self._arm_created(batch, reads, connection)  # the token, and the watch on each new claim
                except (ConnectionLoss, OperationTimeoutError):
                    self.uncertain |= set(batch) - self.held.keys()  # created, but unread: settled later
                    self._unexpect(probe)
                    raise
                won = self._unless_fired(won, batch)
                claimed.update(won)
                blocked.extend(r for r in batch if r not in won)  # deleted at once by someone else
                return None
            if isinstance(results[failed], NoNodeError):
                self._unexpect(probe)
                if not ensure_container(self.zk, self.paths.owners):
                    raise NoNodeError(f"{self.paths.root} does not exist")  # never re-created here
                sent = self._send(batch, sent.start, data)
                continue
            taken = self._taken(batch, reads, connection)
            blocked.extend(r for r in batch if r in taken)
            claimed.update({r: self.held[r] for r in batch if r in self.held})
            batch = [r for r in batch if r not in taken and r not in self.held]
            failures += 1
            if failures >= CONTENDED:
                blocked.extend(batch)
                return None
            if not batch:
                return None
            sent = self._send(batch, sent.start, data)

    def _expect(self, resources: list[str]) -> None:
        """The watches about to be armed on ``resources`` may fire before their reads are settled:
        such an event is kept (``_gone_early``) instead of being lost."""
        with self._lock:
            for resource in resources:
                self._awaiting[resource] = None
                self._gone_early.discard(resource)

    def _unexpect(self, resources: Iterable[str]) -> set[str]:
        """Ends :meth:`_expect` for ``resources``; returns those whose watch fired meanwhile."""
        fired: set[str] = set()
        with self._lock:
            for resource in resources:
                if resource in self._gone_early:
                    fired.add(resource)
                self._awaiting.pop(resource, None)
                self._gone_early.discard(resource)
        return fired

    def _unless_fired(self, won: dict[str, int], batch: list[str]) -> dict[str, int]:
        """``won`` without the claims whose watch fired before we knew they were ours (the event
        found no token to report): each of those is read again, and kept only if it is still ours.
        Ends :meth:`_expect` (and any earlier wait for another session's release) for ``batch``."""
        for resource in self._unexpect(batch):
            token = won.get(resource)
            if token is not None and not self.still_held(resource, token):
                self.held.pop(resource, None)
                del won[resource]
        return won

    def _arm_created(self, batch: list[str], reads: list[tuple[str, IAsyncResult]],
                     connection: int) -> dict[str, int]:
        """After our transaction created every claim of ``batch`` (one zxid: one token for them all),
        given the reads sent with it: each claim's (up to :data:`READ_EACH`), or the first's. With
        the first's token, arms the watch on all the others in one ``setWatches`` request relative to
        that token (:mod:`rebalanser.setwatches`). A claim deleted or replaced since is reported
        through ``on_lost`` at once, as a deletion right after an ``exists`` would be; the caller then
        reads it (:meth:`still_held`). Reads each claim instead (one pipelined round) when the first
        is already gone, or when the server refuses the request. Returns resource -> token. Each claim
        is verified on ``connection`` (the latest when the reads were sent) or a later one."""
        first = self._settle_reads(reads, connection)
        rest = batch[len(reads):]
        if not rest:
            return first
        if not first:
            return self._read_own(rest)
        token = first[batch[0]]
        for resource in rest:
            self.held[resource] = token
            self.uncertain.discard(resource)
        try:
            connection = self.verified.connection()
            watch_unchanged(self.zk, token, self.paths.owners, rest, self.claim_watch)
        except (UnimplementedError, BadArgumentsError) as exc:  # no server since 3.3 says so
            log.warning("setWatches refused (%r): reading each claim", exc)
            return first | self._read_own(rest)
        except Exception:
            for resource in rest:  # unread, and maybe unwatched: settled later (the caller's ``uncertain``)
                self.held.pop(resource, None)
            raise
        self.verified.mark(dict.fromkeys(rest, token), connection)
        return dict.fromkeys(batch, token)

    def _read_own(self, resources: list[str]) -> dict[str, int]:
        """Reads the claims on ``resources`` (one pipelined round), arming the deletion watch on each:
        resource -> token of those that are this session's. The others are forgotten (someone else
        deleted them, or they belong to another session now). A read by our own session after our own
        write sees that write, so a claim we just created is found. Raises ConnectionLoss etc. with
        nothing forgotten that was not read."""
        connection = self.verified.connection()
        return self._settle_reads([(r, self.zk.exists_async(self.paths.owner(r), watch=self.claim_watch))
                                   for r in resources], connection)

    def _settle_reads(self, pending: list[tuple[str, IAsyncResult]], connection: int) -> dict[str, int]:
        """:meth:`_read_own`'s reads, sent while ``connection`` was the latest: resource -> token of the
        claims read as ours (verified on that connection: their watch is armed on it)."""
        mine: dict[str, int] = {}
        for resource, result in pending:
            stat: ZnodeStat | None = result.get()
            self.uncertain.discard(resource)
            if stat is not None and ephemeral_of(stat, self.session_id):
                mine[resource] = self.held[resource] = int(stat.czxid)
            else:
                self.held.pop(resource, None)
        self.verified.mark(mine, connection)
        return mine

    def _remembered(self, wanted: list[str]) -> dict[str, int]:
        """resource -> token of the remembered claims among ``wanted`` that are still ours; the others
        are forgotten. A claim verified on the current connection (:meth:`_known`) is ours without a
        request. The others are read (one request for them all, see :meth:`_own_claims`): a claim held
        for certain and still ours is the node we created (we would know of another), so its token and
        its watch (armed when it was first read, re-armed after every reconnection) stand. An uncertain
        one is read for its token, arming its watch."""
        remembered = [r for r in wanted if r in self.held or r in self.uncertain]
        known = self._known(remembered)
        remembered = [r for r in remembered if r not in known]
        if not remembered:
            return known
        return known | self._read_remembered(remembered)

    def _known(self, remembered: list[str]) -> dict[str, int]:
        """resource -> token of those of ``remembered`` held for certain and verified on the current
        connection, which is up: their watch was armed on this connection and has not fired (a firing
        revokes the verification before the member is told, see :meth:`claim_watch`), so each is still
        the node we created; a deletion from now on is reported by that watch, as after a read. A
        connection that dropped is not up (kazoo clears its flag before dropping the watches), and a
        new one has a new number, so a claim deleted while the member was away is never among them."""
        if not self.zk.connected:
            return {}
        held, uncertain = self.held, self.uncertain
        return self.verified.current({r: held[r] for r in remembered if r in held and r not in uncertain})

    def _read_remembered(self, remembered: list[str]) -> dict[str, int]:
        """:meth:`_remembered` for claims not verified on the current connection: read now."""
        alive = self._own_claims()
        if alive is None:
            return self._read_own(remembered)
        mine: dict[str, int] = {}
        for resource in remembered:
            if resource not in alive:
                self.held.pop(resource, None)
                self.uncertain.discard(resource)
            elif resource not in self.uncertain:
                mine[resource] = self.held[resource]
        unsure = [r for r in remembered if r in self.uncertain]
        if unsure:
            mine.update(self._read_own(unsure))
        return mine

    def _own_claims(self) -> set[str] | None:
        """The resources whose claim this session holds now, in one request whose cost follows our own
        claims (``getEphemerals``); None when the server cannot answer it (older than 3.6): then each
        claim is read."""
        prefix = self.paths.owners + "/"
        try:
            paths = own_ephemerals(self.zk, prefix)
        except UnimplementedError:
            return None
        return {p[len(prefix):] for p in paths if p.startswith(prefix)}

    def claim_watch(self, event: WatchedEvent) -> None:
        """The one watcher of every claim path we read (kazoo keeps one callable per path, so reading a
        path again adds nothing). For a claim of ours a deletion or a change counts (``CHANGED``: a
        newer node at the path, from ``setWatches``, or its data set by someone else); the loop reads
        it (:meth:`still_held`), which verifies it again if it is still there, and a dropped
        connection (type NONE) is followed by the re-check of every claim (:mod:`rebalanser.claimcheck`). For another
        session's claim we wait for (:meth:`watch_releases`), any event counts: its release, or the
        connection's drop (the watch is gone: the caller claims again after reconnecting)."""
        if event.path is None:  # kazoo's reset of every watch: the connection dropped
            self._released(list(self._awaiting))
            return
        resource = event.path.rsplit("/", 1)[-1]
        token = self.held.get(resource)
        if token is None:
            self._released([resource])
        elif event.type in (EventType.DELETED, EventType.CHANGED):
            self.verified.gone(resource, token)  # first: a re-take reads it from now on (:meth:`_known`)
            if self.on_lost is not None:
                self.on_lost(resource, token)

    def _released(self, resources: list[str]) -> None:
        """The watches of these awaited claims fired: each callback given for one is told; the others
        are remembered until :meth:`watch_releases` asks for them."""
        told: list[tuple[Callable[[str], None], str]] = []
        with self._lock:
            for resource in resources:
                if resource not in self._awaiting:
                    continue
                callback = self._awaiting.pop(resource)
                if callback is None:
                    self._gone_early.add(resource)
                else:
                    told.append((callback, resource))
        for callback, resource in told:
            callback(resource)

    def snapshot(self) -> dict[str, int]:
        """resource -> token of every claim held, for another thread (:mod:`rebalanser.claimcheck`):
        a copy of a dict of strings is made without releasing the interpreter lock."""
        return dict(self.held)

    def owner_path(self, resource: str) -> str:
        return self.paths.owner(resource)

    @property
    def owners(self) -> str:
        return self.paths.owners

    def report_lost(self, resource: str, token: int) -> None:
        """Our claim on ``resource`` of ``token`` was found gone by a read (as its watch would report)."""
        if self.held.get(resource) == token and self.on_lost is not None:
            self.on_lost(resource, token)

    def forget(self, resource: str, token: int) -> bool:
        """Our claim on ``resource`` of ``token`` was deleted by someone else; False if we no longer
        held that claim anyway."""
        if self.held.get(resource) != token:
            return False
        del self.held[resource]
        self.verified.revoke([resource])
        return True

    def still_held(self, resource: str, token: int) -> bool:
        """Whether our claim on ``resource`` of ``token`` is still there (read now, its watch armed
        again). A deletion watch can fire for a node that was not ours: kazoo keeps one set of watchers
        per path, so a watch armed on another session's claim (:meth:`_taken`) and the one armed on the
        claim we created at that path right after its release are one watch, fired by the release."""
        if self.held.get(resource) != token:
            return False
        connection, since = self.verified.connection(), self.verified.reports()
        reported = self.verified.reported(resource, token)
        if reported:  # the server catches up with the leader first: never a lagging view of a deleted claim
            self.zk.sync(self.paths.owner(resource))
        stat = self.zk.exists(self.paths.owner(resource), watch=self.claim_watch)
        mine = stat is not None and ephemeral_of(stat, self.session_id) and int(stat.czxid) == token
        if mine:  # found after its watch fired (and behind a sync): its data changed, it lives
            self.verified.mark({resource: token}, connection, since if reported else None)
        return mine

    def _taken(self, batch: list[str], sent: list[tuple[str, IAsyncResult]] | None = None,
               connection: int | None = None) -> set[str]:
        """Which of ``batch`` someone else holds now: one pipelined read per resource of the batch
        (all in flight at once), so the cost follows the batch, never the number of claims in the
        group (listing ``G/owners`` returns every claim: megabytes for 100,000 resources).
        ``sent``: those of the first resources of the batch, already sent (with :meth:`_expect`) with
        the failed transaction, while ``connection`` was the latest."""
        if connection is None:
            connection = self.verified.connection()
        sent = sent or []
        rest = batch[len(sent):]
        self._expect(rest)  # before the read arms the watch: it may fire at once
        pending = sent + [(r, self.zk.exists_async(self.paths.owner(r), watch=self.claim_watch)) for r in rest]
        taken: set[str] = set()
        for resource, result in pending:
            stat = result.get()
            self.uncertain.discard(resource)
            if ephemeral_of(stat, self.session_id):
                self.held[resource] = int(stat.czxid)
                self.verified.mark({resource: self.held[resource]}, connection)
            elif stat is not None and not stat.ephemeralOwner and self._remove_fake(resource):
                self.held.pop(resource, None)  # created again by the next attempt
            elif stat is not None:
                self.held.pop(resource, None)
                taken.add(resource)
        with self._lock:
            for resource in batch:
                if resource not in taken:
                    self._awaiting.pop(resource, None)
                    self._gone_early.discard(resource)
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

    def watch_releases(self, resources: list[str], on_release: Callable[[str], None]) -> list[str]:
        """Has ``on_release(resource)`` called once the claim another session holds on each of
        ``resources`` is released (or the connection drops); returns those already gone. A claim the
        failed claim round read already has its watch armed: it is not read again."""
        gone: list[str] = []
        unread: list[str] = []
        with self._lock:
            for resource in resources:
                if resource in self._gone_early:
                    self._gone_early.discard(resource)
                    gone.append(resource)
                elif resource in self._awaiting:
                    self._awaiting[resource] = on_release
                else:
                    unread.append(resource)
                    self._awaiting[resource] = on_release
        pending = [(r, self.zk.exists_async(self.paths.owner(r), watch=self.claim_watch)) for r in unread]
        for resource, result in pending:
            if result.get() is None:
                with self._lock:
                    if self._awaiting.pop(resource, None) is None:
                        continue  # its watch fired meanwhile, and the callback was told
                gone.append(resource)
        return gone

    # -- releasing -----------------------------------------------------------------------------

    def release(self, resources: Iterable[str]) -> None:
        """Deletes this session's claims on ``resources``; never another session's. Raises
        ConnectionLoss etc. to be retried later: the claims it was deleting stay remembered (``held``
        or ``uncertain``), and each retry reads them again first.

        The transactions of all batches are sent before the first reply is awaited: the server applies
        them back to back while kazoo reads the replies, and the watch notification of each claim
        deleted (our own watches fire for our own deletes), which arrive ahead of them.

        A claim verified on the current connection (:meth:`_known`: its watch armed on it and not
        fired) is deleted without reading it first, as it is re-taken without one; only the others are
        read (one ``getEphemerals`` for them all). A release of verified claims is one round trip."""
        ours = [r for r in resources if r in self.held or r in self.uncertain]
        if not ours:
            return
        known = self._known(ours)
        alive = self._own_claims() if len(known) < len(ours) else set()
        batches = [ours[start : start + BATCH] for start in range(0, len(ours), BATCH)]
        chosen = [self._deletable(b, known, alive) for b in batches]
        sent = []
        for mine in chosen:
            if mine:
                # Not ``held`` while the delete is under way (its watch, firing for our own delete, reports
                # nothing); ``uncertain`` until its outcome is known, so a failure forgets nothing.
                for resource in mine:
                    self.held.pop(resource, None)
                self.verified.revoke(mine)
                self.uncertain |= mine.keys()
                self._unwatch(mine)
                sent.append((mine, self._send_deletes(mine, fenced=bool(self.member_path))))
        for mine, pending in sent:
            self._settle_deletes(mine, pending)

    def _unwatch(self, resources: Iterable[str]) -> None:
        """Takes our watcher off the claims we are about to delete, in kazoo's table only: our own
        delete fires the server's watch, and the notification then finds nobody to tell (kazoo hands
        each one to its callback thread otherwise: most of a large release's cost). A claim being
        released is no longer ``held``, so that watcher would report nothing anyway; one that is
        re-taken is read again (:meth:`_remembered`), which arms its watch again."""
        for resource in resources:
            discard_data_watcher(self.zk, full_path(self.zk, self.paths.owner(resource)), self.claim_watch)

    def _settle_deletes(self, mine: dict[str, int], pending: IAsyncResult) -> None:
        """Waits for the transaction deleting the claims of ``mine``: those read as this session's
        (``alive``: read for the whole release in one request; else each claim read, in one pipelined
        round), each at the version read (claims are never written after their creation: version 0).
        The others were forgotten.

        Why the read is needed: someone else (an administrator, the operator's failover) may have
        deleted our claim, and another member may hold the path now; a delete by path alone would end
        its claim. Another session cannot create a node at the path while ours exists, and our own
        read after our own write sees our claim, so a claim read as ours was ours when it was read.
        What is left is the one round trip between that read and the delete: if someone else deletes
        our claim in it and another member claims the path in it too, the versioned delete (claims
        are all version 0) ends that member's new claim. That member watches its claims and stops
        before its next unit of work, then claims again: a spurious handover, never an overlap."""
        results = list(pending.get())
        if self.member_path and isinstance(results[0], NoNodeError):
            # Our member node is gone (standby, eviction, the operator's failover of a process that is in
            # fact alive): the process is alive to see it, so a late request of a dead one is not this.
            results = list(self._send_deletes(mine, fenced=False).get())
        elif self.member_path:
            results = results[1:]
        if any(isinstance(r, Exception) for r in results):
            for resource in mine:  # one changed between the read and the delete: settle one by one
                self._delete_one(resource)
            return
        self.uncertain -= mine.keys()

    def _send_deletes(self, mine: dict[str, int], fenced: bool) -> IAsyncResult:
        """Sends one transaction deleting each claim of ``mine`` at its version; ``fenced``: it starts
        with ``check`` of our member node, so that once that node is deleted (the operator's failover
        fences a dead session that way) a release of ours still on its way changes nothing."""
        txn = self.zk.transaction()
        if fenced:
            txn.check(self.member_path, -1)
        for resource, version in mine.items():
            txn.delete(self.paths.owner(resource), version=version)
        return txn.commit_async()

    def _deletable(self, batch: list[str], known: dict[str, int], alive: set[str] | None) -> dict[str, int]:
        """resource -> version (0) of each claim in ``batch`` to delete: those verified on the current
        connection (``known``) without a request, the others as ``alive`` (:meth:`_own_claims`) says,
        or each read when the server could not list them (``alive`` None)."""
        mine = {resource: 0 for resource in batch if resource in known}
        rest = [resource for resource in batch if resource not in known]
        if rest:
            mine.update(self._still_ours(rest) if alive is None else self._in(rest, alive))
        return mine

    def _in(self, batch: list[str], alive: set[str]) -> dict[str, int]:
        """resource -> version (0) of each claim in ``batch`` that ``alive`` says is ours; the others
        are forgotten."""
        mine: dict[str, int] = {}
        for resource in batch:
            if resource in alive:
                mine[resource] = 0
            else:
                self.held.pop(resource, None)
                self.uncertain.discard(resource)
        return mine

    def _still_ours(self, batch: list[str]) -> dict[str, int]:
        """resource -> version of each claim in ``batch`` that is still this session's own claim;
        the others are forgotten (they were deleted, or now belong to another session)."""
        pending = [(r, self.zk.exists_async(self.paths.owner(r))) for r in batch]
        mine: dict[str, int] = {}
        for resource, result in pending:
            stat = result.get()
            if ephemeral_of(stat, self.session_id):
                mine[resource] = int(stat.version)
            else:
                if stat is not None:
                    log.warning("the claim on %s is no longer ours (deleted by someone else?): not released", resource)
                self.held.pop(resource, None)
                self.uncertain.discard(resource)
        return mine

    def _delete_one(self, resource: str) -> None:
        stat = self.zk.exists(self.paths.owner(resource))
        if stat is not None and ephemeral_of(stat, self.session_id):
            try:
                self.zk.delete(self.paths.owner(resource), version=stat.version)
            except NoNodeError:
                pass
        self.held.pop(resource, None)
        self.uncertain.discard(resource)
