"""Role matching: jobs posted in a bag are each held by exactly one worker from a queue of applicants.

Usage::

    def start(job: str) -> None: ...          # begin working on the job
    def stop(job: str) -> None: ...           # stop at once (called before anyone else may take it)

    matcher = RoleMatcher(client, "/myapp/roles", identity="pod-7",
                          on_job_acquired=start, on_job_lost=stop, max_jobs=2)
    matcher.start()
    matcher.post_job("shard-3", b'{"range": [0, 99]}')   # anyone may post or remove jobs
    matcher.held_jobs(), matcher.assignments()           # ours; everyone's (job -> identity)
    matcher.stop()                                       # releases our jobs; on_job_lost fires for each

Layout under the base path: ``jobs/<job>`` (a :class:`DistributedBag`), ``applicants/`` (a
:class:`LeaderQueue` of workers with spare capacity) and ``assignments/<job>`` — an ephemeral znode
created by the holder's session, holding the holder's identity. The applicant at the head of the queue
claims one unassigned job by creating its assignment znode; ZooKeeper settles races (``NodeExists``
means someone else holds it). Having claimed a job the worker leaves the queue and, if it has capacity
left, queues again at the back, so jobs spread over the applicants in turn. Only the head watches the
assignments; the others wait on their predecessor in the queue (no herd).

What it guarantees:

* Never two assignment znodes for one job, so never two holders in ZooKeeper's view. ``on_job_acquired``
  fires only after our create succeeded; ``on_job_lost`` fires when our assignment goes (session expiry,
  deletion, the job being removed from the bag, ``stop``) and already when the connection is suspended,
  before the session can expire on the server. If the connection comes back within the same session
  and the assignment is still ours, ``on_job_acquired`` fires again.
* A dead worker's assignments vanish with its session; the applicant at the head of the queue then
  takes them over, one at a time.
* A claim whose reply is lost to a connection drop is settled after the reconnect by reading the
  assignment's owner: the job is either ours (and reported acquired) or not — no orphaned assignment.
* A removed job's holder calls ``on_job_lost`` before deleting its assignment.
* Callbacks run in order on one dedicated thread per matcher, never on kazoo's threads; a worker holds
  at most ``max_jobs`` jobs.

What it rests on, and does not promise:

* "Never two workers acting on one job" needs ``on_job_lost`` to stop the work promptly: kazoo reports a
  suspended connection after 2/3 of the session timeout without a reply and the server expires the
  session after the full timeout — a margin of about 1/3 of the session timeout, assuming comparable
  clock rates and no longer process pause. A paused process may still act; fence with the assignment's
  creation zxid where that matters. An assignment deleted by hand is noticed by its holder only
  asynchronously.
* Jobs wait unassigned while no worker has spare capacity; there is no fairness beyond queue order.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable
from functools import partial

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.protocol.states import EventType, WatchedEvent

from rebalanser.lifecycle import Lifecycled
from rebalanser.zk import (
    TRANSIENT_ERRORS,
    BoundedZk,
    basename,
    join,
    owned_by_session,
    retry,
    validate_name,
    validate_path,
)

from ._executor import SerialExecutor
from ._session import StateRelay
from .bag import BagItem, DistributedBag
from .leader_queue import LeaderQueue

log = logging.getLogger(__name__)

_ids = itertools.count(1)
RETRY_DELAY = 0.2
# TimeoutError: the leader queue's thread did not answer in time.
RETRYABLE: tuple[type[Exception], ...] = (*TRANSIENT_ERRORS, TimeoutError)

JobCallback = Callable[[str], None]


class RoleMatcher(Lifecycled):
    """One worker taking part in role matching under ``path``; see the module documentation."""

    def __init__(
        self,
        client: KazooClient,
        path: str,
        *,
        identity: str,
        on_job_acquired: JobCallback | None = None,
        on_job_lost: JobCallback | None = None,
        max_jobs: int = 1,
        op_timeout: float = 10.0,
    ) -> None:
        if max_jobs < 1:
            raise ValueError("max_jobs must be at least 1")
        base = validate_path(path)
        self._client = client
        self._zk = BoundedZk(client, op_timeout)
        self._identity = identity
        self._on_acquired = on_job_acquired
        self._on_lost = on_job_lost
        self._max_jobs = max_jobs
        self._op_timeout = op_timeout
        self._assignments = join(base, "assignments")
        self._bag = DistributedBag(client, join(base, "jobs"), op_timeout=op_timeout)
        self._queue = LeaderQueue(
            client, join(base, "applicants"), identity=identity, on_elected=self._poke, on_lost=self._poke,
            op_timeout=op_timeout,
        )
        number = next(_ids)
        self._loop = SerialExecutor(f"rebalanser-role-match-{number}")
        self._callbacks = SerialExecutor(f"rebalanser-role-match-{number}-callbacks")
        self._relay = StateRelay(client, self._loop, self._on_state, immediate=self._on_state_now)
        self._lock = threading.Lock()  # guards _held and _suspects, and orders the callbacks
        self._held: set[str] = set()
        self._suspects: set[str] = set()  # held when the connection was suspended; confirmed later
        self._uncertain: set[str] = set()  # claims whose reply was lost (loop thread only)
        self._releasing: set[str] = set()  # removed jobs whose assignment we may still own (loop only)
        self._applying = False  # whether we are in the applicant queue (loop thread only)
        self._started = False
        self._closed = False

    # -- public API ---------------------------------------------------------------------------------

    @property
    def identity(self) -> str:
        return self._identity

    def held_jobs(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self._held)

    def post_job(self, job: str, data: bytes = b"") -> None:
        """Adds a job (``ItemExistsError`` if a job of that name exists)."""
        self._bag.add(data, item_id=validate_name(job, "job"))

    def remove_job(self, job: str) -> bool:
        """Removes a job; its holder gets ``on_job_lost`` and releases it."""
        return self._bag.remove(job)

    def jobs(self) -> dict[str, bytes]:
        return self._bag.items()

    def assignments(self) -> dict[str, str]:
        """Job -> holder identity, as stored in ZooKeeper now."""
        found: dict[str, str] = {}
        try:
            jobs = retry(partial(self._zk.get_children, self._assignments), self._op_timeout)
        except NoNodeError:
            return found
        for job in sorted(jobs):
            try:
                data, _ = retry(partial(self._zk.get, join(self._assignments, job)), self._op_timeout)
            except NoNodeError:
                continue
            found[job] = data.decode()
        return found

    def start(self) -> None:
        """Joins as an applicant and starts holding jobs (once; a stopped matcher cannot restart)."""
        if self._started or self._closed:
            return
        self._started = True
        retry(partial(self._zk.ensure_path, self._assignments), self._op_timeout)
        self._callbacks.start()
        self._loop.start()
        self._relay.start()
        self._bag.add_listener(on_added=self._poke_item, on_removed=self._job_removed)
        self._bag.start()
        self._poke()

    def stop(self, timeout: float = 10.0) -> None:
        """Leaves the queue, fires ``on_job_lost`` for our jobs and releases them, stops the threads."""
        if self._closed:
            return
        if not self._started:
            self._closed = True
            return
        try:
            self._loop.submit(self._shutdown).result(timeout)
        except Exception:
            log.warning("releasing jobs on stop failed; they go with the session", exc_info=True)
        self._closed = True
        self._relay.stop()
        self._loop.stop(timeout)
        self._callbacks.stop(timeout)

    # -- hand-offs from other threads ---------------------------------------------------------------

    def _poke(self) -> None:
        self._loop.spawn(self._reconcile)

    def _poke_item(self, item: BagItem) -> None:
        self._poke()

    def _job_removed(self, item: BagItem) -> None:
        self._loop.spawn(partial(self._release, item.id))

    def _on_state_now(self, state: str) -> None:
        # On kazoo's connection thread: stop working at once, before the session can expire.
        if state in (KazooState.SUSPENDED, KazooState.LOST):
            with self._lock:
                for job in sorted(self._held):
                    self._callbacks.spawn(partial(self._fire, self._on_lost, job))
                self._suspects |= self._held
                self._held.clear()

    def _on_state(self, state: str) -> None:
        if state == KazooState.CONNECTED:
            self._reconcile()

    def _held_fired(self, event: WatchedEvent) -> None:
        if event.type != EventType.NONE:
            self._loop.spawn(partial(self._check_held, basename(event.path)))

    def _assignments_fired(self, event: WatchedEvent) -> None:
        if event.type != EventType.NONE:
            self._poke()

    # -- work on the loop thread --------------------------------------------------------------------

    def _reconcile(self) -> None:
        """One idempotent pass: settle doubtful jobs, drop removed ones, claim one if we are first."""
        if self._closed or not self._client.connected:
            return  # the CONNECTED relay runs us again
        try:
            self._finish_releases()
            self._confirm_doubtful()
            claimed = self._queue.is_leader and self._has_capacity() and self._claim_one()
            for job in self.held_jobs() - set(self._bag.known_items()):
                self._release(job)  # removed, possibly while we were claiming it
            self._sync_queue(rotate=claimed)
        except RETRYABLE:
            if self._client.connected:
                self._loop.call_later(RETRY_DELAY, self._reconcile)

    def _confirm_doubtful(self) -> None:
        """Jobs held before a suspension, and claims with a lost reply: ours if our session owns them."""
        with self._lock:
            doubtful = sorted(self._suspects | self._uncertain)
        for job in doubtful:
            if self._owned(job):
                self._hold(job)
            with self._lock:
                self._suspects.discard(job)
            self._uncertain.discard(job)

    def _owned(self, job: str) -> bool:
        stat = self._zk.exists(join(self._assignments, job), watch=self._held_fired)
        return owned_by_session(stat, self._client)

    def _claim_one(self) -> bool:
        assigned = set(self._zk.get_children(self._assignments, watch=self._assignments_fired))
        with self._lock:
            mine = self._held | self._suspects
        free = sorted(set(self._bag.known_items()) - assigned - mine)
        return any(self._claim(job) for job in free)  # stops at the first successful claim

    def _claim(self, job: str) -> bool:
        self._uncertain.add(job)  # until we hold it or know it is not ours: see _confirm_doubtful
        try:
            self._zk.create(join(self._assignments, job), self._identity.encode(), ephemeral=True)
        except NodeExistsError:
            self._uncertain.discard(job)
            return False
        self._zk.exists(join(self._assignments, job), watch=self._held_fired)
        self._uncertain.discard(job)
        self._hold(job)
        return True

    def _hold(self, job: str) -> None:
        with self._lock:
            if not self._client.connected:
                self._suspects.add(job)  # suspended meanwhile: confirm after the reconnect
            elif job not in self._held:
                self._held.add(job)
                self._callbacks.spawn(partial(self._fire, self._on_acquired, job))

    def _check_held(self, job: str) -> None:
        try:
            still_ours = self._owned(job)
        except TRANSIENT_ERRORS:
            return  # the suspension handler and the reconnect take care of it
        if not still_ours and self._drop(job):
            self._poke()  # capacity freed: apply again

    def _drop(self, job: str) -> bool:
        """Stops holding ``job`` (firing ``on_job_lost``); whether we held it."""
        with self._lock:
            held = job in self._held
            self._held.discard(job)
            self._suspects.discard(job)
            if held:
                self._callbacks.spawn(partial(self._fire, self._on_lost, job))
        return held

    def _release(self, job: str) -> None:
        """The job was removed: stop (callback first), then delete our assignment, if any."""
        with self._lock:
            ours = job in self._held or job in self._suspects or job in self._uncertain
        if ours:
            self._drop(job)
            self._uncertain.discard(job)
            self._releasing.add(job)
            self._poke()  # _finish_releases deletes it (now, or after a reconnect) and frees capacity

    def _finish_releases(self) -> None:
        for job in sorted(self._releasing):
            self._delete_own(job)
            self._releasing.discard(job)

    def _delete_own(self, job: str) -> None:
        path = join(self._assignments, job)
        try:
            stat = self._zk.exists(path)
            if stat is not None and owned_by_session(stat, self._client):
                self._zk.delete(path, version=stat.version)
        except (NoNodeError, BadVersionError):
            pass

    def _has_capacity(self) -> bool:
        with self._lock:
            return len(self._held) + len(self._suspects) < self._max_jobs

    def _sync_queue(self, rotate: bool) -> None:
        """Applies while we have capacity; after a claim, goes to the back so others get a turn."""
        if self._applying and (rotate or not self._has_capacity()):
            self._queue.leave(self._op_timeout)
            self._applying = False
        if not self._applying and self._has_capacity():
            self._queue.join(timeout=None)
            self._applying = True

    def _shutdown(self) -> None:
        self._queue.stop(self._op_timeout)
        self._bag.stop()
        with self._lock:
            jobs = sorted(self._held | self._suspects | self._uncertain | self._releasing)
        for job in jobs:
            self._drop(job)
            try:
                if self._client.connected:
                    self._delete_own(job)
            except TRANSIENT_ERRORS:
                log.warning("could not release %s; it goes with the session", job)
        self._closed = True

    @staticmethod
    def _fire(callback: JobCallback | None, job: str) -> None:
        if callback is not None:
            try:
                callback(job)
            except Exception:
                log.exception("role-match callback failed for job %s", job)

