"""Fault kinds, and one *step* of a campaign: inject faults, heal them, then check both invariants.

A step is one of the kinds in :data:`STEP_KINDS`. Most are built from composable :class:`Action`\\ s
(inject, hold, heal), so a ``compound`` step can run several of them at once on different targets; a
few are procedures of their own (rolling restart, ConnectionLoss in the middle of writes, bad stop
callbacks). Every random choice comes from the step's own ``random.Random``, seeded from the campaign
seed, the target, the phase and the step number: the same seed replays the same choices.

After the last fault healed, a step waits for recovery (every resource worked on by exactly one live
worker, balanced) and checks it happened within ``Settings.bound``; then it checks ZooKeeper for leaked
ephemeral nodes, and the whole evidence so far for overlaps and fencing-token order.
"""

from __future__ import annotations

import random
import time

from tests.chaos.checks import Episode, Ledger, describe_overlap, in_away_window
from tests.chaos.deleter import outside_deleter
from tests.chaos.fleet import ChaosWorker, Fleet
from tests.chaos.proxy import WriteTrap
from tests.chaos.step import Action, FaultRecord, StepResult, run_actions
from tests.chaos.tamper import (
    TAMPER_KINDS,
    TAMPER_PROCEDURES,
    duplicate_id,
    plan_tamper,
    reconnect_tamper,
    run_cleanups,
)

LONG = (1.3, 2.0)  # hold, in session timeouts, of faults meant to expire the session
SHORT = (0.4, 0.95)  # hold of faults meant to outlast the self-fencing lease but (mostly) not the session


def _hold(fleet: Fleet, rng: random.Random, span: tuple[float, float]) -> float:
    return fleet.settings.session_timeout * rng.uniform(*span)


def _with_resources(fleet: Fleet, workers: list[ChaosWorker]) -> list[ChaosWorker]:
    owning = [w for w in workers if fleet.owned_by(w)]
    return owning or workers


# -- composable actions ----------------------------------------------------------------------------


def kill_action(fleet: Fleet, rng: random.Random, worker: ChaosWorker, kind: str) -> Action:
    behaviour = fleet.pick_behaviour(rng)
    member_id = worker.member_id

    def inject() -> str:
        owned = len(fleet.owned_by(worker))
        worker.kill()
        return f"kill -9 pid {worker.pid} ({owned} resources)"

    def heal() -> None:
        fleet.spawn(member_id, behaviour)

    return Action(kind, member_id, inject, heal, hold=_hold(fleet, rng, (0.0, 1.2)))


def pause_action(fleet: Fleet, worker: ChaosWorker, kind: str, hold: float) -> Action:
    def inject() -> str:
        owned = len(fleet.owned_by(worker))
        worker.pause()
        return f"SIGSTOP pid {worker.pid} ({owned} resources)"

    return Action(kind, worker.member_id, inject, worker.resume, hold=hold)


def partition_action(fleet: Fleet, worker: ChaosWorker, kind: str, hold: float) -> Action:
    def inject() -> str:
        owned = len(fleet.owned_by(worker))
        worker.proxy.blackhole()
        return f"blackhole ({owned} resources)"

    return Action(kind, worker.member_id, inject, worker.proxy.restore, hold=hold)


def stall_action(fleet: Fleet, worker: ChaosWorker, kind: str, hold: float) -> Action:
    """One-way partition: the server still hears the worker (its session lives) but no reply comes
    back, so the worker's lease runs out while its session and claims live on."""

    def inject() -> str:
        owned = len(fleet.owned_by(worker))
        worker.proxy.stall_replies()
        return f"replies stalled ({owned} resources)"

    return Action(kind, worker.member_id, inject, worker.proxy.restore, hold=hold)


def cut_action(worker: ChaosWorker) -> Action:
    def inject() -> str:
        return f"reset {worker.proxy.cut()} connections"

    return Action("conn-cut", worker.member_id, inject)


def zk_kill_action(fleet: Fleet, rng: random.Random, role: str) -> Action | None:
    cluster = fleet.cluster
    if not fleet.server_fault_allowed():
        return None
    try:
        if len(cluster.servers) == 1:
            server = cluster.servers[0]
        else:
            server = cluster.leader() if role == "leader" else rng.choice(cluster.followers())
    except (LookupError, IndexError):
        return None  # the ensemble is still electing: no such role to kill right now
    kind = "zk-restart" if len(cluster.servers) == 1 else f"zk-{role}-kill"

    def inject() -> str:
        server.kill()
        return f"kill -9 ZooKeeper server {server.myid} ({role})"

    def settle() -> None:
        # The fault lasts until the server serves again (a JVM takes a while to start); waited for after
        # the step's other heals, so that it does not stretch them.
        cluster.wait_serving(timeout=90)
        fleet.last_server_fault = time.monotonic()

    return Action(kind, f"zk{server.myid}", inject, server.start, hold=_hold(fleet, rng, (0.3, 1.5)),
                  settle=settle)


def isolate_action(fleet: Fleet, rng: random.Random) -> Action | None:
    """A follower cut off from the rest of the ensemble (its peer and election links held) while its
    clients still reach it, for 1.3-2.5 T: it goes on answering them until it notices (syncLimit x
    tickTime), while the leader expires their sessions T after it last heard of them. A follower that
    serves workers is preferred (which server a worker talks to is kazoo's random choice)."""
    ensemble = fleet.partition
    if ensemble is None or not fleet.server_fault_allowed():
        return None
    try:
        followers = sorted(fleet.cluster.followers(), key=lambda s: s.myid)
    except (LookupError, OSError):
        return None
    clients = {s.myid: sorted(w.member_id for w in fleet.running() if s.address in w.proxy.upstreams())
               for s in followers}
    serving = [s for s in followers if clients[s.myid]]
    if not (serving or followers):
        return None  # the ensemble is still electing
    server = rng.choice(serving or followers)

    def inject() -> str:
        owned = sum(len(fleet.owned_by(w)) for w in fleet.running() if w.member_id in clients[server.myid])
        ensemble.isolate(server.myid)
        return f"follower {server.myid} cut from the quorum; its clients {clients[server.myid]} ({owned} resources)"

    def heal() -> None:
        ensemble.heal()

    def settle() -> None:
        fleet.cluster.wait_serving(timeout=90)  # the follower rejoins the quorum
        fleet.last_server_fault = time.monotonic()

    return Action("zk-follower-isolate", f"zk{server.myid}", inject, heal,
                  hold=_hold(fleet, rng, (1.3, 2.5)), settle=settle)


def churn(fleet: Fleet, rng: random.Random) -> list[FaultRecord]:
    """Resources added, deleted, and deleted-and-re-created while being worked on, in quick succession;
    one fault per operation."""
    records = []
    for _ in range(rng.randint(2, 6)):
        present = sorted(fleet.resources)
        absent = [r for r in fleet.pool if r not in fleet.resources]
        choice = rng.random()
        start = time.monotonic_ns()
        if choice < 0.35 and len(present) > fleet.settings.resources // 2:
            name, op = rng.choice(present), "deleted"
            fleet.delete_resource(name)
        elif choice < 0.7 and present:
            name, op = rng.choice(present), "deleted and re-created"
            fleet.delete_resource(name)
            time.sleep(rng.uniform(0, 0.05))
            fleet.add_resource(name)
        elif absent and len(present) < fleet.settings.resources * 3 // 2:
            name, op = rng.choice(absent), "added"
            fleet.add_resource(name)
        else:
            continue
        records.append(FaultRecord("resource-churn", name, start, time.monotonic_ns(), op))
        time.sleep(rng.uniform(0.0, 0.15))
    return records


def churn_action(fleet: Fleet, rng: random.Random) -> Action:
    holder: list[FaultRecord] = []

    def inject() -> str:
        holder.extend(churn(fleet, rng))
        return "; ".join(f"{r.detail} {r.target}" for r in holder)

    return Action("resource-churn", "resources", inject, extra=holder)


# -- planning ----------------------------------------------------------------------------------------


def _coordinator_or_any(fleet: Fleet, rng: random.Random) -> ChaosWorker:
    leader = fleet.coordinator()
    return leader if leader is not None else rng.choice(fleet.running())


def _follower(fleet: Fleet, rng: random.Random) -> ChaosWorker:
    followers = _with_resources(fleet, fleet.followers()) or fleet.running()
    return rng.choice(followers)


def plan(kind: str, fleet: Fleet, rng: random.Random, variant: str = "") -> list[Action]:
    """The actions of a composable step kind."""
    if kind in TAMPER_KINDS:
        return plan_tamper(kind, fleet, rng, variant)
    if kind == "kill-follower":
        return [kill_action(fleet, rng, _follower(fleet, rng), kind)]
    if kind == "kill-coordinator":
        return [kill_action(fleet, rng, _coordinator_or_any(fleet, rng), kind)]
    if kind == "pause-follower":
        return [pause_action(fleet, _follower(fleet, rng), kind, _hold(fleet, rng, LONG))]
    if kind == "pause-coordinator":
        return [pause_action(fleet, _coordinator_or_any(fleet, rng), kind, _hold(fleet, rng, LONG))]
    if kind == "pause-short":
        return [pause_action(fleet, rng.choice(fleet.running()), kind, _hold(fleet, rng, SHORT))]
    if kind == "partition-follower":
        return [partition_action(fleet, _follower(fleet, rng), kind, _hold(fleet, rng, LONG))]
    if kind == "partition-coordinator":
        return [partition_action(fleet, _coordinator_or_any(fleet, rng), kind, _hold(fleet, rng, LONG))]
    if kind == "partition-short":
        return [partition_action(fleet, rng.choice(fleet.running()), kind, _hold(fleet, rng, SHORT))]
    if kind == "partition-oneway":
        return [stall_action(fleet, rng.choice(fleet.running()), kind, _hold(fleet, rng, (0.5, 2.0)))]
    if kind == "conn-cut":
        victims = rng.sample(fleet.running(), rng.randint(1, len(fleet.running())))
        return [cut_action(w) for w in victims]
    if kind == "expiry-storm":
        return storm(fleet, rng)
    if kind in ("zk-restart", "zk-leader-kill", "zk-follower-kill"):
        action = zk_kill_action(fleet, rng, "follower" if kind == "zk-follower-kill" else "leader")
        return [action] if action is not None else []
    if kind == "zk-follower-isolate":
        isolated = isolate_action(fleet, rng)
        return [isolated] if isolated is not None else []
    if kind == "resource-churn":
        return [churn_action(fleet, rng)]
    if kind == "compound":
        return compound(fleet, rng)
    raise ValueError(f"not a composable step kind: {kind}")


def storm(fleet: Fleet, rng: random.Random) -> list[Action]:
    """Several workers paused or partitioned at once beyond the session timeout: forced expiries."""
    workers = fleet.running()
    victims = rng.sample(workers, rng.randint(2, len(workers)))
    hold = _hold(fleet, rng, LONG)
    actions = []
    for worker in victims:
        jitter = rng.uniform(-0.2, 0.2)
        if rng.random() < 0.5:
            action = pause_action(fleet, worker, "expiry-storm", hold + jitter)
        else:
            action = partition_action(fleet, worker, "expiry-storm", hold + jitter)
        action.offset = rng.uniform(0, 0.2)
        actions.append(action)
    return actions


# Faults that keep a live member from hearing ZooKeeper for a while, and tampering that deletes live
# members' claims from outside. The claim model has only the holder's session end a claim: a member that
# cannot hear ZooKeeper when its claims are deleted works on until it hears of it or its lease ends,
# possibly alongside a new owner with a larger token (docs/protocol.md, "Eviction"). A compound step does
# not combine the two; the reconnect-tamper kind covers a deletion after a member's reconnection.
CUT_OFF = ("pause", "partition", "oneway", "cut")
CLAIMS_DELETED = ("tamper-group",)
# Tampering that deletes the resource list and puts back the one it read: with another such change in
# the same step (a second tampering, or resource churn) the harness's own record of the resources
# is no longer what ZooKeeper holds, and it judges workers against the wrong list. One per step.
RESOURCES_REWRITTEN = ("tamper-group", "tamper-resources")


def compound(fleet: Fleet, rng: random.Random) -> list[Action]:
    """Two or three different faults, overlapping in time, on different targets."""
    workers = fleet.running()
    rng.shuffle(workers)
    leader = fleet.coordinator()
    actions: list[Action] = []
    zk_used = churned = cut_off = group_deleted = tampered = resources_rewritten = resources_churned = False
    kazoo = fleet.settings.kazoo
    for _ in range(rng.randint(2, 3)):
        choice = rng.choice(["kill", "pause", "partition", "oneway", "cut", "churn", "zk"]
                            + ([] if kazoo else ["tamper"]))
        if (choice in ("churn", "tamper") and zk_used) or (choice == "zk" and churned):
            choice = "cut"  # no administrator changes the group while the server is down
        if choice in CUT_OFF and group_deleted:
            choice = "kill"  # see CLAIMS_DELETED
        if (choice == "tamper" and tampered) or (choice == "churn" and resources_rewritten):
            choice = "kill"  # see RESOURCES_REWRITTEN
        if choice == "tamper":
            churned = tampered = True  # the tampering is followed by a change of resources
            kind = rng.choice(TAMPER_KINDS)
            if kind in CLAIMS_DELETED and cut_off:
                kind = rng.choice([k for k in TAMPER_KINDS if k not in CLAIMS_DELETED])
            if kind in RESOURCES_REWRITTEN and resources_churned:
                kind = rng.choice([k for k in TAMPER_KINDS if k not in RESOURCES_REWRITTEN])
            resources_rewritten = resources_rewritten or kind in RESOURCES_REWRITTEN
            group_deleted = group_deleted or kind in CLAIMS_DELETED
            actions += plan_tamper(kind, fleet, rng)
            continue
        cut_off = cut_off or choice in CUT_OFF
        if choice == "zk" and not zk_used:
            zk_used = True
            how = rng.choice(["leader", "follower"] + (["isolate"] if fleet.partition is not None else []))
            action = isolate_action(fleet, rng) if how == "isolate" else zk_kill_action(fleet, rng, how)
            if action is not None:
                actions.append(action)
            continue
        if choice == "churn":
            churned = resources_churned = True
            actions.append(churn_action(fleet, rng))
            continue
        if not workers:
            continue
        worker = workers.pop()
        role = "coordinator" if worker is leader else "follower"
        if choice == "kill":
            actions.append(kill_action(fleet, rng, worker, f"kill-{role}"))
        elif choice == "pause":
            actions.append(pause_action(fleet, worker, f"pause-{role}", _hold(fleet, rng, LONG)))
        elif choice == "partition":
            actions.append(partition_action(fleet, worker, f"partition-{role}", _hold(fleet, rng, LONG)))
        elif choice == "oneway":
            actions.append(stall_action(fleet, worker, "partition-oneway", _hold(fleet, rng, (0.5, 2.0))))
        else:
            actions.append(cut_action(worker))
    for action in actions:
        action.offset = rng.uniform(0, 1.5)
    return actions


# -- procedures ------------------------------------------------------------------------------------


def rolling_restart(fleet: Fleet, rng: random.Random, result: StepResult) -> list[FaultRecord]:
    """Every member in turn: SIGTERM (graceful leave), restart, wait until it has joined again."""
    records = []
    order = sorted(fleet.workers)
    rng.shuffle(order)
    for member_id in order:
        worker = fleet.workers[member_id]
        start = time.monotonic_ns()
        code = worker.terminate(timeout=fleet.settings.bound + 10)
        if code != 0:
            result.notes.append(f"{member_id} exited with {code} on SIGTERM")
        if code is None:
            result.violations.append(("shutdown", f"{member_id} did not exit within the bound after SIGTERM "
                                                  f"(stacks in {worker.err_log})"))
        new = fleet.spawn(member_id, fleet.pick_behaviour(rng))
        records.append(FaultRecord("rolling-restart", member_id, start, time.monotonic_ns(), f"exit {code}"))
        _wait_joined(fleet, new, fleet.settings.bound)
    return records


def _wait_joined(fleet: Fleet, worker: ChaosWorker, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(e.get("_pid") == worker.pid for e in fleet.ledger.events_of({"role"})):
            return True
        time.sleep(0.05)
    return False


def connloss_mid_write(fleet: Fleet, rng: random.Random, result: StepResult) -> list[FaultRecord]:
    """Arms a write trap on some workers, then changes resources so that the coordinator writes
    assignments and followers claim and release: some of those writes die with their connection."""
    victims = rng.sample(fleet.running(), rng.randint(1, len(fleet.running())))
    traps: dict[str, WriteTrap] = {w.member_id: w.proxy.arm_write_trap(deliver=rng.random() < 0.6,
                                                                       hold=rng.uniform(0.0, 0.05))
                                   for w in victims}
    armed = time.monotonic_ns()
    records = churn(fleet, rng)
    deadline = time.monotonic() + fleet.settings.interval + fleet.settings.stop_bound + 3
    while time.monotonic() < deadline and not all(t.fired.is_set() for t in traps.values()):
        time.sleep(0.05)
    for worker in victims:
        worker.proxy.disarm()
    for member_id, trap in sorted(traps.items()):
        if trap.fired.is_set():
            how = "applied, reply lost" if trap.deliver else "request lost"
            records.append(FaultRecord("connloss-mid-write", member_id, trap.at_ns, trap.at_ns,
                                       f"{trap.operation}: {how}"))
    unfired = [m for m, t in traps.items() if not t.fired.is_set()]
    if unfired:
        result.notes.append(f"write traps armed at {armed} never fired on {unfired}")
    return records


def stop_callback_fault(fleet: Fleet, rng: random.Random, result: StepResult, behaviour: str) -> list[FaultRecord]:
    """A slow, failing or hanging stop callback runs: its worker loses resources by a graceful restart
    or by the deletion (and later re-creation) of one of its resources."""
    candidates = [w for w in fleet.running() if w.behaviour == behaviour and fleet.owned_by(w)]
    if not candidates:
        # Give a follower that behaviour (a graceful restart), and wait until it owns something.
        worker = rng.choice(fleet.followers() or fleet.running())
        worker.terminate(timeout=fleet.settings.bound + 10)
        worker = fleet.spawn(worker.member_id, behaviour)
        result.notes.append(f"restarted {worker.member_id} with a {behaviour} stop callback")
        deadline = time.monotonic() + 3 * fleet.settings.bound
        while time.monotonic() < deadline and not fleet.owned_by(worker):
            time.sleep(0.1)
        candidates = [worker] if fleet.owned_by(worker) else []
        if not candidates:
            result.notes.append(f"{worker.member_id} owned nothing in time; no stop-{behaviour} fault")
            return []
    worker = rng.choice(candidates)
    owned = sorted(fleet.owned_by(worker))  # read once: the observation window moves on
    start = time.monotonic_ns()
    if rng.random() < 0.5 or not owned:
        code = worker.terminate(timeout=fleet.settings.bound + 10)
        if code is None:
            result.violations.append(("shutdown", f"{worker.member_id} did not exit after SIGTERM "
                                                  f"(stacks in {worker.err_log})"))
        fleet.spawn(worker.member_id, behaviour)
        detail = f"graceful restart (exit {code})"
    else:
        name = rng.choice(owned)
        fleet.delete_resource(name)
        time.sleep(rng.uniform(0.2, 1.5))  # the resource stays deleted for a while
        fleet.add_resource(name)
        detail = f"deleted and re-created {name}"
    return [FaultRecord(f"stop-{behaviour}", worker.member_id, start, time.monotonic_ns(), detail)]


# -- one step ----------------------------------------------------------------------------------------

COMPOSABLE = (
    "kill-follower", "kill-coordinator", "pause-follower", "pause-coordinator", "pause-short",
    "partition-follower", "partition-coordinator", "partition-short", "partition-oneway", "conn-cut",
    "expiry-storm",
    "zk-restart", "zk-leader-kill", "zk-follower-kill", "zk-follower-isolate", "resource-churn", "compound",
)
PROCEDURES = ("rolling-restart", "connloss-mid-write", "stop-slow", "stop-fail", "stop-hang", "outside-deleter")
STEP_KINDS = COMPOSABLE + PROCEDURES + TAMPER_KINDS + TAMPER_PROCEDURES
# The fault classes added to find what an administrator's hands, reconnects and duplicate ids do.
NEW_CLASSES = frozenset((*TAMPER_KINDS, *TAMPER_PROCEDURES, "zk-follower-isolate", "outside-deleter"))


def base_kind(kind: str) -> tuple[str, str]:
    """``kind@variant`` (e.g. ``tamper-garbage@barrier:1e999``) -> (kind, variant)."""
    name, _, variant = kind.partition("@")
    return name, variant


def applicable(kind: str, fleet: Fleet) -> bool:
    ensemble = len(fleet.cluster.servers) > 1
    if kind == "zk-restart":
        return not ensemble and fleet.server_fault_allowed()
    if kind in ("zk-leader-kill", "zk-follower-kill"):
        return ensemble and fleet.server_fault_allowed()
    if kind == "zk-follower-isolate":
        return fleet.partition is not None and fleet.server_fault_allowed()
    if kind.startswith("stop-"):
        return not fleet.settings.kazoo  # the kazoo adapter has no stop-callback simulation
    if base_kind(kind)[0] in NEW_CLASSES:
        return not fleet.settings.kazoo  # they target Rebalanser's layout and its CLI's exit codes
    return True


def run_step(fleet: Fleet, kind: str, index: int, phase: str, seed: str) -> StepResult:
    """One step of ``kind`` (``kind@variant`` picks a variant of a tamper kind; see tests.chaos.tamper)."""
    rng = random.Random(seed)
    kind, variant = base_kind(kind)
    result = StepResult(index, phase, kind, seed)
    if variant:
        result.notes.append(f"variant {variant}")
    began = time.monotonic()
    if kind == "rolling-restart":
        records = rolling_restart(fleet, rng, result)
    elif kind == "connloss-mid-write":
        records = connloss_mid_write(fleet, rng, result)
    elif kind in ("stop-slow", "stop-fail", "stop-hang"):
        records = stop_callback_fault(fleet, rng, result, kind.removeprefix("stop-"))
    elif kind == "reconnect-tamper":
        records = reconnect_tamper(fleet, rng, result, variant)
    elif kind == "duplicate-id":
        records = duplicate_id(fleet, rng, result)
    elif kind == "outside-deleter":
        records = outside_deleter(fleet, rng, result, variant)
    else:
        actions = plan(kind, fleet, rng, variant)
        result.verifiers += [a.verify for a in actions if a.verify is not None]
        result.cleanups += [a.cleanup for a in actions if a.cleanup is not None]
        records = run_actions(actions)
    result.faults = records
    now = time.monotonic_ns()
    result.first_fault_ns = min((r.start_ns for r in records), default=now)
    result.heal_ns = max((r.heal_ns for r in records), default=now)
    check_after(fleet, result)
    undo(fleet, result)
    result.duration = time.monotonic() - began
    return result


def undo(fleet: Fleet, result: StepResult) -> None:
    """After the checks: undoes what the step's tampering left behind, then (if the step had
    recovered) waits until the group is settled again, so that the next step starts clean."""
    if not result.cleanups:
        return
    notes = run_cleanups(result.cleanups)
    result.notes += notes
    if notes and result.recovered:
        again = fleet.wait_recovered(time.monotonic_ns(), cap=fleet.settings.bound + 20)
        if not again.ok:
            result.violations.append(("liveness", "not settled again after the harness undid the tampering: "
                                                  + "; ".join(again.problems[:8])))
            result.recovered = False


def check_after(fleet: Fleet, result: StepResult) -> None:
    """Recovery within the bound, no leaks, and no overlap or token regression anywhere so far."""
    settings = fleet.settings
    recovery = fleet.wait_recovered(result.heal_ns, cap=settings.bound + 20)
    crashed = respawn_crashed(fleet, result)
    if crashed:
        # A crash is its own violation; the bound is not measured across it, but recovery must follow.
        recovery = fleet.wait_recovered(time.monotonic_ns(), cap=settings.bound + 20)
    result.recovered = recovery.ok
    if recovery.ok and not crashed:
        result.ttr_fault = max(0.0, (recovery.recovered_ns - result.first_fault_ns) / 1e9)
        result.ttr_heal = max(0.0, (recovery.recovered_ns - result.heal_ns) / 1e9)
        result.stall = fleet.stalls.between(result.first_fault_ns, recovery.recovered_ns)
        result.late_start = fleet.late_start(result.first_fault_ns, recovery.recovered_ns)
        result.over_strict_bound = result.ttr_heal > settings.bound
        if result.ttr_heal > settings.bound + result.stall + result.late_start:
            result.violations.append(("liveness", f"recovered {result.ttr_heal:.2f}s after the last heal, "
                                                  f"beyond the bound of {settings.bound:.1f}s "
                                                  f"(+{result.stall:.1f}s measured host stall, "
                                                  f"+{result.late_start:.1f}s late process start)"))
        elif result.over_strict_bound and result.late_start > 0:
            result.notes.append(f"recovered {result.ttr_heal:.2f}s after the last heal: a process started in "
                                f"the step took {result.late_start:.1f}s longer than {fleet.STARTUP:.0f}s to start")
    elif not recovery.ok:
        result.stall = fleet.stalls.between(result.first_fault_ns, time.monotonic_ns())
        logs = ", ".join(str(w.err_log) for w in fleet.running())
        result.violations.append(("liveness", f"not recovered {recovery.waited:.1f}s after the last heal "
                                              f"({result.stall:.1f}s measured host stall): "
                                              + "; ".join(recovery.problems[:8]) + f" (stacks dumped in {logs})"))
        fleet.dump_stacks()
    if recovery.ok:
        leaks = fleet.leak_problems(timeout=settings.session_timeout + 3)
        result.violations += [("leak", p) for p in leaks]
    for verify in result.verifiers:
        result.violations += verify()
    time.sleep(0.3)  # let the last events of the step arrive through the pipes before the safety checks
    result.violations += overlap_violations(fleet, result)
    if not settings.kazoo:  # kazoo has no fencing token (always 0): nothing to check
        result.violations += [("token", p) for p in fleet.ledger.token_regressions()]


def overlap_violations(fleet: Fleet, result: StepResult) -> list[tuple[str, str]]:
    """Two workers on one resource at once, but for the window of a live member's session closed by the
    failover (:func:`closed_by_mistake`), which goes into the step's notes instead."""
    found = []
    lease_ns = int(fleet.settings.session_timeout * 1e9)
    for resource, earlier, later in fleet.ledger.overlapping():
        text = describe_overlap(resource, earlier, later)
        if closed_by_mistake(result.faults, fleet.ledger, resource, earlier, later, lease_ns):
            result.notes.append(f"{text}: allowed, its owner's session was closed by the failover while it "
                                "lived, and it stopped before it learned of the expiry")
        else:
            found.append(("overlap", text))
    return found


def closed_by_mistake(faults: list[FaultRecord], ledger: Ledger, resource: str, earlier: Episode,
                      later: Episode, lease_ns: int) -> bool:
    """The window of ``outside-deleter@failover``: the operator's failover closing the session of a member
    that lives (it acts on the kubelet's word that the member is dead; this fault has it act without).
    The close ends the session and drops the member's connection at once, so from that instant its
    claims are gone and it is away, and it learns of the expiry when it reconnects (docs/protocol.md,
    "If the identity check were wrong anyway"). Allowed as :func:`~tests.chaos.checks.in_away_window`
    allows an owner away while its claims are deleted: ``earlier`` was under way at the close, ``later``
    began after it with a larger token, and ``earlier``'s last unit of work came before its member
    reported the expiry and within T of the close."""
    for record in faults:
        if record.kind != "outside-deleter" or record.target != earlier.worker or "session closed" not in record.detail:
            continue
        if not earlier.first <= record.start_ns <= earlier.last:
            continue
        learned = [e["ts"] for e in ledger.events_of({"session"})
                   if e.get("_pid") == earlier.pid and e.get("state") == "expired" and e["ts"] >= record.start_ns]
        marks = {"away_ns": record.start_ns, "reconnected_ns": min(learned)} if learned else {}
        if in_away_window([(resource, earlier.token, record.start_ns)], marks, resource, earlier, later, lease_ns):
            return True
    return False


def respawn_crashed(fleet: Fleet, result: StepResult) -> list[str]:
    """Workers that died without being stopped are violations; they are restarted to go on."""
    crashed = []
    for worker in fleet.crashed():
        code = worker.proc.returncode if worker.proc is not None else None
        log = worker.err_log
        result.violations.append(("crash", f"{worker.member_id} (pid {worker.pid}) exited with {code} "
                                           f"without being stopped; stderr in {log}"))
        fleet.spawn(worker.member_id, worker.behaviour)
        crashed.append(worker.member_id)
    return crashed
