"""The every-request explorer: each protocol path, each ZooKeeper request on it, each fault point.

A *scenario* drives one protocol path (a join, a graceful leave, a move, standby and rejoin, an
eviction, taking office, a commit, a Global Barrier round, the failover's end of a member) with real
worker processes (the ``rebalanser worker`` CLI, each behind its own :class:`~tests.chaos.proxy.FaultProxy`)
on a real ZooKeeper server. Its *actors* are the processes whose requests it enumerates: the members
the path involves, their coordinator, or the operator's failover (``end_member``, called directly, on a
client behind a proxy of its own).

1. A fault-free *recording* run counts every request the actors send from the trigger on (a
   :class:`~tests.chaos.proxy.RequestTap` per actor; keep-alives, the lease prober's periodic ``sync``
   and what kazoo sends inside a reconnect are not counted). Request index ``N`` is the ``N``-th of
   them, actor by actor in the scenario's order.
2. For each index and each fault of :data:`~tests.chaos.proxy.FAULTS` — ``drop`` (the connection drops
   before the request is sent), ``lose-reply`` (applied, reply lost), ``expire`` (the session expires
   there) — the scenario runs again from scratch with that one fault, then the checks read the
   evidence: the workers' JSON events and ZooKeeper's state.

Checks (``Point.violations``, by category):

- ``overlap`` / ``token``: no two workers work on a resource at once; tokens never go back;
- ``liveness``: every resource worked on by exactly one live member, balanced, within the bound;
- ``claims``: no claim left held by a session past T + interval unless its member works on it
  (nor by a session that is no live member's, nor a resource unclaimed);
- ``members``: exactly one member node per live session, and one per live worker;
- ``coordinator``: a live member in office within the bound.

Replay one point: ``python -m tests.chaos.explore --scenario standby --request 4 --fault lose-reply``;
all of them: ``--all`` (the report goes to ``docs/chaos-report.md``'s explorer section with
``--report``). The same point replays the same fault at the same request; timing still varies, since
the processes and the server are real.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.retry import KazooRetry
from rebalanser.paths import GroupPaths, MemberNode

from tests.chaos.checks import describe_overlap, in_away_window, window_owners
from tests.chaos.fleet import Fleet, Settings
from tests.chaos.proxy import FAULTS, GATED, FaultProxy, RequestTap
from tests.chaos.trace import record_outside_delete
from tests.support.zk import ZkCluster, four_letter, make_cluster

REPO = Path(__file__).resolve().parents[2]
ALL_FAULTS = (*FAULTS, GATED)
FLAP = 2.5  # a flap fault drops every request for this many T (reconnects keep the session alive)
SETTINGS = Settings(workers=2, resources=6, session_timeout=2.0, interval=0.5, tick=0.1,
                    stop_timeout=0.3, slow_delay=5.0, slack=4.0)


# -- scenarios -------------------------------------------------------------------------------------


@dataclass
class Run:
    """One run of a scenario: the fleet, the actors' proxies, and what the trigger left to check."""

    fleet: Fleet
    cluster: ZkCluster
    taps: dict[str, RequestTap] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    failover_proxy: FaultProxy | None = None
    marks: dict[str, int] = field(default_factory=dict)  # instants (monotonic ns) the trigger noted
    # claims the trigger deleted from outside: (resource, token (the claim's czxid), instant the delete was sent)
    deleted: list[tuple[str, int, int]] = field(default_factory=list)

    def proxy(self, actor: str) -> FaultProxy:
        if actor == "failover":
            if self.failover_proxy is None:
                self.failover_proxy = FaultProxy([s.address for s in self.cluster.servers])
            return self.failover_proxy
        proxy = self.fleet.proxies.get(actor)
        if proxy is None:  # a worker not started yet: its proxy is made now, so that it is tapped from its start
            proxy = self.fleet.proxies[actor] = FaultProxy([s.address for s in self.cluster.servers])
        return proxy


@dataclass(frozen=True)
class Scenario:
    name: str
    path: str  # the protocol path it drives
    members: tuple[str, ...]  # started (in this order, the first one in office) before the trigger
    actors: tuple[str, ...]  # whose requests are enumerated, in this order
    trigger: Callable[[Run], None]
    target: str = "resource-barrier"
    slow: tuple[str, ...] = ()  # members whose stop callback overruns the stop timeout (standby)
    resources: int = SETTINGS.resources  # at the start
    until: str = ""  # a session state (e.g. ``rejoining``) to wait for after the trigger before the checks,
    began: str = ""  # once this one (e.g. ``standby``) was reported
    slow_start: tuple[str, ...] = ()  # members whose start callback takes ``slow_delay``
    faults: tuple[str, ...] = FAULTS  # the faults put at each request
    # what a ``gate`` fault does while the request is held (the point is before that request); with
    # ``after``, one more point runs it once the trigger is done (after every request)
    gate: Callable[[Run], None] | None = None
    after: bool = False
    also: frozenset[int] = frozenset()  # background opcodes counted as the actors' requests (setWatches)
    connects: tuple[str, ...] = ()  # actors whose handshakes count as requests (``connect``)
    knobs: tuple[tuple[str, float], ...] = ()  # Settings fields that differ from SETTINGS
    remark: Callable[[Run], str] | None = None  # a note on what the run showed (did the scene happen)
    # the claims check also grants a claim the slow callback's time: a stop callback holds its claim while
    # it runs, and a start callback's resources are claimed before it (and worked on after it) returns
    callback_grace: bool = False
    # members that nothing in the scenario gives a reason to stop anything: a ``revoked`` of theirs after the
    # trigger is a claim taken from a live member (issue 28's second window: the failover deleting a claim
    # that a live member had just taken, at the version it had read for the dead member's)
    steady: tuple[str, ...] = ()

    def points(self, requests: int) -> list[tuple[int, str]]:
        """Every (request index, fault) point of a recording of ``requests`` requests, request by request;
        with ``after``, the point past the last request (index ``requests``)."""
        out = [(i, f) for i in range(requests) for f in self.faults]
        if self.after:
            out += [(requests, f) for f in self.faults if f == GATED]
        return out


def _spawn(member: str) -> Callable[[Run], None]:
    def trigger(run: Run) -> None:
        run.fleet.spawn(member, "normal")
    return trigger


def _leave(member: str) -> Callable[[Run], None]:
    def trigger(run: Run) -> None:
        worker = run.fleet.workers[member]
        threading.Thread(target=worker.terminate, args=(30.0,), daemon=True).start()
    return trigger


def _kill(member: str) -> Callable[[Run], None]:
    def trigger(run: Run) -> None:
        run.fleet.workers[member].kill()
    return trigger


def _member_node(zk: KazooClient, group: str, member: str) -> str | None:
    paths = GroupPaths.of(group)
    for name in zk.get_children(paths.clients):
        parsed = MemberNode.parse(name)
        if parsed is not None and parsed.member_id == member:
            return str(name)
    return None


def _evict(member: str) -> Callable[[Run], None]:
    """An administrator (or a group deletion in progress) deletes a live member's node."""
    def trigger(run: Run) -> None:
        name = _member_node(run.fleet.zk, run.fleet.group, member)
        if name is None:
            raise RuntimeError(f"{member} has no member node to evict")
        run.fleet.zk.delete(GroupPaths.of(run.fleet.group).client(name))
    return trigger


def _standby(member: str) -> Callable[[Run], None]:
    """One of the member's resources is deleted (its stop callback overruns the stop timeout, and goes
    on running), then created again: assigned back to the member while that callback still runs, it
    steps aside (standby), and rejoins once the callback has returned."""
    def trigger(run: Run) -> None:
        worker = run.fleet.workers[member]
        victim = min(run.fleet.owned_by(worker))
        claim = GroupPaths.of(run.fleet.group).owner(victim)
        run.fleet.delete_resource(victim)
        deadline = time.monotonic() + 30
        while run.fleet.zk.exists(claim) is not None:  # released once the stop timeout ran out
            if time.monotonic() > deadline:
                raise RuntimeError(f"{member} never released {victim}")
            time.sleep(0.02)
        run.fleet.add_resource(victim)
    return trigger


def _claim_race(run: Run) -> None:
    """A resource is created, and deleted again as soon as a member has claimed it: the plan takes it
    back while its claimer may still be finishing the claim."""
    name = run.fleet.pool[run.fleet.settings.resources]
    claim = GroupPaths.of(run.fleet.group).owner(name)
    run.fleet.add_resource(name)
    deadline = time.monotonic() + 30
    while run.fleet.zk.exists(claim) is None:
        if time.monotonic() > deadline:
            run.notes.append(f"{name} was never claimed")
            break
        time.sleep(0.01)
    run.fleet.delete_resource(name)


def _add_resource(run: Run) -> None:
    run.fleet.add_resource(run.fleet.pool[run.fleet.settings.resources])


def _failover(member: str) -> Callable[[Run], None]:
    """The member's container is confirmed dead (SIGKILL): the operator's failover ends its member node
    before its session expires, on a client of its own behind the ``failover`` proxy. An attempt that
    fails (its connection or session lost) is run again on a fresh client, as the operator's next pass
    over the pod would."""
    def trigger(run: Run) -> None:
        from rebalanser_operator.failover.choice import EndedInstance
        from rebalanser_operator.failover.endmember import MemberChanged, end_member

        name = _member_node(run.fleet.zk, run.fleet.group, member)
        run.fleet.workers[member].kill()
        if name is None:
            raise RuntimeError(f"{member} has no member node")
        proxy = run.proxy("failover")
        for attempt in range(2):
            zk = KazooClient(hosts=proxy.hosts, timeout=SETTINGS.session_timeout * 5,
                             connection_retry=KazooRetry(max_tries=3, delay=0.05))
            try:
                zk.start(timeout=10)
                end_member(zk, GroupPaths.of(run.fleet.group), name, EndedInstance("worker", "explorer"))
                run.notes.append(f"failover attempt {attempt + 1} ended {name}")
                return
            except MemberChanged:
                run.notes.append(f"failover attempt {attempt + 1}: {name} already gone")
                return
            except (KazooException, run.fleet.zk.handler.timeout_exception) as exc:
                run.notes.append(f"failover attempt {attempt + 1} failed: {exc!r}")
            finally:
                with contextlib.suppress(Exception):
                    zk.stop()
                    zk.close()
    return trigger


def _claims_of(run: Run, member: str) -> list[str]:
    """The resources whose claims ``member``'s latest session holds (read from ZooKeeper)."""
    proxy = run.fleet.proxies.get(member)
    if proxy is None or proxy.session is None:
        return []
    session = proxy.session[0]
    paths = GroupPaths.of(run.fleet.group)
    held = []
    for resource in sorted(run.fleet.zk.get_children(paths.owners)):
        stat = run.fleet.zk.exists(paths.owner(resource))
        if stat is not None and int(stat.ephemeralOwner) == session:
            held.append(str(resource))
    return held


def _await(what: str, done: Callable[[], bool], patience: float) -> None:
    deadline = time.monotonic() + patience
    while not done():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} within {patience:.0f} s")
        time.sleep(0.02)


def _reconnect_busy(member: str, newcomer: str, busy: str) -> Callable[[Run], None]:
    """Issue 28's first window. ``member``'s loop is made busy in a callback that takes ``slow_delay`` (2.5 s)
    (``stop``: one of its resources is deleted, and two of the other member's, so that it holds more
    than its share once ``newcomer`` has joined; ``start``: its last resource is deleted and a new one
    added that sorts right after its first, which the plan gives it and keeps with it), and ``newcomer``
    joins, so that the plan moves one of ``member``'s resources to it while its loop cannot act (with
    ``start``, one it works on, not the one it is starting). Then its connection is reset and its link
    held silent, every claim it holds (but the one its stop callback is for) is deleted from outside
    while it is away, and its link comes back: it reconnects in the same session with its loop still busy. A
    resource the plan gave ``newcomer`` is claimed by it at once; ``member`` must stop working on every
    lost claim from its reconnection on."""
    def trigger(run: Run) -> None:
        fleet = run.fleet
        paths = GroupPaths.of(fleet.group)
        run.marks["trigger_ns"] = time.monotonic_ns()
        mine = sorted(fleet.owned_by(fleet.workers[member]))
        others = sorted(set(fleet.resources) - set(mine))
        if busy == "stop":  # 3 + 3 -> the first member 1, ``member`` 2 (and one in its stop callback)
            victim = mine[0]
            for name in [victim, *others[:2]]:
                fleet.delete_resource(name)
        else:  # 3 + 3 -> 3 + 2 + a new one for ``member`` (its start callback), named to sort right after
            # its first: the plan that gives ``newcomer`` its share trims ``member``'s last names, so it keeps
            # the resource it is starting and hands over one it works on (whose claim is deleted below)
            victim = ""
            fleet.delete_resource(mine[-1])
            fleet.add_resource(f"{mine[0]}a")
        fleet.spawn(newcomer, "normal")
        _await(f"{newcomer} never joined", lambda: _member_node(fleet.zk, fleet.group, newcomer) is not None, 30)
        proxy = fleet.proxies[member]
        before = len(proxy.handshakes_ns)
        proxy.blackhole()
        proxy.cut()
        run.marks["away_ns"] = time.monotonic_ns()
        # T/4 at most: a library that reports its ``suspended`` only from its busy loop (the code before
        # 239a50b) would otherwise stay silent past T, and the point would test an expiry, not a reconnection
        if not _reported_away(run, member, patience=fleet.settings.session_timeout / 4):
            run.notes.append(f"{member} had not reported its connection lost when its claims were deleted")
        lost = [r for r in _claims_of(run, member) if r != victim]
        for resource in lost:
            stat = fleet.zk.exists(paths.owner(resource))
            sent = time.monotonic_ns()
            try:
                fleet.zk.delete(paths.owner(resource))
            except NoNodeError:
                continue
            record_outside_delete(fleet.log_dir, resource, sent)  # the conformance trace's ``delete``
            if stat is not None:
                run.deleted.append((resource, int(stat.czxid), sent))
        run.notes.append(f"{member} away; its claims on {lost} deleted from outside")
        proxy.restore()
        _await(f"{member} never reconnected", lambda: len(proxy.handshakes_ns) > before, 20)
        run.marks["reconnected_ns"] = proxy.handshakes_ns[before]
    return trigger


AWAY = frozenset({"suspended", "expired", "lost"})


def _reported_away(run: Run, member: str, patience: float) -> bool:
    """Waits (at most ``patience``) until ``member``'s latest session event says it is away. Its link is
    cut already; the wait only orders what is recorded as it happened: the outside deletions that follow
    come after its ``suspended`` (the library reports it when kazoo sees the connection drop, a few ms
    after the cut), as the model's disconnection comes before them (docs/protocol.md, "Conformance")."""
    pid = run.fleet.workers[member].pid

    def away() -> bool:
        states = [e.get("state") for e in run.fleet.ledger.events_of({"session"}) if e.get("_pid") == pid]
        return bool(states) and states[-1] in AWAY

    deadline = time.monotonic() + patience
    while not away():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def _busy_at_reconnection(member: str, busy: str) -> Callable[[Run], str]:
    """Whether ``member``'s callback was still running when it reconnected (the scene the point needs):
    a stop callback returns at its ``revoked`` event; a start callback is called at its ``assigned``
    event and returns ``slow_delay`` later."""
    def remark(run: Run) -> str:
        reconnected = run.marks.get("reconnected_ns")
        if reconnected is None:
            return f"{member} did not reconnect in the trigger"
        worker = run.fleet.workers[member]
        since = run.marks["trigger_ns"]
        if busy == "stop":
            ends = [e["ts"] for e in run.fleet.ledger.events_of({"revoked"})
                    if e.get("_pid") == worker.pid and e["ts"] >= since]
        else:
            delay = int(run.fleet.settings.slow_delay * 1e9)
            ends = [e["ts"] + delay for e in run.fleet.ledger.events_of({"assigned"})
                    if e.get("_pid") == worker.pid and e["ts"] >= since]
        after = [t for t in ends if t > reconnected]
        if after:
            late = (min(after) - reconnected) / 1e9
            return f"busy: {member}'s {busy} callback returned {late:.2f} s after its reconnection"
        return f"not busy: {member}'s {busy} callback had returned before its reconnection"
    return remark


def _direct(cluster: ZkCluster) -> tuple[tuple[str, int], ...]:
    out = []
    for server in cluster.servers:
        host, port = server.address.rsplit(":", 1)
        out.append((host, int(port)))
    return tuple(out)


def _dead_session_ends(member: str) -> Callable[[Run], None]:
    """The dead ``member``'s session ends at this point (the failover's request held meanwhile): ended by
    the server as at its expiry (closed with its id and password: for a process that is dead, nobody can
    tell the two apart, and its own timeout, longer than the whole failover, keeps it from expiring
    anywhere else), then the live members are given the time to claim every resource, so that the
    failover's later requests meet their claims."""
    def gate(run: Run) -> None:
        from rebalanser_operator.failover.sessionclose import SessionCloser

        proxy = run.fleet.proxies[member]
        if proxy.session is None:
            run.notes.append(f"{member} had no session to end")
            return
        session, password = proxy.session
        closed = SessionCloser(_direct(run.cluster)).close(session, password)
        run.notes.append(f"{member}'s session 0x{session & (2**64 - 1):x} ended here: {closed.value}")
        fleet, paths = run.fleet, GroupPaths.of(run.fleet.group)

        def claimed() -> bool:
            owners = set(fleet.zk.get_children(paths.owners))
            if not fleet.resources <= owners:
                return False
            stats = [fleet.zk.exists(paths.owner(r)) for r in fleet.resources]
            return all(st is not None and int(st.ephemeralOwner) != session for st in stats)

        try:
            _await("the live members never claimed every resource", claimed, fleet.settings.bound)
        except RuntimeError as exc:
            run.notes.append(str(exc))
    return gate


SCENARIOS: dict[str, Scenario] = {s.name: s for s in [
    Scenario("join", "a member joins", ("w0", "w1"), ("w2",), _spawn("w2")),
    Scenario("leave", "graceful leave", ("w0", "w1", "w2"), ("w2", "w0"), _leave("w2")),
    Scenario("move", "resources move from live members to a new one", ("w0", "w1"), ("w1", "w0"), _spawn("w2")),
    Scenario("standby", "standby and rejoin", ("w0", "w1"), ("w1", "w0"), _standby("w1"), slow=("w1",),
             until="rejoining", began="standby"),
    Scenario("evict", "eviction (member node deleted from outside)", ("w0", "w1", "w2"), ("w2", "w0"),
             _evict("w2")),
    Scenario("take-office", "a coordinator dies, the next takes office", ("w0", "w1", "w2"), ("w1", "w2"),
             _kill("w0")),
    Scenario("commit", "the coordinator commits a plan for a new resource", ("w0", "w1"), ("w0", "w1"),
             _add_resource),
    Scenario("claim-race", "a new resource is deleted again as soon as it is claimed", ("w0", "w1"),
             ("w1", "w0"), _claim_race, resources=5),
    Scenario("global-barrier", "a Global Barrier round", ("w0", "w1"), ("w0", "w1", "w2"), _spawn("w2"),
             target="global-barrier"),
    Scenario("failover", "the operator's failover ends a dead member", ("w0", "w1"), ("failover", "w0"),
             _failover("w1")),
    # Issue 28's seams: a reconnection with a busy callback and claims deleted while away; the failover's
    # requests with the dead member's session ending before each of them (and after the last).
    Scenario("reconnect-stop", "a member reconnects with its loop busy in a stop callback and claims deleted "
             "while it was away", ("w0", "w1"), ("w1",), _reconnect_busy("w1", "w2", "stop"), slow=("w1",),
             also=frozenset({101}), knobs=(("stop_timeout", 4.0), ("slow_delay", 2.5)),
             remark=_busy_at_reconnection("w1", "stop"), callback_grace=True),
    Scenario("reconnect-start", "a member reconnects with its loop busy in a start callback and claims deleted "
             "while it was away", ("w0", "w1"), ("w1",), _reconnect_busy("w1", "w2", "start"),
             slow_start=("w1",), also=frozenset({101}), knobs=(("stop_timeout", 4.0), ("slow_delay", 2.5)),
             remark=_busy_at_reconnection("w1", "start"), callback_grace=True),
    Scenario("failover-expiry", "the failover's requests with the dead member's session ending before each "
             "(and after the last)", ("w0", "w1"), ("failover",), _failover("w1"), faults=(GATED,),
             gate=_dead_session_ends("w1"), after=True, connects=("failover",),
             knobs=(("session_timeout", 4.0),), steady=("w0",)),
]}


# -- one run ---------------------------------------------------------------------------------------


@dataclass
class Point:
    scenario: str
    request: int  # -1: the recording run
    fault: str  # "" for the recording run
    actor: str = ""
    local: int = -1  # index among the actor's own requests
    operation: str = ""
    fired: bool = False
    violations: list[list[str]] = field(default_factory=list)  # [category, message]
    seen: dict[str, list[str]] = field(default_factory=dict)  # actor -> its requests, in order
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)  # seconds per phase of the run (the point's cost)

    @property
    def categories(self) -> list[str]:
        return sorted({c for c, _ in self.violations})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _settings(scenario: Scenario) -> Settings:
    return Settings(**{**asdict(SETTINGS), "target": scenario.target, "workers": len(scenario.members),
                       "resources": scenario.resources, **dict(scenario.knobs)})


def _behaviour(scenario: Scenario, member: str) -> str:
    return "slow" if member in scenario.slow else "slow-start" if member in scenario.slow_start else "normal"


EXPIRY_PATIENCE = 60.0  # seconds an ``expire`` fault waits for the server to expire a silent session


def live_sessions(cluster: ZkCluster) -> set[int]:
    """The sessions the server's session tracker (the leader's, in an ensemble) still keeps: the
    ``SessionTracker dump`` section of the ``dump`` four-letter command."""
    server = cluster.servers[0] if len(cluster.servers) == 1 else cluster.leader()
    text = four_letter(server.client_port, "dump")
    tracker = text.split("ephemeral nodes dump", 1)[0]
    return {int(word, 16) for word in re.findall(r"\b0x[0-9a-fA-F]+\b", tracker)}


def _await_expiry(cluster: ZkCluster) -> Callable[[int, bytes], None]:
    """Waits, while the client's link is silent, until the server has expired the session by its own
    clock (it does T after it last heard of the session, rounded up to a tick)."""
    def expire(session: int, _password: bytes) -> None:
        deadline = time.monotonic() + EXPIRY_PATIENCE
        while session in live_sessions(cluster):
            if time.monotonic() > deadline:
                raise TimeoutError(f"session {session:#x} still alive {EXPIRY_PATIENCE:.0f} s into the silence")
            time.sleep(0.05)
    return expire


def _start_members(run: Run, scenario: Scenario) -> None:
    """The first member alone (so that it takes office), then the rest; waits until all settled."""
    fleet = run.fleet
    for name in fleet.pool[: fleet.settings.resources]:
        fleet.add_resource(name)
    started = time.monotonic_ns()
    first, *rest = scenario.members
    fleet.spawn(first, _behaviour(scenario, first))
    deadline = time.monotonic() + 60
    while fleet.coordinator() is None:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{first} never took office")
        time.sleep(0.05)
    for member in rest:  # one by one: the election order (who takes office next) is the scenario's order
        worker = fleet.spawn(member, _behaviour(scenario, member))
        while not any(pid == worker.pid for (_, pid) in fleet.ledger.latest_roles()):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{member} never joined")
            time.sleep(0.05)
    # one clean window is enough to begin from (the checks after the trigger ask for two): 0.6 s less a point
    settled = fleet.wait_recovered(started, cap=60, windows=1)
    if not settled.ok:
        raise RuntimeError(f"the fleet never settled before the trigger: {settled.problems}")


def run_point(cluster: ZkCluster, scenario: Scenario, workdir: Path, tap_for: Callable[[str, Run], RequestTap],
              point: Point, then: Callable[[Run], None] | None = None) -> Point:
    """One run of ``scenario``: its members started, every actor's requests tapped (``tap_for``), the
    trigger, ``then`` (e.g. an ``after`` point's gate), and the checks."""
    began = time.monotonic()
    phase = _Phases(point.phases)
    settings = _settings(scenario)
    fleet = ExploreFleet(cluster, settings, workdir, random.Random(0))
    run = Run(fleet, cluster)
    phase("setup")
    try:
        _start_members(run, scenario)
        for actor in scenario.actors:
            run.taps[actor] = run.proxy(actor).tap(tap_for(actor, run)) or RequestTap()
        phase("members")
        trigger_ns = time.monotonic_ns()
        watch = ClaimWatch(run, settings.slow_delay if scenario.callback_grace else 0.0)
        watch.start()
        try:
            scenario.trigger(run)
            if then is not None:
                then(run)
                point.fired = True
            phase("trigger")
            point.violations = check(run, scenario, trigger_ns)
            if scenario.remark is not None:
                point.notes.append(scenario.remark(run))
            phase("checks")
        finally:
            point.violations += watch.stop()
        states = [str(e.get("state")) for e in fleet.ledger.events_of({"session"}) if e["ts"] >= trigger_ns]
        point.notes += [f"session states after the trigger: {_runs(states)}"] if states else []
    except (RuntimeError, KazooException, TimeoutError, fleet.zk.handler.timeout_exception) as exc:
        # The harness could not drive the scenario (e.g. the fleet never settled on an overloaded host):
        # reported as its own category, never as the library's violation, and the exploration goes on.
        point.violations.append(["harness", f"the scenario could not be driven: {exc!r}"])
    finally:
        for actor, tap in run.taps.items():
            point.seen[actor] = list(tap.seen)
            if tap.fired.is_set():
                point.fired = True
            if tap.error:
                point.notes.append(f"{actor}: {tap.error}")
        point.notes += run.notes
        phase("")
        fleet.discard()
        if run.failover_proxy is not None:
            run.failover_proxy.close()
        phase("teardown")
    point.seconds = round(time.monotonic() - began, 1)
    return point


class _Phases:
    """``phase(name)`` books the time since the previous call under ``name`` (``""``: not booked)."""

    def __init__(self, into: dict[str, float]) -> None:
        self.into, self.last = into, time.monotonic()

    def __call__(self, name: str) -> None:
        now = time.monotonic()
        if name:
            self.into[name] = round(self.into.get(name, 0.0) + now - self.last, 2)
        self.last = now


def _runs(states: list[str]) -> str:
    """``a a b a`` -> ``a*2 b a``."""
    out: list[list[Any]] = []
    for state in states:
        if out and out[-1][0] == state:
            out[-1][1] += 1
        else:
            out.append([state, 1])
    return " ".join(s if n == 1 else f"{s}*{n}" for s, n in out)


class ExploreFleet(Fleet):
    """A fleet that ends with SIGKILL (its group is thrown away; a graceful leave only costs time)."""

    def discard(self) -> None:
        for worker in self.workers.values():
            if worker.alive:
                worker.kill()
        self.close()


# -- checks ----------------------------------------------------------------------------------------


class ClaimWatch:
    """Samples ZooKeeper's claims every 0.2 s from the trigger to the end of the checks: a claim held by
    a session whose process does not work on the resource (or by a session no process of the fleet
    has) for longer than T + interval (plus one observation window, the evidence's own delay) after
    the fault ended is a violation. Sessions are told apart by what the proxies saw in each connect
    reply, not by what the library says."""

    PERIOD = 0.2

    def __init__(self, run: Run, grace: float = 0.0) -> None:
        self.run = run
        settings = run.fleet.settings
        self.limit_ns = int((settings.session_timeout + settings.interval + settings.window + grace) * 1e9)
        self.since: dict[tuple[str, int], int] = {}
        self.found: list[list[str]] = []
        self._reported: set[tuple[str, int]] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="claim-watch")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> list[list[str]]:
        self._stop.set()
        self._thread.join(10)
        return self.found

    def _loop(self) -> None:
        while not self._stop.wait(self.PERIOD):
            with contextlib.suppress(KazooException, self.run.fleet.zk.handler.timeout_exception):
                self.sample()

    def _healed_ns(self) -> int:
        """When the injected fault ended (a flap, or the silence before an expiry, lasts a while)."""
        return max((t.healed_ns for t in list(self.run.taps.values())), default=0)

    def _sessions(self) -> dict[int, str]:
        out = {}
        for name, proxy in list(self.run.fleet.proxies.items()):
            if proxy.session is not None:
                out[proxy.session[0]] = name
        return out

    def sample(self) -> None:
        fleet = self.run.fleet
        zk, paths = fleet.zk, GroupPaths.of(fleet.group)
        now = time.monotonic_ns()
        ticks = fleet.ledger.ticks_between(now - int(fleet.settings.window * 1e9), now)
        worked = {(e["id"], e.get("_pid"), e["resource"]) for e in ticks}
        sessions = self._sessions()
        held: set[tuple[str, int]] = set()
        for resource in zk.get_children(paths.owners):
            stat = zk.exists(paths.owner(resource))
            if stat is None:
                continue
            key = (resource, int(stat.ephemeralOwner))
            held.add(key)
            holder = sessions.get(key[1])
            worker = fleet.workers.get(holder or "")
            if worker is not None and (worker.member_id, worker.pid, resource) in worked:
                self.since.pop(key, None)
                continue
            first = max(self.since.setdefault(key, now), self._healed_ns())
            if now - first > self.limit_ns and key not in self._reported:
                self._reported.add(key)
                who = f"{holder}'s session" if holder else f"session {key[1]:#x} (no worker's)"
                self.found.append(["claims", f"claim {resource} held by {who} for over "
                                             f"{self.limit_ns / 1e9:.1f} s without its process working on it"])
        for key in [k for k in self.since if k not in held]:
            del self.since[key]


def check(run: Run, scenario: Scenario, trigger_ns: int) -> list[list[str]]:
    fleet, settings = run.fleet, run.fleet.settings
    bound = settings.bound + settings.session_timeout  # a fault may cost one session, then the bound
    found: list[list[str]] = []
    if scenario.until:  # only once the path began (a fault before it may keep the path from being taken)
        start_by = time.monotonic() + settings.interval + 2.0
        while scenario.began not in _states_since(fleet, trigger_ns) and time.monotonic() < start_by:
            time.sleep(0.05)
        deadline = time.monotonic() + settings.slow_delay + bound
        while scenario.began in _states_since(fleet, trigger_ns) and scenario.until not in _states_since(
                fleet, trigger_ns):
            if time.monotonic() > deadline:
                found.append(["liveness", f"no member reported {scenario.until!r} within "
                                          f"{settings.slow_delay + bound:.1f} s"])
                break
            time.sleep(0.05)
        trigger_ns = time.monotonic_ns()
    recovery = fleet.wait_recovered(trigger_ns, cap=bound + 2 * settings.window)
    if not recovery.ok:
        found += [["liveness", p] for p in recovery.problems[:5]]
    found += _overlaps(run, settings.session_timeout)
    found += [["token", p] for p in fleet.ledger.token_regressions()]
    found += _unsteady(run, scenario, trigger_ns)
    found += unverified_starts(run.fleet.ledger.events_of({"assigned"}), run.deleted)
    grace = settings.session_timeout + settings.interval  # T + interval
    found += _settled(lambda: _zk_problems(fleet), grace + settings.slack)
    if fleet.coordinator() is None or fleet.coordinator() not in fleet.running():
        found.append(["coordinator", f"no live member in office within {bound:.1f} s of the trigger"])
    return found


def _overlaps(run: Run, session_timeout: float) -> list[list[str]]:
    """Two workers on one resource at once, but for the window docs/protocol.md allows (see
    :func:`in_away_window`), which goes into the run's notes instead."""
    found = []
    for resource, earlier, later in run.fleet.ledger.overlapping():
        text = describe_overlap(resource, earlier, later)
        if in_away_window(run.deleted, run.marks, resource, earlier, later, int(session_timeout * 1e9)):
            run.notes.append(f"{text}: allowed, its claim was deleted from outside while its owner was away "
                             "and it stopped before its reconnection")
        else:
            found.append(["overlap", text])
    return found


def _unsteady(run: Run, scenario: Scenario, since_ns: int) -> list[list[str]]:
    """A ``revoked`` after the trigger by a member the scenario gives no reason to stop anything."""
    found = []
    for member in scenario.steady:
        worker = run.fleet.workers.get(member)
        if worker is None:
            continue
        for event in run.fleet.ledger.events_of({"revoked"}):
            if event.get("_pid") == worker.pid and event["ts"] >= since_ns:
                found.append(["lost", f"{member} stopped {event.get('resources')} after the trigger: a live member "
                                      "lost what nobody had a reason to take from it"])
    return found


def unverified_starts(assigned: list[dict[str, Any]], deleted: list[tuple[str, int, int]]) -> list[list[str]]:
    """A start callback called with the token of a claim deleted (from outside) before the call: the member
    started work under a claim it cannot have verified since (the rule ``start_verified``). ``assigned``: the
    workers' ``assigned`` events (stamped when the library called ``on_assigned``)."""
    found = []
    for resource, token, sent in deleted:
        for event in assigned:
            if event.get("token") == token and resource in event.get("resources", ()) and event["ts"] > sent:
                found.append(["unverified", f"{event.get('id')} started {resource} with token {token}, "
                                            f"{(event['ts'] - sent) / 1e9:.2f} s after that claim was deleted"])
    return found


def _states_since(fleet: Fleet, since_ns: int) -> set[str]:
    return {str(e.get("state")) for e in fleet.ledger.events_of({"session"}) if e["ts"] >= since_ns}


def _settled(read: Callable[[], list[list[str]]], patience: float) -> list[list[str]]:
    """``read()`` until it finds nothing, for up to ``patience`` seconds; its last findings."""
    deadline = time.monotonic() + patience
    while True:
        try:
            found = read()
        except KazooException as exc:
            found = [["harness", f"could not read ZooKeeper: {exc!r}"]]
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def _zk_problems(fleet: Fleet) -> list[list[str]]:
    """ZooKeeper's state against the evidence: member nodes per session and per live worker, and every
    claim held by a live member that works on it."""
    zk, paths = fleet.zk, GroupPaths.of(fleet.group)
    live = fleet.in_group()
    found: list[list[str]] = []
    by_session: dict[int, list[str]] = {}
    for name in zk.get_children(paths.clients):
        stat = zk.exists(paths.client(name))
        if stat is not None and stat.ephemeralOwner:
            by_session.setdefault(int(stat.ephemeralOwner), []).append(name)
    member_of: dict[int, str] = {}
    for session, names in by_session.items():
        if len(names) > 1:
            found.append(["members", f"session {session:#x} has {len(names)} member nodes: {sorted(names)}"])
        parsed = MemberNode.parse(names[0])
        member_of[session] = parsed.member_id if parsed else names[0]
    ids = sorted(member_of.values())
    if ids != sorted(live):
        found.append(["members", f"member nodes of {ids} != live workers in the group {sorted(live)}"])
    end = time.monotonic_ns()
    ticks = fleet.ledger.ticks_between(end - int(fleet.settings.window * 1e9), end)
    workers = window_owners(ticks, fleet.resources)
    for resource in sorted(zk.get_children(paths.owners)):
        try:
            stat = zk.exists(paths.owner(resource))
        except NoNodeError:
            continue
        if stat is None:
            continue
        holder = member_of.get(int(stat.ephemeralOwner))
        working = workers.get(resource, ("", 0))[0]
        if holder is None:
            found.append(["claims", f"claim {resource} held by session {stat.ephemeralOwner:#x}, no live member's"])
        elif working != holder:
            found.append(["claims", f"claim {resource} held by {holder}'s session, but "
                                    f"{working or 'nobody'} works on it"])
    unclaimed = sorted(fleet.resources - set(zk.get_children(paths.owners)))
    if unclaimed:
        found.append(["claims", f"resources unclaimed: {unclaimed}"])
    return found


# -- exploring -------------------------------------------------------------------------------------


@dataclass
class Recording:
    scenario: str
    requests: list[tuple[str, int, str]]  # (actor, index among its own, operation), actor by actor
    violations: list[list[str]]


class Explorer:
    """Runs points on one ZooKeeper server (each in a fresh group); ``recordings``: the scenarios'
    recordings of an earlier sitting (resumed: their request indices are kept); ``prefix``: of the run
    directories' names (a shard's own)."""

    def __init__(self, cluster: ZkCluster, workdir: Path, recordings: dict[str, Recording] | None = None,
                 prefix: str = "") -> None:
        self.cluster, self.workdir, self.prefix = cluster, workdir, prefix
        self.expire = _await_expiry(cluster)
        self._recordings: dict[str, Recording] = dict(recordings or {})
        self.resumed = set(self._recordings)
        taken = [int(m.group(1)) for d in (workdir.iterdir() if workdir.exists() else [])
                 if (m := re.match(rf"{re.escape(prefix)}(\d+)-", d.name))]
        self._runs = max(taken, default=0)  # a later sitting's runs are numbered on

    def _dir(self, label: str) -> Path:
        self._runs += 1
        path = self.workdir / f"{self.prefix}{self._runs:04d}-{label}"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def recording(self, name: str) -> Recording:
        """The scenario's recording, made once per explorer."""
        if name not in self._recordings:
            self._recordings[name] = self.record(SCENARIOS[name])
        return self._recordings[name]

    def record(self, scenario: Scenario) -> Recording:
        point = run_point(self.cluster, scenario, self._dir(f"{scenario.name}-record"),
                          lambda actor, _run: _tap(scenario, actor), Point(scenario.name, -1, ""))
        requests = [(actor, i, op) for actor in scenario.actors for i, op in enumerate(point.seen.get(actor, []))]
        return Recording(scenario.name, requests, point.violations)

    def point(self, scenario: Scenario, recording: Recording, request: int, fault: str) -> Point:
        if fault not in scenario.faults:
            raise ValueError(f"unknown fault {fault!r} for {scenario.name}: one of {scenario.faults}")
        if (request, fault) not in scenario.points(len(recording.requests)):
            raise ValueError(f"{scenario.name} has no point ({request}, {fault}) with {len(recording.requests)} "
                             "requests recorded")
        if request == len(recording.requests):  # after every request: the gate runs once the trigger is done
            point = Point(scenario.name, request, fault, "", -1, "after every request")
            gate = scenario.gate
            run_point(self.cluster, scenario, self._dir(f"{scenario.name}-{request}-{fault}"),
                      lambda name, _run: _tap(scenario, name), point, then=gate)
            return point
        actor, local, operation = recording.requests[request]

        def tap_for(name: str, run: Run) -> RequestTap:
            if name != actor:
                return _tap(scenario, name)
            gate = scenario.gate
            return _tap(scenario, name, fault=fault, index=local, expire=self.expire,
                        flap=FLAP * SETTINGS.session_timeout,
                        gate=(lambda: gate(run)) if gate is not None else None)

        point = Point(scenario.name, request, fault, actor, local, operation)
        run_point(self.cluster, scenario, self._dir(f"{scenario.name}-{request}-{fault}"), tap_for, point)
        got = point.seen.get(actor, [])
        if local < len(got) and got[local] != operation:
            point.notes.append(f"request {local} of {actor} was {got[local]} this time (recorded: {operation})")
        if not point.fired:
            point.notes.append("the request was not reached this time: no fault injected")
        return point


def _tap(scenario: Scenario, actor: str, **fault: Any) -> RequestTap:
    """An actor's tap: what the scenario counts for it, and the point's fault if it is the point's actor."""
    return RequestTap(also=scenario.also, connects=actor in scenario.connects, **fault)


def nth_request(recording: Recording, actor: str, operation: str, n: int = 1, after: int = -1) -> int:
    """The global index of ``actor``'s ``n``-th ``operation`` (1-based) after global index ``after``."""
    found = [i for i, (a, _, op) in enumerate(recording.requests) if a == actor and op == operation and i > after]
    if len(found) < n:
        raise LookupError(f"{recording.scenario}: {actor} sent fewer than {n} {operation} after #{after}: "
                          f"{recording.requests}")
    return found[n - 1]


def describe(point: Point) -> str:
    head = (f"{point.scenario} #{point.request} {point.fault}: {point.actor}[{point.local}] {point.operation}"
            f" ({point.seconds:.0f}s)")
    if not point.fired:
        head += " [not reached]"
    if not point.violations:
        return head + " ok"
    return head + "".join(f"\n    {c}: {m[:300]}" for c, m in point.violations[:6])


def plan(scenario: Scenario, requests: int, faults: list[str] | None = None, indices: list[int] | None = None,
         done: set[tuple[str, int, str]] | None = None) -> list[tuple[int, str]]:
    """The scenario's (request, fault) points for a recording of ``requests`` requests, in :func:`spread`
    order of their request index (so that a run cut short has put faults along the whole path), less
    the ``done`` ones (``(scenario, request, fault)``); only ``faults`` / ``indices`` when given."""
    points = scenario.points(requests)
    order = spread(max((i for i, _ in points), default=-1) + 1)
    rank = {index: n for n, index in enumerate(order)}
    chosen = [(i, f) for i, f in points if (faults is None or f in faults) and (indices is None or i in indices)]
    chosen.sort(key=lambda p: (rank[p[0]], scenario.faults.index(p[1])))
    return [p for p in chosen if (scenario.name, *p) not in (done or set())]


def explore(explorer: Explorer, names: list[str], faults: list[str] | None, requests: list[int] | None,
            out: Any, *, until: float | None = None, done: set[tuple[str, int, str]] | None = None,
            shard: tuple[int, int] = (0, 1)) -> list[Point]:
    """Every (request, fault) point of the scenarios, the scenarios taken in turn (one point of each,
    then the next of each...) and each one's requests in :func:`spread` order, so that a run cut short
    by ``until`` (a ``time.monotonic()`` instant after which no point is started) has explored every
    scenario about as far, along its whole path. ``done``: points already explored (resumed), skipped.
    ``shard`` ``(k, n)``: only every ``n``-th point of that order from the ``k``-th (parallel explorers on
    one recording)."""
    queues: list[list[tuple[Scenario, Recording, int, str]]] = []
    for name in names:
        scenario = SCENARIOS[name]
        recording = explorer.recording(name)
        ops = ", ".join(f"{a}[{i}] {op}" for a, i, op in recording.requests)
        print(f"== {name} ({scenario.path}): {len(recording.requests)} requests: {ops}", flush=True)
        if recording.violations:
            print(f"   the fault-free run itself: {recording.violations}", flush=True)
        if name not in explorer.resumed:
            out.write(json.dumps({"recording": asdict(recording)}) + "\n")
        if requests is not None:
            beyond = [i for i in requests if i > len(recording.requests) - (0 if scenario.after else 1)]
            if beyond:
                print(f"   {name} sent {len(recording.requests)} requests this time: skipping {beyond}", flush=True)
        queues.append([(scenario, recording, i, f) for i, f in plan(scenario, len(recording.requests), faults,
                                                                     requests)])
    mine, todo = schedule(queues, shard, done or set())
    print(f"   {len(mine)} points{' in this shard' if shard[1] > 1 else ''}, {len(mine) - len(todo)} explored "
          f"before, {len(todo)} to go", flush=True)
    points: list[Point] = []
    for scenario, recording, index, fault in todo:
        if until is not None and time.monotonic() > until:
            print("   out of time: no further point started", flush=True)
            break
        point = explorer.point(scenario, recording, index, fault)
        points.append(point)
        out.write(json.dumps(point.to_dict()) + "\n")
        out.flush()
        print(describe(point), flush=True)
    return points


def schedule(queues: list[list[Any]], shard: tuple[int, int], done: set[tuple[str, int, str]]
             ) -> tuple[list[Any], list[Any]]:
    """The points of ``queues`` (one per scenario: ``(scenario, recording, request, fault)``) in turn, this
    ``shard``'s share of them (taken from the whole order, so that shards split the same way in every
    sitting), and those of it not ``done``."""
    mine = [p for k, p in enumerate(_interleaved(queues)) if k % shard[1] == shard[0]]
    return mine, [p for p in mine if (p[0].name, p[2], p[3]) not in done]


def spread(n: int) -> list[int]:
    """``0..n-1`` in an order whose every prefix is spread over the whole range (bit-reversed
    counting: 13 -> 0 8 4 12 2 10 6 1 9 5 3 11 7), so that a run cut short has put faults along the
    whole path, its late requests as well as its early ones."""
    bits = max(1, (n - 1).bit_length())
    return sorted(range(n), key=lambda i: int(f"{i:0{bits}b}"[::-1], 2))


def _interleaved(queues: list[list[Any]]) -> list[Any]:
    """``[[a1, a2, a3], [b1]]`` -> ``[a1, b1, a2, a3]``."""
    out: list[Any] = []
    for rank in range(max((len(q) for q in queues), default=0)):
        out += [q[rank] for q in queues if rank < len(q)]
    return out


def _lines(files: list[Path]) -> Iterator[dict[str, Any]]:
    """The records of points files; a line cut short (an explorer killed while writing it) is skipped."""
    for path in files:
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict):
                yield record


def explored(files: list[Path]) -> set[tuple[str, int, str]]:
    """The (scenario, request, fault) points in earlier runs' points files."""
    return {(r["scenario"], r["request"], r["fault"]) for r in _lines(files) if "recording" not in r}


def recorded(files: list[Path]) -> dict[str, Recording]:
    """The first recording of each scenario in points files: a resumed exploration keeps the request
    indices of the sitting that began it."""
    out: dict[str, Recording] = {}
    for record in _lines(files):
        if "recording" in record:
            r = record["recording"]
            out.setdefault(r["scenario"], Recording(r["scenario"], [tuple(x) for x in r["requests"]],
                                                    r["violations"]))
    return out


PROGRESS = "points*.jsonl"  # a workdir's progress files: points.jsonl, and points.shard-K-of-N.jsonl


def progress_files(workdir: Path) -> list[Path]:
    return sorted(workdir.glob(PROGRESS))


def summary(points: list[Point]) -> dict[str, Any]:
    by_scenario: dict[str, dict[str, Any]] = {}
    for p in points:
        s = by_scenario.setdefault(p.scenario, {"points": 0, "reached": 0, "violating": 0, "categories": {},
                                                "faults": {}})
        s["points"] += 1
        f = s["faults"].setdefault(p.fault, {"points": 0, "violating": 0})
        f["points"] += 1
        f["violating"] += int(bool(p.violations))
        s["reached"] += int(p.fired)
        s["violating"] += int(bool(p.violations))
        for c in p.categories:
            s["categories"][c] = s["categories"].get(c, 0) + 1
    return by_scenario


def result_doc(recordings: dict[str, Recording], points: list[Point], seconds: float) -> dict[str, Any]:
    return {
        "generated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "seconds": round(seconds),
        "faults": list(ALL_FAULTS),
        "flap_T": FLAP,
        "scenarios": {
            name: {"path": SCENARIOS[name].path, "requests": [list(r) for r in rec.requests],
                   "recording_violations": rec.violations,
                   "product": len(SCENARIOS[name].points(len(rec.requests))),
                   "faults": list(SCENARIOS[name].faults)}
            for name, rec in recordings.items() if name in SCENARIOS
        },
        "summary": summary(points),
        "points": [_brief(p) for p in points],
    }


def _brief(point: Point) -> dict[str, Any]:
    """A point for the report: what each actor sent is left out (the recording lists the requests)."""
    record = point.to_dict()
    record["seen"] = {actor: len(ops) for actor, ops in point.seen.items()}
    record["notes"] = [n[:300] for n in point.notes]
    return record


def markdown_lines(doc: dict[str, Any]) -> list[str]:
    """The explorer's section of docs/chaos-report.md."""
    points = doc.get("points", [])
    bad = [p for p in points if p["violations"]]
    product = sum(s.get("product", len(s.get("requests", [])) * len(doc["faults"])) for s in doc["scenarios"].values())
    lines = [
        "## Every-request explorer", "",
        f"Generated {doc['generated']} by `python -m tests.chaos.explore` ({doc['seconds']} s). Each point is one "
        f"scenario run with one fault at one request (faults: {', '.join(doc['faults'])}; a flap drops every "
        f"request for {doc['flap_T']} T; a gate holds the request while the scenario's event happens). "
        f"How it works: docs/chaos.md, \"The every-request explorer\".", "",
        f"**{len(points)} points explored (of the product's {product}: every scenario's recorded requests times "
        f"its faults, and the point after the last request where a scenario has one), "
        f"{sum(p['fired'] for p in points)} reached, {len(bad)} with violations.**",
        "",
        "| scenario | path | requests | points | reached | with violations | by category |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for name, s in doc["summary"].items():
        scenario = doc["scenarios"].get(name, {})
        cats = ", ".join(f"{c} {n}" for c, n in sorted(s["categories"].items())) or "-"
        lines.append(f"| {name} | {scenario.get('path', '')} | {len(scenario.get('requests', []))} | {s['points']} | "
                     f"{s['reached']} | {s['violating']} | {cats} |")
    faults = doc["faults"]
    lines += ["", "Points explored per scenario and fault (with violations in brackets):", "",
              "| scenario | requests | explored | " + " | ".join(faults) + " |",
              "|---|---:|---|" + "---:|" * len(faults)]
    for name, s in doc["summary"].items():
        cells = []
        for fault in faults:
            f = s.get("faults", {}).get(fault, {"points": 0, "violating": 0})
            cells.append(f"{f['points']}" + (f" ({f['violating']})" if f["violating"] else ""))
        count = len(doc["scenarios"].get(name, {}).get("requests", []))
        explored = _ranges(sorted({p["request"] for p in points if p["scenario"] == name}))
        lines.append(f"| {name} | {count} | {explored} | " + " | ".join(cells) + " |")
    if bad:
        lines += ["", "Points with violations (replay: `python -m tests.chaos.explore --scenario S --request N "
                      "--fault F`):", ""]
        for p in bad[:60]:
            first = p["violations"][0]
            lines.append(f"- {p['scenario']} #{p['request']} {p['fault']} ({p['actor']}[{p['local']}] "
                         f"{p['operation']}): {', '.join(sorted({c for c, _ in p['violations']}))}; "
                         f"{first[1][:160]}")
        if len(bad) > 60:
            lines.append(f"- ... and {len(bad) - 60} more (docs/chaos-explore.json)")
    return [*lines, ""]


def _ranges(numbers: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``#0-2, #5``."""
    runs: list[list[int]] = []
    for n in numbers:
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ", ".join(f"#{a}" if a == b else f"#{a}-{b}" for a, b in runs) or "-"


def doc_from_files(files: list[Path]) -> dict[str, Any]:
    """A report document from the JSON lines of earlier runs (``points.jsonl``: a recording line per
    scenario, then a line per point); a later point of the same (scenario, request, fault) wins."""
    recordings = recorded(files)
    points: dict[tuple[str, int, str], Point] = {}
    for record in _lines(files):
        if "recording" not in record and record.get("scenario") in SCENARIOS:
            point = Point(**record)
            points[(point.scenario, point.request, point.fault)] = point
    ordered = [points[k] for k in sorted(points, key=lambda k: (list(SCENARIOS).index(k[0]), k[1],
                                                                 ALL_FAULTS.index(k[2])))]
    return result_doc(recordings, ordered, sum(p.seconds for p in ordered))


SECTION = "## Every-request explorer"


def write_report(report_dir: Path, doc: dict[str, Any]) -> Path:
    """Writes ``chaos-explore.json``, and the explorer's section of ``chaos-report.md`` (in place of the
    one there; the campaign's own sections unchanged)."""
    path = report_dir / "chaos-explore.json"
    path.write_text(json.dumps(doc, indent=None, separators=(",", ":")) + "\n")
    md = report_dir / "chaos-report.md"
    before = md.read_text() if md.exists() else "# Chaos campaign report\n"
    if SECTION in before:
        head, _, rest = before.partition(SECTION)
        following = rest.find("\n## ")
        before = head + (rest[following + 1:] if following >= 0 else "")
    md.write_text(before.rstrip("\n") + "\n\n" + "\n".join(markdown_lines(doc)))
    return path


def _interrupted(*_: Any) -> None:
    raise KeyboardInterrupt


def run_shards(args: argparse.Namespace, names: list[str], workdir: Path) -> int:
    """The scenarios recorded once (``--list``: only those the workdir has no recording of), then
    ``args.shards`` explorers in parallel on the same workdir, then the report of every point in it."""
    common = [sys.executable, "-m", "tests.chaos.explore", "--workdir", str(workdir),
              *(a for name in names for a in ("--scenario", name))]
    if subprocess.run([*common, "--list"], check=False).returncode != 0:
        return 2
    extra = [*(a for f in args.fault or [] for a in ("--fault", f)),
             *(a for r in (args.resume or []) for a in ("--resume", str(r)))]
    extra += ["--minutes", str(args.minutes)] if args.minutes else []
    extra += ["--all"] if args.all else [a for r in args.request or [] for a in ("--request", str(r))]
    children = [subprocess.Popen([*common, *extra, "--shard", f"{k + 1}/{args.shards}"])
                for k in range(args.shards)]
    try:
        codes = [child.wait() for child in children]
    except KeyboardInterrupt:
        for child in children:
            child.terminate()
        for child in children:
            child.wait()
        raise
    if args.report:
        print(f"report: {write_report(args.report_dir, doc_from_files(progress_files(workdir)))}")
    return max(codes)


def _shard(text: str) -> tuple[int, int]:
    """``K/N`` (1-based K) -> ``(K - 1, N)``."""
    k, _, n = text.partition("/")
    shard = (int(k) - 1, int(n))
    if not 0 <= shard[0] < shard[1]:
        raise argparse.ArgumentTypeError(f"a shard is K/N with 1 <= K <= N, not {text!r}")
    return shard


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.chaos.explore", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scenario", action="append", choices=sorted(SCENARIOS),
                   help="a scenario (repeatable); default with --all: every one")
    p.add_argument("--request", type=int, action="append", help="request index (repeatable)")
    p.add_argument("--fault", action="append", choices=ALL_FAULTS,
                   help="fault (repeatable); default: each scenario's own (the four, or the failover-expiry's gate)")
    p.add_argument("--all", action="store_true", help="every request of the scenarios, every fault")
    p.add_argument("--list", action="store_true", help="only record the scenarios and list their requests")
    p.add_argument("--workdir", type=Path,
                   help="its points*.jsonl are the progress: a run there goes on from where the last one "
                        "stopped, with the same recordings (default: a fresh temporary directory)")
    p.add_argument("--fresh", action="store_true", help="ignore the workdir's progress (its files are kept)")
    p.add_argument("--shard", type=_shard, default=(0, 1), metavar="K/N",
                   help="only every N-th point from the K-th (explorers in parallel on one workdir; record the "
                        "scenarios first with --list)")
    p.add_argument("--shards", type=int, default=1, metavar="N",
                   help="record the scenarios once, then run N explorers in parallel (--shard 1/N ... N/N), each "
                        "on a server of its own; with --report, the report of them all")
    p.add_argument("--out", type=Path, help="JSON lines, one per point (default: <workdir>/points.jsonl)")
    p.add_argument("--report", action="store_true",
                   help="write docs/chaos-explore.json and the explorer's section of docs/chaos-report.md, "
                        "from every point in the workdir's progress")
    p.add_argument("--report-dir", type=Path, default=REPO / "docs")
    p.add_argument("--minutes", type=float,
                   help="start no point after this many minutes (the scenarios are explored in turn, so a run "
                        "cut short covers each about as far)")
    p.add_argument("--resume", type=Path, nargs="+", metavar="POINTS_JSONL",
                   help="also skip the points in these files (from other workdirs)")
    p.add_argument("--summarise", type=Path, nargs="+", metavar="POINTS_JSONL",
                   help="no run: the report of earlier runs' points files (with --report: written to docs/)")
    args = p.parse_args(argv)
    if args.summarise:
        doc = doc_from_files(args.summarise)
        print("\n".join(markdown_lines(doc)))
        if args.report:
            print(f"report: {write_report(args.report_dir, doc)}")
        return 0
    if not (args.all or args.list or (args.scenario and args.request is not None)):
        p.error("give --scenario S --request N [--fault F], or --all, or --list")
    if shutil.which("java") is None:
        print("java is required (a real ZooKeeper server)", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _interrupted)  # end the workers and the server on the way out
    logging.getLogger("kazoo").setLevel(logging.CRITICAL)  # the failover's and the harness's clients reconnect noisily
    names = args.scenario or list(SCENARIOS)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="rebalanser-explore-"))
    workdir.mkdir(parents=True, exist_ok=True)
    if args.shards > 1:
        if args.fresh or args.out or args.list or args.shard != (0, 1):
            p.error("--shards goes with neither --fresh, --out, --list nor --shard")
        return run_shards(args, names, workdir)
    sharded = args.shard[1] > 1
    suffix = f".shard-{args.shard[0] + 1}-of-{args.shard[1]}" if sharded else ""
    progress = [] if args.fresh else progress_files(workdir)
    done = explored(progress + (args.resume or []))
    out_path = args.out or workdir / f"points{suffix}.jsonl"
    cluster = make_cluster(workdir / f"zk{suffix}", 1)
    cluster.start()
    print(f"explorer: scenarios {names}, workdir {workdir}, {len(done)} points explored before", flush=True)
    began = time.monotonic()
    points: list[Point] = []
    try:
        explorer = Explorer(cluster, workdir / "runs", recorded(progress), prefix=suffix.lstrip(".") + "-"
                            if sharded else "")
        with open(out_path, "a") as out:
            if args.list:
                for name in names:
                    recording = explorer.recording(name)
                    if name not in explorer.resumed:
                        out.write(json.dumps({"recording": asdict(recording)}) + "\n")
                    print(f"{name}: " + ", ".join(f"#{n} {a}[{i}] {op}" for n, (a, i, op)
                                                  in enumerate(recording.requests)), flush=True)
                    if recording.violations:
                        print(f"   the fault-free run itself: {recording.violations}", flush=True)
                return 0
            until = began + args.minutes * 60 if args.minutes else None
            points = explore(explorer, names, args.fault, None if args.all else args.request, out, until=until,
                             done=done, shard=args.shard)
    finally:
        cluster.stop()
    if args.report:
        doc = doc_from_files(progress_files(workdir) + (args.resume or []))
        print(f"report: {write_report(args.report_dir, doc)}")
    total = summary(points)
    print(json.dumps(total, indent=1))
    bad = sum(1 for pt in points if pt.violations)
    print(f"{len(points)} points explored in this sitting ({sum(pt.fired for pt in points)} reached), "
          f"{bad} with violations, {time.monotonic() - began:.0f} s")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
