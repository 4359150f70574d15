"""Invariant checks for long chaos runs, from the workers' JSON evidence (plus a ZooKeeper leak check).

:class:`Ledger` ingests events incrementally (a 25-minute campaign produces millions of ticks, so raw
ticks are kept only for a recent window) and condenses ticks into *episodes*: the ticks of one resource
by one worker process under one fencing token, between two of that worker's own ``assigned`` events
for the resource. Splitting at ``assigned`` matters for the kazoo baseline, whose token is always 0: a
worker that owns a resource, loses it and gets it back later has two episodes, not one span that would
swallow the other owner's episode in between.

- Invariant 1 (exclusive): no two episodes of one resource by different worker processes overlap in
  time (:meth:`Ledger.overlaps`).
- Fencing: along a resource's episodes (in time order) the token never decreases, and strictly
  increases whenever the owner changes (:meth:`Ledger.token_regressions`).
- Invariant 2 (liveness) and balance, in a window: :func:`window_problems` (every resource ticked by
  exactly one live worker, nothing else ticked, loads within one of each other).
- :func:`zk_leaks`: members in ``G/clients`` are the live workers, claims in ``G/owners`` and stop
  markers are held only by live members' sessions, and exactly the current resources are claimed.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections import defaultdict, deque
from collections.abc import Container
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from rebalanser.paths import GroupPaths, MemberNode

from tests.support.invariants import liveness_problems

Event = dict[str, Any]
Owner = tuple[str, int]  # (member id, pid)


@dataclass
class Episode:
    resource: str
    worker: str
    pid: int
    token: int
    seq: int
    first: int
    last: int
    ticks: int = 0

    @property
    def owner(self) -> Owner:
        return (self.worker, self.pid)

    def describe(self) -> str:
        return f"{self.worker}(pid {self.pid}, token {self.token}) [{self.first}..{self.last}] {self.ticks} ticks"


def describe_overlap(resource: str, earlier: Episode, later: Episode) -> str:
    return (f"overlap on {resource}: {earlier.describe()} and {later.describe()} "
            f"(overlap {(min(earlier.last, later.last) - later.first) / 1e6:.1f} ms)")


def in_away_window(deleted: list[tuple[str, int, int]], marks: dict[str, int], resource: str,
                   earlier: Episode, later: Episode, lease_ns: int) -> bool:
    """The one overlap the protocol allows (docs/protocol.md, "Claims deleted from outside", and the model's
    ``never_two_workers``): ``earlier``'s claim (its token is the claim's czxid) was deleted from outside
    after its owner went away, ``later`` claimed the resource after that, with a larger token, and
    ``earlier`` did its last unit of work before its reconnection's handshake and within T of going away
    (its lease). Work after the handshake is never allowed: from then on its claims count only once the
    re-check on the new connection has found them."""
    away, back = marks.get("away_ns"), marks.get("reconnected_ns")
    if away is None or back is None or later.token <= earlier.token:
        return False
    return any(r == resource and token == earlier.token and away <= sent <= later.first
               and earlier.last < back and earlier.last <= away + lease_ns
               for r, token, sent in deleted)


class Ledger:
    """Thread-safe sink for every worker's events."""

    def __init__(self, recent_seconds: float = 90.0) -> None:
        self._lock = threading.Lock()
        self._recent_ns = int(recent_seconds * 1e9)
        self.episodes: dict[str, list[Episode]] = defaultdict(list)
        self._current: dict[tuple[str, int, str], Episode] = {}
        self._seq: dict[tuple[str, int, str], int] = defaultdict(int)
        self._recent: deque[Event] = deque()
        self._newest = 0
        self.others: list[Event] = []  # every non-tick event (assigned, revoked, role, session, stopped)
        self.ticks = 0
        self._reported: set[tuple[Any, ...]] = set()

    # -- ingestion -----------------------------------------------------------------------------

    def ingest(self, event: Event) -> None:
        kind = event.get("event")
        worker, pid = str(event.get("id")), int(event.get("_pid", 0))
        with self._lock:
            if kind != "tick":
                self.others.append(event)
                if kind == "assigned" or kind == "revoked":
                    for resource in event.get("resources", []):
                        self._seq[(worker, pid, resource)] += 1
                elif kind == "stopped":
                    for key in [k for k in self._seq if k[0] == worker and k[1] == pid]:
                        self._seq[key] += 1
                return
            self.ticks += 1
            resource, token, ts = str(event["resource"]), int(event["token"]), int(event["ts"])
            key = (worker, pid, resource)
            seq = self._seq[key]
            episode = self._current.get(key)
            if episode is None or episode.token != token or episode.seq != seq:
                episode = Episode(resource, worker, pid, token, seq, ts, ts)
                self._current[key] = episode
                self.episodes[resource].append(episode)
            episode.first, episode.last = min(episode.first, ts), max(episode.last, ts)
            episode.ticks += 1
            self._recent.append(event)
            self._newest = max(self._newest, ts)
            while self._recent and self._recent[0]["ts"] < self._newest - self._recent_ns:
                self._recent.popleft()

    # -- queries -------------------------------------------------------------------------------

    def ticks_between(self, start: int, end: int) -> list[Event]:
        with self._lock:
            return [e for e in self._recent if start <= e["ts"] <= end]

    def events_of(self, kinds: set[str]) -> list[Event]:
        with self._lock:
            return [e for e in self.others if e["event"] in kinds]

    def latest_roles(self) -> dict[Owner, Event]:
        """(id, pid) -> that process's latest ``role`` event."""
        latest: dict[Owner, Event] = {}
        with self._lock:
            for e in self.others:
                if e["event"] == "role":
                    key = (str(e["id"]), int(e.get("_pid", 0)))
                    if key not in latest or e["ts"] >= latest[key]["ts"]:
                        latest[key] = e
        return latest

    def on_standby(self) -> set[int]:
        """The worker processes that announced ``standby`` and not ``rejoining`` since: out of the group
        until a stop callback of theirs returns (they must work on nothing meanwhile, and hold no share;
        their connection may come and go meanwhile)."""
        latest: dict[int, Event] = {}
        with self._lock:
            for e in self.others:
                if e["event"] == "session" and e.get("state") in ("standby", "rejoining"):
                    pid = int(e.get("_pid", 0))
                    if pid not in latest or e["ts"] >= latest[pid]["ts"]:
                        latest[pid] = e
        return {pid for pid, e in latest.items() if e.get("state") == "standby"}

    def worked_by(self, pid: int) -> set[str]:
        """Every resource the process ``pid`` ever ticked."""
        with self._lock:
            return {r for r, eps in self.episodes.items() for ep in eps if ep.pid == pid}

    def final_episode_starts(self, owners: dict[str, Owner]) -> dict[str, int]:
        """resource -> first tick of the latest episode of its current owner (when that owner's
        uninterrupted work on it began)."""
        starts: dict[str, int] = {}
        with self._lock:
            for resource, owner in owners.items():
                mine = [ep for ep in self.episodes.get(resource, []) if ep.owner == owner]
                if mine:
                    starts[resource] = max(mine, key=lambda ep: ep.first).first
        return starts

    # -- invariants ----------------------------------------------------------------------------

    def overlapping(self, new_only: bool = True) -> list[tuple[str, Episode, Episode]]:
        """Episodes of one resource by two different worker processes that overlap in time: (resource,
        the earlier episode, the later one), each pair once when ``new_only``."""
        found = []
        with self._lock:
            snapshot = {r: sorted(eps, key=lambda ep: ep.first) for r, eps in self.episodes.items()}
        for resource, eps in snapshot.items():
            widest: Episode | None = None
            for ep in eps:
                if widest is not None and ep.first <= widest.last and ep.owner != widest.owner:
                    key = ("overlap", resource, widest.owner, widest.token, widest.seq, ep.owner, ep.token, ep.seq)
                    if not new_only or key not in self._reported:
                        self._reported.add(key)
                        found.append((resource, widest, ep))
                if widest is None or ep.last > widest.last:
                    widest = ep
        return found

    def overlaps(self, new_only: bool = True) -> list[str]:
        """:meth:`overlapping`, described."""
        return [describe_overlap(*pair) for pair in self.overlapping(new_only)]

    def token_regressions(self, new_only: bool = True) -> list[str]:
        """Along a resource's episodes the token never decreases, and grows when the owner changes."""
        found = []
        with self._lock:
            snapshot = {r: sorted(eps, key=lambda ep: ep.first) for r, eps in self.episodes.items()}
        for resource, eps in snapshot.items():
            for before, after in itertools.pairwise(eps):
                same_owner = before.owner == after.owner
                bad = after.token < before.token or (not same_owner and after.token == before.token)
                if not bad:
                    continue
                key = ("token", resource, before.owner, before.token, before.seq, after.owner, after.token, after.seq)
                if not new_only or key not in self._reported:
                    self._reported.add(key)
                    found.append(f"token order on {resource}: {after.describe()} after {before.describe()}")
        return found


def window_problems(
    ticks: list[Event], resources: set[str], live: dict[str, int], start: int, end: int
) -> list[str]:
    """In [start, end]: every resource ticked by exactly one live worker (``live``: id -> pid), no tick
    of anything that is not a resource, and every live worker's load within one of every other's."""
    problems = liveness_problems(ticks, resources, set(live.values()), start, end)
    loads = {worker: set() for worker in live}  # type: dict[str, set[str]]
    for e in ticks:
        if start <= e["ts"] <= end and e["resource"] in resources and live.get(e["id"]) == e.get("_pid"):
            loads[e["id"]].add(e["resource"])
    counts = {w: len(rs) for w, rs in loads.items()}
    if counts and max(counts.values()) - min(counts.values()) > 1:
        problems.append(f"unbalanced: {dict(sorted(counts.items()))}")
    return problems


def window_owners(ticks: list[Event], resources: set[str]) -> dict[str, Owner]:
    """resource -> the (id, pid) that ticked it in ``ticks`` (the last one if several)."""
    owners: dict[str, Owner] = {}
    for e in ticks:
        if e["resource"] in resources:
            owners[e["resource"]] = (str(e["id"]), int(e.get("_pid", 0)))
    return owners


# -- ZooKeeper leaks -------------------------------------------------------------------------------


def _children(zk: KazooClient, path: str) -> list[str]:
    try:
        return list(zk.get_children(path))
    except NoNodeError:
        return []


def _owner_session(zk: KazooClient, path: str) -> int | None:
    stat = zk.exists(path)
    return None if stat is None else int(stat.ephemeralOwner)


def zk_leaks(
    zk: KazooClient, group: str, live_ids: set[str], resources: set[str], planted: Container[str] = frozenset(),
    renamed: dict[str, int] | None = None,
) -> list[str]:
    """Rebalanser's layout (docs/protocol.md): no ghost members, no claim or stop
    marker held by a session that is not a live member's, every current resource claimed once and
    nothing else claimed.

    ``planted``: paths of fakes the harness put there on purpose (a persistent member node, a stop
    marker), left out of the check while they are there. ``renamed``: claim path -> czxid of live claims
    whose data an administrator overwrote; such a claim is judged by its session alone."""
    paths = GroupPaths.of(group)
    renamed = renamed or {}
    problems: list[str] = []
    sessions: dict[int, str] = {}
    ids: list[str] = []
    for name in _children(zk, paths.clients):
        if paths.client(name) in planted:
            continue
        member = MemberNode.parse(name)
        if member is None:
            problems.append(f"foreign child in clients: {name}")
            continue
        owner = _owner_session(zk, paths.client(name))
        if owner is not None:
            sessions[owner] = member.member_id
            ids.append(member.member_id)
    if sorted(ids) != sorted(live_ids):
        problems.append(f"members in ZooKeeper {sorted(ids)} != live workers {sorted(live_ids)}")
    claims = set(_children(zk, paths.owners))
    for resource in sorted(claims):
        path = paths.owner(resource)
        try:
            data, stat = zk.get(path)
        except NoNodeError:
            claims.discard(resource)
            continue
        holder = sessions.get(int(stat.ephemeralOwner))
        if holder is None:
            problems.append(f"claim {resource} held by session {stat.ephemeralOwner:#x}, not a live member's")
            continue
        if renamed.get(path) == stat.czxid:
            continue
        try:
            named = json.loads(data).get("member")
        except (ValueError, AttributeError):
            named = None
        if named != holder:
            problems.append(f"claim {resource} names {named!r} but is held by {holder}'s session")
    if claims != resources:
        missing, extra = sorted(resources - claims), sorted(claims - resources)
        problems.append(f"claims != resources: unclaimed {missing[:10]}, claimed non-resources {extra[:10]}")
    for generation in _children(zk, paths.stopped):
        if f"{paths.stopped}/{generation}" in planted:
            continue
        for marker in _children(zk, f"{paths.stopped}/{generation}"):
            if f"{paths.stopped}/{generation}/{marker}" in planted:
                continue
            owner = _owner_session(zk, f"{paths.stopped}/{generation}/{marker}")
            if owner is not None and owner not in sessions:
                problems.append(f"stop marker {generation}/{marker} held by a dead session {owner:#x}")
    return problems


def error_reports(events: list[Event], path: str, since_ns: int) -> list[Event]:
    """``error`` events (bad data read from ZooKeeper, reported and ignored) naming ``path``, from
    ``since_ns`` on."""
    return [e for e in events if e.get("event") == "error" and int(e.get("ts", 0)) >= since_ns
            and (e.get("path") == path or path in json.dumps(e))]


def kazoo_leaks(zk: KazooClient, group: str, live_ids: set[str]) -> list[str]:
    """kazoo SetPartitioner's layout (``G/kazoo-partitioner/{party,locks}``): party members are the live
    workers, and every lock node is held by a party member's session."""
    base = f"{group}/kazoo-partitioner"
    problems: list[str] = []
    sessions: set[int] = set()
    ids: list[str] = []
    for name in _children(zk, f"{base}/party"):
        owner = _owner_session(zk, f"{base}/party/{name}")
        if owner is not None:
            sessions.add(owner)
            ids.append(name.split("-", 1)[1] if "-" in name else name)  # "<uuid hex>-<identifier>"
    if sorted(ids) != sorted(live_ids):
        problems.append(f"party members {sorted(ids)} != live workers {sorted(live_ids)}")
    for item in _children(zk, f"{base}/locks"):
        for node in _children(zk, f"{base}/locks/{item}"):
            owner = _owner_session(zk, f"{base}/locks/{item}/{node}")
            if owner is not None and owner not in sessions:
                problems.append(f"lock {item}/{node} held by a session that is not a party member's")
    return problems
