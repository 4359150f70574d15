"""Fault kinds of an administrator's (or a careless deployment's) making.

- ``tamper-group``, ``tamper-resources``, ``tamper-epoch``: ``G``, ``G/resources`` or ``G/epoch``
  deleted (in one transaction, see :mod:`tests.chaos.admin`) and re-created after a while, or (epoch)
  deleted for good or overwritten.
- ``tamper-garbage``: garbage (:func:`tests.chaos.garbage.garbage`) in a znode the library reads:
  ``G/barrier``, ``G/config``, ``G/state``, an assignment, a member node, a claim, or a junk
  generation directory under ``G/stopped``.
- ``tamper-stale``: a well-formed but stale record there (:func:`tests.chaos.garbage.stale`); for
  ``G/config``, a valid switch to the other algorithm, undone after a while.
- ``fake-member``: a *persistent* node under ``G/clients`` that sorts before every member (sometimes
  named after a live member's id).
- ``fake-claim``: a *persistent* ``G/owners/<r>`` in the way of a resource that is being added.
- ``reconnect-tamper``: a brief cut that keeps the sessions, then one of the administrator's actions
  (a member's watches must survive the reconnect for it to notice).
- ``duplicate-id``: a second worker process started with a live member's ``--id``.

What the library must do, and what the harness checks (besides overlaps, token order, recovery
within the bound and leaks, as for every step):

- *Recovered* after a group or resource list is deleted and re-created means, as after any fault:
  within the bound after the re-creation, every resource is worked on by exactly one live worker,
  balanced, and ZooKeeper holds exactly one member node per live worker and one claim per resource,
  each held by a live member's session.
- Garbage and stale records never stop a member or the group. Data tampering is followed at once by a
  change of resources (the *probe*), so that the coordinator has to act with the bad value in place,
  and the group must recover within the bound with it still there. Garbage in ``G/barrier``,
  ``G/config`` or an assignment is read at once by a member, which must report it: an ``error``
  event naming the znode (category ``unreported`` otherwise). Stale records are well-formed, so
  nothing has to report them; they must simply not take effect.
- Garbage in ``G/state`` or ``G/stopped`` is read only by a coordinator taking office, so the
  administrator also overwrites ``G/epoch`` (any write bumps its version and deposes the coordinator).
- A fake member is ignored while it is there (it is not the harness's to expect a member to delete
  it); the harness deletes it after the step's checks. A fake claim must be repaired by the library
  (deleted, and the resource claimed) within the bound; if it is still there after the checks, that
  has already shown as a violation and the harness deletes it.
- A duplicate id: the second process must exit with code 2 (a usage error) within 2 T + 5 s (it may
  first wait for an earlier incarnation's session to expire) plus the bound, and never work; the first
  one goes on undisturbed. Category ``duplicate`` otherwise.
- After the checks, the harness undoes what a step left behind (stale data it wrote is put back only if
  nobody has written that znode since), then waits for the group to be settled again before the next
  step.
"""

from __future__ import annotations

import json
import random
import subprocess
import time
from collections.abc import Callable

from rebalanser.paths import GroupPaths

from tests.chaos import garbage as bad
from tests.chaos.checks import error_reports
from tests.chaos.fleet import ChaosWorker, Fleet
from tests.chaos.step import Action, FaultRecord, StepResult, Verdicts, run_actions

TAMPER_KINDS = ("tamper-group", "tamper-resources", "tamper-epoch", "tamper-garbage", "tamper-stale",
                "fake-member", "fake-claim")
TAMPER_PROCEDURES = ("reconnect-tamper", "duplicate-id")
REPORTED = ("barrier", "config", "assignment")  # garbage a member reads at once and must report
REPORT_WAIT = 2.0  # seconds the administrator waits for a report before the probe (early exit)
GARBAGE_TARGETS = {"barrier": 3, "assignment": 3, "config": 2, "state": 2, "stopped": 2, "member": 1, "claim": 1}
STALE_TARGETS = {"barrier": 3, "assignment": 3, "config": 2, "state": 1, "member": 1, "claim": 1}
AFTER_RECONNECT = {"group": 3, "resources": 2, "epoch": 2, "barrier": 1, "fake-member": 1}
STOPPED_JUNK = ("g" + "9" * 5000, "g1e999", "g-1", "g", "g" + str(2**64 + 1), "gxyz", "g000000000000")


def _paths(fleet: Fleet) -> GroupPaths:
    return GroupPaths.of(fleet.group)


def _pick(rng: random.Random, weights: dict[str, int]) -> str:
    names = sorted(weights)
    return rng.choices(names, weights=[weights[n] for n in names])[0]


def _rel(fleet: Fleet, path: str) -> str:
    return "G" + path.removeprefix(fleet.group) if path.startswith(fleet.group) else path


def probe(fleet: Fleet, rng: random.Random) -> str:
    """An administrator's change of resources right after the tampering: the coordinator must act with
    the tampered state in place (one resource added, sometimes one deleted)."""
    changes = []
    present = sorted(fleet.resources)
    absent = [r for r in fleet.pool if r not in fleet.resources]
    if absent and len(present) < fleet.settings.resources * 3 // 2:
        name = rng.choice(absent)
        fleet.add_resource(name)
        changes.append(f"+{name}")
    if present and (not changes or rng.random() < 0.4) and len(present) > fleet.settings.resources // 2:
        name = rng.choice(present)
        fleet.delete_resource(name)
        changes.append(f"-{name}")
    return "probe " + (" ".join(changes) or "skipped")


def bump_epoch(fleet: Fleet) -> str:
    """Any write to ``G/epoch`` bumps its version: the coordinator's next fenced write fails, it steps
    down and a coordinator takes office again (reading ``G/state`` and ``G/stopped`` on the way)."""
    if fleet.admin.set(_paths(fleet).epoch, b"set by an administrator") is None:
        return "G/epoch missing, not bumped"
    return "G/epoch overwritten (version bumped)"


def remember(fleet: Fleet, kind: str, data: bytes | None) -> None:
    """Keeps values really written to a znode of ``kind``, for stale records later."""
    if not data:
        return
    values = fleet.seen.setdefault(kind, [])
    if data not in values:
        values.append(data)
        del values[:-20]


def live_member_nodes(fleet: Fleet) -> list[str]:
    """Member znodes held by a session (the real members, not planted fakes)."""
    paths = _paths(fleet)
    nodes = []
    for name in fleet.admin.children(paths.clients):
        stat = fleet.admin.exists(paths.client(name))
        if stat is not None and stat.ephemeralOwner and paths.client(name) not in fleet.planted:
            nodes.append(name)
    return sorted(nodes)


def _snapshot(fleet: Fleet) -> None:
    paths = _paths(fleet)
    for kind, path in (("barrier", paths.barrier), ("state", paths.state)):
        got = fleet.admin.get(path)
        remember(fleet, kind, got[0] if got else None)
    for node in fleet.admin.children(paths.assignment):
        got = fleet.admin.get(paths.member_assignment(node))
        remember(fleet, "assignment", got[0] if got else None)


def _target_path(fleet: Fleet, rng: random.Random, target: str) -> str | None:
    paths = _paths(fleet)
    if target in ("barrier", "state", "config"):
        return str(getattr(paths, target))
    members = live_member_nodes(fleet)
    if target == "member":
        return paths.client(rng.choice(members)) if members else None
    if target == "assignment":
        nodes = [n for n in fleet.admin.children(paths.assignment) if n in members]
        return paths.member_assignment(rng.choice(nodes)) if nodes else None
    if target == "claim":
        held = []
        for name in sorted(fleet.admin.children(paths.owners)):
            stat = fleet.admin.exists(paths.owner(name))
            if stat is not None and stat.ephemeralOwner:
                held.append(name)
        return paths.owner(rng.choice(held)) if held else None
    raise ValueError(f"unknown target {target!r}")


# -- data: garbage and stale records ---------------------------------------------------------------


def data_action(fleet: Fleet, rng: random.Random, kind: str, variant: str = "") -> Action | None:
    """Garbage (``tamper-garbage``) or a stale record (``tamper-stale``) in one znode the library reads.
    ``variant``: ``target`` or ``target:recipe`` (e.g. ``barrier:1e999``); random when empty."""
    target, _, recipe = variant.partition(":")
    target = target or _pick(rng, GARBAGE_TARGETS if kind == "tamper-garbage" else STALE_TARGETS)
    if target == "stopped":
        return stopped_action(fleet, rng, recipe)
    if kind == "tamper-stale" and target == "config":
        return config_switch_action(fleet, rng)
    path = _target_path(fleet, rng, target)
    if path is None:
        return None
    state: dict[str, object] = {}

    def inject() -> str:
        _snapshot(fleet)
        before = fleet.admin.get(path)
        original = before[0] if before else None
        if kind == "tamper-garbage":
            how = recipe or rng.choice(bad.RECIPES)
            value = bad.garbage(target, how, rng)
        else:
            value, how = bad.stale(target, original, fleet.seen.get(target, []), rng, sorted(fleet.live()), recipe)
        written = time.monotonic_ns()
        stat = fleet.admin.write(path, value)
        state.update(original=original, existed=before is not None, version=stat.version, written=written, how=how)
        if target == "claim":
            fleet.renamed_claims[path] = int(stat.czxid)
        parts = [f"{_rel(fleet, path)}: {how} ({len(value)} bytes)"]
        if _must_report(kind, target, how):
            deadline = time.monotonic() + REPORT_WAIT
            while time.monotonic() < deadline and not _reported(fleet, path, written):
                time.sleep(0.05)
            got = fleet.admin.get(path)
            state["still_there"] = got is not None and got[1].version == stat.version
        else:
            time.sleep(rng.uniform(0.1, 0.4))  # the administrator's next action comes a moment later
        if target == "state":
            parts.append(bump_epoch(fleet))
        parts.append(probe(fleet, rng))
        return "; ".join(parts)

    def verify() -> Verdicts:
        if not _must_report(kind, target, str(state.get("how", ""))) or "written" not in state:
            return []
        if _reported(fleet, path, int(str(state["written"]))) or not state.get("still_there"):
            return []
        return [("unreported", f"garbage in {_rel(fleet, path)} ({state['how']}) was read by no worker that "
                               f"reported it (no error event naming {path})")]

    def cleanup() -> str | None:
        if "version" not in state:
            return None
        fleet.renamed_claims.pop(path, None)
        original, version = state["original"], int(str(state["version"]))
        if state["existed"] and isinstance(original, bytes):
            put_back = fleet.admin.set(path, original, version=version) is not None
        else:
            put_back = fleet.admin.delete(path, version=version)
        return f"{_rel(fleet, path)} put back as it was" if put_back else None

    return Action(kind, target, inject, verify=verify, cleanup=cleanup)


def _must_report(kind: str, target: str, recipe: str) -> bool:
    """Garbage a member reads at once must be reported; empty data is not garbage there (the coordinator
    creates an assignment node empty before it writes it, and no config or barrier means empty data)."""
    return kind == "tamper-garbage" and target in REPORTED and recipe != "empty"


def _reported(fleet: Fleet, path: str, since_ns: int) -> bool:
    return bool(error_reports(fleet.ledger.events_of({"error"}), path, since_ns))


def stopped_action(fleet: Fleet, rng: random.Random, recipe: str = "") -> Action:
    """A junk generation directory under ``G/stopped`` (a name that is not ``g`` + 12 digits, or a
    number beyond any generation), read by the next coordinator taking office."""
    paths = _paths(fleet)
    name = recipe if recipe.startswith("g") else rng.choice(STOPPED_JUNK)
    path = f"{paths.stopped}/{name}"
    planted: list[str] = []

    def inject() -> str:
        if fleet.admin.create(path, b"", makepath=True):
            planted.append(path)
            members = live_member_nodes(fleet)
            if members and rng.random() < 0.5:  # a persistent stop marker named after a live member
                marker = f"{path}/{rng.choice(members)}"
                if fleet.admin.create(marker):
                    planted.append(marker)
        fleet.planted.update(planted)
        shown = name if len(name) < 40 else f"{name[:12]}...({len(name)} characters)"
        time.sleep(rng.uniform(0.1, 0.4))
        return f"G/stopped/{shown} planted ({len(planted)} znodes); {bump_epoch(fleet)}; {probe(fleet, rng)}"

    def cleanup() -> str | None:
        fleet.planted.difference_update(planted)
        if planted:
            fleet.admin.delete_tree(path)
        return None

    return Action("tamper-garbage", "stopped", inject, cleanup=cleanup)


def config_switch_action(fleet: Fleet, rng: random.Random) -> Action:
    """A valid ``G/config`` switching the group to the other algorithm (for a Global Barrier group, in
    the middle of the barrier a probe starts), removed again after 1-2.5 T."""
    paths = _paths(fleet)
    other = "ResourceBarrier" if fleet.settings.target == "global-barrier" else "GlobalBarrier"
    state: dict[str, object] = {}

    def inject() -> str:
        before = fleet.admin.get(paths.config)
        state["original"] = before[0] if before else None
        parts = []
        if fleet.settings.target == "global-barrier":
            parts.append(probe(fleet, rng))  # a barrier starts ...
            time.sleep(rng.uniform(0.0, 0.3))  # ... and the algorithm changes under it
        fleet.admin.write(paths.config, bad.config_switch(other, fleet.settings.interval))
        parts.insert(0, f"G/config switched to {other}")
        if fleet.settings.target != "global-barrier":
            time.sleep(rng.uniform(0.1, 0.4))
            parts.append(probe(fleet, rng))
        return "; ".join(parts)

    def heal() -> str:
        original = state.get("original")
        if isinstance(original, bytes):
            fleet.admin.write(paths.config, original)
        else:
            fleet.admin.delete(paths.config)
        return "G/config as before"

    hold = fleet.settings.session_timeout * rng.uniform(1.0, 2.5)
    return Action("tamper-stale", "config", inject, heal, hold=hold)


# -- structure: the group, its resource list, its epoch --------------------------------------------


def group_action(fleet: Fleet, rng: random.Random) -> Action:
    """The whole group deleted in one transaction, re-created (with its resources and config) after
    0-1 T; a probe follows."""
    paths = _paths(fleet)
    hold = fleet.settings.session_timeout * rng.uniform(0.0, 1.0)
    saved: list[str] = []
    config: list[bytes] = []

    def inject() -> str:
        saved[:] = sorted(fleet.resources)
        got = fleet.admin.get(paths.config)
        config[:] = [got[0]] if got else []
        count = fleet.admin.delete_tree(paths.root)
        fleet.resources = set()
        return f"deleted G ({count} znodes, one transaction)"

    def heal() -> str:
        reappeared = fleet.admin.exists(paths.root) is not None
        nodes = [(paths.root, b""), (paths.resources, b""), *[(paths.resource(r), b"") for r in saved]]
        nodes += [(paths.config, data) for data in config]
        fleet.admin.ensure(nodes)
        fleet.resources = set(saved)
        note = "; a worker had re-created G meanwhile" if reappeared else ""
        time.sleep(rng.uniform(0.1, 0.4))
        return f"re-created G with {len(saved)} resources after {hold:.2f}s{note}; {probe(fleet, rng)}"

    return Action("tamper-group", "G", inject, heal, hold=hold)


def resources_action(fleet: Fleet, rng: random.Random) -> Action:
    """``G/resources`` deleted with every resource in one transaction, re-created after 0-1 T with the
    same resources, sometimes one more or one fewer; a probe follows (the same resources alone would
    not show whether the coordinator still watches the list)."""
    paths = _paths(fleet)
    hold = fleet.settings.session_timeout * rng.uniform(0.0, 1.0)
    state: dict[str, list[str]] = {}

    def inject() -> str:
        resources = sorted(fleet.resources)
        count = fleet.admin.delete_tree(paths.resources)
        fleet.resources = set()
        absent = [r for r in fleet.pool if r not in resources]
        change = rng.random()
        if change < 0.2 and absent:
            resources.append(rng.choice(absent))
        elif change < 0.4 and len(resources) > fleet.settings.resources // 2:
            resources.remove(rng.choice(resources))
        state["resources"] = sorted(resources)
        return f"deleted G/resources ({count} znodes, one transaction)"

    def heal() -> str:
        resources = state.get("resources", [])
        reappeared = fleet.admin.exists(paths.resources) is not None
        fleet.admin.ensure([(paths.resources, b""), *[(paths.resource(r), b"") for r in resources]])
        fleet.resources = set(resources)
        note = "; a worker had re-created G/resources meanwhile" if reappeared else ""
        time.sleep(rng.uniform(0.1, 0.4))
        return f"re-created with {len(resources)} resources after {hold:.2f}s{note}; {probe(fleet, rng)}"

    return Action("tamper-resources", "G/resources", inject, heal, hold=hold)


def epoch_action(fleet: Fleet, rng: random.Random, variant: str = "") -> Action:
    """``G/epoch`` deleted for good (``delete``: the library must cope), deleted and re-created after
    0.2-1.5 T (``recreate``: versions restart at 0), or overwritten (``set``: version bumped)."""
    paths = _paths(fleet)
    how = variant or rng.choices(["delete", "recreate", "set"], weights=[3, 4, 3])[0]

    def inject() -> str:
        if how == "set":
            done = bump_epoch(fleet)
        else:
            done = f"deleted G/epoch ({fleet.admin.delete_tree(paths.epoch)} znodes)"
        time.sleep(rng.uniform(0.1, 0.4))
        return f"{done}; {probe(fleet, rng)}"

    def heal() -> str:
        if fleet.admin.exists(paths.epoch) is not None:
            return "a worker had re-created G/epoch meanwhile"
        fleet.admin.create(paths.epoch)
        return "re-created G/epoch (its version restarts at 0)"

    def cleanup() -> str | None:
        if fleet.admin.exists(paths.epoch) is None and fleet.admin.create(paths.epoch):
            return "G/epoch was still missing after the step: re-created by the harness"
        return None

    if how == "recreate":
        return Action("tamper-epoch", how, inject, heal, hold=fleet.settings.session_timeout * rng.uniform(0.2, 1.5),
                      cleanup=cleanup)
    return Action("tamper-epoch", how, inject, cleanup=cleanup)


# -- fakes -------------------------------------------------------------------------------------------


def fake_member_action(fleet: Fleet, rng: random.Random) -> Action:
    """A persistent ``G/clients`` node that sorts before every member: a made-up id, or (30 %) a live
    member's id; sometimes the coordinator is made to take office again while it is there."""
    paths = _paths(fleet)
    live = sorted(fleet.live())
    member_id = rng.choice(live) if live and rng.random() < 0.3 else f"fake-{rng.randrange(1000)}"
    name = f"{rng.getrandbits(128):032x}-{member_id}-{0:010d}"
    path = paths.client(name)
    data = rng.choice([b"", json.dumps({"id": member_id, "joined": time.time()}).encode(),
                       bad.garbage("member", rng.choice(["1e999", "random", "wrong-type"]), rng)])
    reelect = rng.random() < 0.5

    def inject() -> str:
        fleet.admin.create(path, data)
        fleet.planted.add(path)
        time.sleep(rng.uniform(0.1, 0.4))
        parts = [f"persistent G/clients/{name[:8]}...-{member_id}-{0:010d} ({len(data)} bytes)"]
        if reelect:
            parts.append(bump_epoch(fleet))
        parts.append(probe(fleet, rng))
        return "; ".join(parts)

    def cleanup() -> str | None:
        fleet.planted.discard(path)
        fleet.admin.delete(path)
        return None

    return Action("fake-member", member_id, inject, cleanup=cleanup)


def fake_claim_action(fleet: Fleet, rng: random.Random) -> Action | None:
    """A persistent ``G/owners/<r>`` for a resource that is being added (60 %), or for one that is
    deleted and re-created (its real claim released first); the library must remove it and claim r."""
    paths = _paths(fleet)
    absent = [r for r in fleet.pool if r not in fleet.resources]
    fresh = bool(absent) and (rng.random() < 0.6 or not fleet.resources)
    if not fresh and not fleet.resources:
        return None
    name = rng.choice(absent) if fresh else rng.choice(sorted(fleet.resources))
    path = paths.owner(name)
    state: dict[str, int] = {}

    def inject() -> str:
        if not fresh:
            fleet.delete_resource(name)
            deadline = time.monotonic() + fleet.settings.bound
            while fleet.admin.exists(path) is not None and time.monotonic() < deadline:
                time.sleep(0.05)
        who = sorted(fleet.live())
        data = rng.choice([b"", json.dumps({"member": rng.choice(who) if who else "w0"}).encode(),
                           bad.garbage("claim", rng.choice(["1e999", "random", "wrong-type"]), rng)])
        made = fleet.admin.create(path, data, makepath=True)
        child = made and rng.random() < 0.3 and fleet.admin.create(f"{path}/child")
        stat = fleet.admin.exists(path)
        if made and stat is not None:
            state["czxid"] = int(stat.czxid)
        fleet.add_resource(name)
        what = "a persistent claim" + (" with a child" if child else "") if made else "no fake (the claim was held)"
        return f"{what} on {'new' if fresh else 're-created'} resource {name} ({len(data)} bytes)"

    def cleanup() -> str | None:
        stat = fleet.admin.exists(path)
        if "czxid" in state and stat is not None and stat.czxid == state["czxid"]:
            fleet.admin.delete_tree(path)
            return f"the fake claim on {name} was still there after the step: deleted by the harness"
        return None

    return Action("fake-claim", name, inject, cleanup=cleanup)


def plan_tamper(kind: str, fleet: Fleet, rng: random.Random, variant: str = "") -> list[Action]:
    """The action of a composable tamper kind ([] when there is nothing to tamper with right now)."""
    action: Action | None
    if kind == "tamper-group":
        action = group_action(fleet, rng)
    elif kind == "tamper-resources":
        action = resources_action(fleet, rng)
    elif kind == "tamper-epoch":
        action = epoch_action(fleet, rng, variant)
    elif kind in ("tamper-garbage", "tamper-stale"):
        action = data_action(fleet, rng, kind, variant)
    elif kind == "fake-member":
        action = fake_member_action(fleet, rng)
    elif kind == "fake-claim":
        action = fake_claim_action(fleet, rng)
    else:
        raise ValueError(f"not a tamper kind: {kind}")
    return [action] if action is not None else []


# -- procedures --------------------------------------------------------------------------------------


def _session_after(fleet: Fleet, worker: ChaosWorker, since_ns: int) -> str | None:
    states = [e["state"] for e in fleet.ledger.events_of({"session"})
              if e.get("_pid") == worker.pid and int(e["ts"]) >= since_ns
              and e["state"] in ("reconnected", "expired", "connected")]
    return states[-1] if states else None


def reconnect_tamper(fleet: Fleet, rng: random.Random, result: StepResult, variant: str = "") -> list[FaultRecord]:
    """A brief cut that keeps the sessions of 1 to all workers (connections reset, or a silent cut of
    0.6-0.8 T), then, once they have reconnected, one of the administrator's actions."""
    settings = fleet.settings
    victims = rng.sample(fleet.running(), rng.randint(1, len(fleet.running())))
    blip = rng.random() < 0.25
    start = time.monotonic_ns()
    if blip:
        hold = settings.session_timeout * rng.uniform(0.6, 0.8)
        for worker in victims:
            worker.proxy.blackhole()
        time.sleep(hold)  # the cut's duration
        for worker in victims:
            worker.proxy.restore()
        how = f"silent cut of {hold:.2f}s"
    else:
        cut = sum(worker.proxy.cut() for worker in victims)
        how = f"{cut} connections reset"
    deadline = time.monotonic() + settings.session_timeout + 5
    while time.monotonic() < deadline and any(_session_after(fleet, w, start) is None for w in victims):
        time.sleep(0.05)
    states = {w.member_id: _session_after(fleet, w, start) or "no session event" for w in victims}
    kept = sorted(m for m, s in states.items() if s == "reconnected")
    time.sleep(rng.uniform(0.1, 1.0))  # the administrator acts a while after the reconnect
    then = variant or _pick(rng, AFTER_RECONNECT)
    action: Action | None
    if then == "group":
        action = group_action(fleet, rng)
    elif then == "resources":
        action = resources_action(fleet, rng)
    elif then == "epoch":
        action = epoch_action(fleet, rng, "recreate")
    elif then == "barrier":
        action = data_action(fleet, rng, "tamper-stale", "barrier")
    elif then == "fake-member":
        action = fake_member_action(fleet, rng)
    else:
        raise ValueError(f"unknown action after a reconnect: {then!r}")
    inner = run_actions([action]) if action is not None else []
    if action is not None:
        result.verifiers += [action.verify] if action.verify else []
        result.cleanups += [action.cleanup] if action.cleanup else []
    targets = ",".join(sorted(w.member_id for w in victims))
    detail = (f"{how} ({targets}; session kept by {kept or 'none'}, {states}); then "
              + ("; ".join(f"{r.kind}: {r.detail}" for r in inner) or "nothing to tamper with"))
    heal = max([r.heal_ns for r in inner], default=time.monotonic_ns())
    return [FaultRecord("reconnect-tamper", targets, start, heal, detail)]


def duplicate_id(fleet: Fleet, rng: random.Random, result: StepResult) -> list[FaultRecord]:
    """A second worker process started with a live member's id: it must exit with code 2 in time, and
    never work."""
    settings = fleet.settings
    owning = [w for w in fleet.running() if fleet.owned_by(w)] or fleet.running()
    original = rng.choice(sorted(owning, key=lambda w: w.member_id))
    start = time.monotonic_ns()
    dup = fleet.spawn_extra(original.member_id)
    limit = 2 * settings.session_timeout + 5 + settings.bound
    code: int | None = None
    while True:  # time in which the host was measured stalled extends the limit, as for recovery
        stalled = fleet.stalls.between(start, time.monotonic_ns())
        left = start / 1e9 + limit + stalled - time.monotonic()
        if left <= 0:
            break
        try:
            code = dup.wait(min(left, 1.0))
            break
        except subprocess.TimeoutExpired:
            continue
    took = (time.monotonic_ns() - start) / 1e9
    if code is None:
        result.violations.append(("duplicate", f"a second worker with id {original.member_id} (pid {dup.pid}) was "
                                               f"still running {took:.1f}s after it started (limit {limit:.1f}s "
                                               f"+ measured host stall; stderr {dup.err_log})"))
        dup.terminate(timeout=settings.bound + 10)
    elif code != 2:
        result.violations.append(("duplicate", f"a second worker with id {original.member_id} exited with {code} "
                                               f"after {took:.1f}s, not 2 (stderr {dup.err_log})"))
    fleet.retire_extra(dup)
    worked = fleet.ledger.worked_by(dup.pid)
    if worked:
        result.violations.append(("duplicate", f"a second worker with id {original.member_id} (pid {dup.pid}) "
                                               f"worked on {sorted(worked)[:10]}"))
    return [FaultRecord("duplicate-id", original.member_id, start, time.monotonic_ns(),
                        f"second process pid {dup.pid}: exit {code} after {took:.1f}s")]


def run_cleanups(cleanups: list[Callable[[], str | None]]) -> list[str]:
    """Runs every cleanup (each one even if another fails); returns their notes."""
    notes = []
    for cleanup in cleanups:
        try:
            note = cleanup()
        except Exception as exc:  # a cleanup must not end the campaign; the next step's checks judge
            note = f"cleanup failed: {exc!r}"
        if note:
            notes.append(note)
    return notes
