"""Conformance traces (docs/protocol.md, "Conformance"): a run's worker event streams as model events.

Each run directory the explorer leaves (``runs/NNNN-*``) holds one ``<worker>.jsonl`` per worker: the
``rebalanser worker --json`` events. This module merges them by ``ts`` (the host's monotonic clock,
shared by the processes) and maps every event to a line the model's ``conform`` mode reads (the model's
step each one is matched with, in brackets):

- ``assigned`` -> ``start M R TOKEN`` per resource [Start]; ``revoked`` -> ``stop M R`` per resource
  it worked on [a step that stops work]; ``tick`` -> ``tick M R TOKEN`` [a predicate: M works on R];
- ``session``: ``suspended`` -> ``suspend`` [Disconnect, Expire]; ``reconnected`` (or ``connected``
  again in the same session) -> ``resume`` [Recheck: the loop's re-check; the Handshake before it is
  unobservable]; ``expired`` -> ``stop`` of everything it worked on, then ``expired`` [SessionEnded: the
  loop processes the lost session; the NewSession before it is unobservable]; ``standby`` -> ``stop``
  of everything it worked on,
  then ``standby`` [Standby]. At both the library stops work at once (its tokens are gone); the
  ``revoked`` events that follow for those resources are the callbacks returning, ``note``s;
  ``rejoining`` -> ``rejoin`` [Rejoin];
- a graceful exit (the ``revoked`` events just before ``closed``) -> their ``stop`` lines, then
  ``leave`` [Leave]; ``closed`` and ``stopped`` are ``note``s;
- ``role coordinator`` -> ``office`` [TakeOffice]; ``role follower``, the first ``connected``, the
  ``connected`` of the session after an expiry, ``session waiting`` (the join waits for an earlier
  incarnation) and an ``error`` naming a record it could not read (Bad data, not modelled) -> ``note``s
  (folded into a neighbouring step);
- an outsider's claim deletion (``outside.jsonl``, written by the explorer: :func:`record_outside_delete`)
  -> ``delete R`` [AdminDeleteClaim: observable in an explorer run, where every one is recorded, so the
  model's outside deletion happens there and nowhere else]. A claim so deleted while its owner was away
  (between its ``suspended`` and its reconnection) has stopped counting by the owner's next ``resume``
  at the latest: at the handshake every claim is unverified until the re-check, which finds it gone
  (``owns`` false) [SetWatches, or the Recheck itself]. So its ``stop`` comes right before that
  ``resume``, and its ``revoked``, when the loop has run the stop callback, is the callback returning
  (a ``note``), as after ``expired``;
- anything else -> ``unmapped`` (the checker reports it: no model counterpart).

A member is one worker process (``id``, and ``_pid`` when one id had several processes; a process id
used again after a process of it ``stopped`` is another member).

The campaign (``tests/chaos/campaign.py``) keeps one fleet running through many steps; its workers'
streams are in ``<target>/<phase>/runN/logs/`` and its steps in ``<target>/steps.jsonl``. A step is the
time from its first fault to the next step's: its trace starts from the state the streams show at
that moment (who works on what, who is in office), written as a preamble of ``office`` and ``start``
lines that the model reaches from its initial state.

``python -m tests.chaos.trace RUN_DIR... --out DIR`` writes ``DIR/<run>.trace`` per explorer run;
``--campaign TARGET_DIR --sample N`` writes N steps' traces of a campaign target.
"""
from __future__ import annotations

import argparse
import json
import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

OUTSIDE = "outside"  # the stream (``outside.jsonl``) and ``id`` of the outsider's recorded actions
OUTSIDE_DELETE = "claim-deleted"


def record_outside_delete(run: Path, resource: str, ts: int) -> None:
    """An outsider (the explorer) deleted the claim on ``resource``: ``ts`` is the instant the delete
    was sent (the host's monotonic clock, as the workers' events), so every event it caused comes
    after it. Only a deletion that took place is recorded (not one that found no node)."""
    with open(run / f"{OUTSIDE}.jsonl", "a") as out:
        out.write(json.dumps({"event": OUTSIDE_DELETE, "id": OUTSIDE, "ts": ts, "resource": resource}) + "\n")


def _records(stream: Path) -> Iterator[dict[str, Any]]:
    for line in stream.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut short by a kill
        if isinstance(record, dict) and "event" in record and "ts" in record:
            yield record


def events_of(run: Path) -> list[dict[str, Any]]:
    """Every worker event of one run (its ``*.jsonl`` streams), ordered by time; ``member`` set to
    the worker's id, with its process id when that id had more than one process."""
    out: list[dict[str, Any]] = []
    for stream in sorted(run.glob("*.jsonl")):
        records = list(_records(stream))
        pids = {r.get("_pid") for r in records}
        ended: dict[Any, int] = {}  # per process id, the processes of it that stopped (ids are reused)
        for r in records:
            pid = r.get("_pid")
            n = ended.get(pid, 0)
            suffix = f".{n}" if n else ""
            r["member"] = str(r.get("id")) if len(pids) <= 1 and not n else f"{r.get('id')}/{pid}{suffix}"
            if r["event"] == "stopped":
                ended[pid] = n + 1
            out.append(r)
    return sorted(out, key=lambda e: int(e["ts"]))


@dataclass
class Mapper:
    """Maps events to trace lines, keeping what each member works on (per the trace)."""

    working: dict[str, set[str]] = field(default_factory=dict)
    standby: set[str] = field(default_factory=set)
    fenced: dict[str, set[str]] = field(default_factory=dict)  # stopped at a fence, callback not returned
    after_expiry: set[str] = field(default_factory=set)
    seen: set[str] = field(default_factory=set)
    suspended: set[str] = field(default_factory=set)
    ticked: set[tuple[str, str]] = field(default_factory=set)  # ticks written since the last other line
    office: str | None = None
    exits: set[int] = field(default_factory=set)  # ids of the revoked events of a graceful exit
    lost_away: dict[str, set[str]] = field(default_factory=dict)  # claims deleted while their owner was away

    def plan_exits(self, events: list[dict[str, Any]]) -> None:
        """The ``revoked`` events of each member just before its ``closed`` (ticks aside): its exit."""
        by_member: dict[str, list[dict[str, Any]]] = {}
        for e in events:
            if e["event"] != "tick":
                by_member.setdefault(e["member"], []).append(e)
        for own in by_member.values():
            for i, e in enumerate(own):
                if e["event"] == "session" and e.get("state") == "closed":
                    j = i - 1
                    while j >= 0 and own[j]["event"] == "revoked":
                        self.exits.add(id(own[j]))
                        j -= 1
                    self.exits.add(id(e))

    def lines(self, e: dict[str, Any]) -> Iterator[str]:
        """The lines of one event; a tick repeated with no other line between says nothing new."""
        if e["event"] == OUTSIDE_DELETE and e.get("id") == OUTSIDE:
            self.ticked.clear()
            resource = str(e.get("resource"))
            for m in self.suspended:
                if resource in self.working.get(m, ()):
                    self.lost_away.setdefault(m, set()).add(resource)
            yield f"delete {resource}"
            return
        if e["event"] == "tick":
            key = (e["member"], str(e.get("resource")))
            if key in self.ticked:
                return
            self.ticked.add(key)
        else:
            self.ticked.clear()
        yield from self._lines(e)

    def _lines(self, e: dict[str, Any]) -> Iterator[str]:
        m, kind = e["member"], e["event"]
        works = self.working.setdefault(m, set())
        if m not in self.seen:
            self.seen.add(m)
            yield f"join {m}"
        if kind == "tick":
            if e.get("resource") in works:
                yield f"tick {m} {e.get('resource')} {e.get('token')}"
            else:
                yield f"unmapped {m} tick {e.get('resource')} without an assigned event"
        elif kind == "assigned":
            for r in e.get("resources", []):
                if r in works:
                    yield f"unmapped {m} assigned {r} again while working on it"
                else:
                    works.add(r)
                    yield f"start {m} {r} {e.get('token')}"
        elif kind == "revoked":
            for r in e.get("resources", []):
                if r in works:
                    works.discard(r)
                    yield f"stop {m} {r}"
                elif r in self.fenced.get(m, ()) or m in self.standby or id(e) in self.exits:
                    self.fenced.get(m, set()).discard(r)
                    yield f"note {m} revoked {r}: its callback returned (stopped before)"
                else:
                    yield f"unmapped {m} revoked {r} it did not work on"
            if id(e) in self.exits and not works:
                yield from self._leave(m)
        elif kind == "role":
            if e.get("role") == "coordinator":
                self.office = m
                yield f"office {m}"
            else:
                yield f"note {m} role {e.get('role')}"
        elif kind == "session":
            yield from self._session(m, str(e.get("state")), id(e) in self.exits)
        elif kind == "stopped":
            yield f"note {m} stopped"
        elif kind == "error" and e.get("path"):
            # Bad data: a record the library could not read and treats as unchanged (not modelled)
            yield f"note {m} error: bad data at {e.get('path')}"
        else:
            yield f"unmapped {m} {kind}"

    def _fence(self, m: str) -> Iterator[str]:
        """The library stops all work here (its tokens are gone at once), whether or not the stop
        callbacks have returned: a ``stop`` for each resource; their ``revoked`` events come later."""
        works = self.working[m]
        for r in sorted(works):
            yield f"stop {m} {r}"
        self.fenced.setdefault(m, set()).update(works)
        works.clear()

    def _resume(self, m: str) -> Iterator[str]:
        """The loop's re-check after a reconnection: the claims deleted while it was away no longer count
        (their work stopped, whether or not their stop callbacks have run yet)."""
        works = self.working[m]
        for r in sorted(self.lost_away.pop(m, set()) & works):
            yield f"stop {m} {r}"
            works.discard(r)
            self.fenced.setdefault(m, set()).add(r)
        yield f"resume {m}"

    def _leave(self, m: str) -> Iterator[str]:
        if m not in self.standby:
            self.standby.add(m)  # no more steps of this member
            yield f"leave {m}"

    def _session(self, m: str, state: str, exit_: bool) -> Iterator[str]:
        works = self.working[m]
        if state == "connected":
            if m in self.after_expiry:
                self.after_expiry.discard(m)
                yield f"note {m} connected in a new session (after expired)"
            elif m in self.suspended:
                self.suspended.discard(m)
                yield from self._resume(m)
            else:
                yield f"note {m} connected (its first session)"
        elif state == "suspended" and m in self.suspended:
            # kazoo reconnected and dropped again, the reconnection not reported (a CONNECTED of a
            # session the client no longer took for current): the model's member stays disconnected
            yield f"note {m} suspended again (the reconnection between was not reported)"
        elif state == "suspended":
            self.suspended.add(m)
            yield f"suspend {m}"
        elif state == "reconnected" and m not in self.suspended:
            # the counterpart of "suspended again": two drops reported before their two reconnections;
            # the model's member reconnected (and re-checked) at the first
            yield f"note {m} reconnected again (its disconnection between was not reported)"
        elif state == "reconnected":
            self.suspended.discard(m)
            yield from self._resume(m)
        elif state in ("expired", "lost"):
            self.suspended.discard(m)
            self.lost_away.pop(m, None)  # the fence stops everything
            self.after_expiry.add(m)
            yield from self._fence(m)
            yield f"expired {m}"
        elif state == "standby":
            yield from self._fence(m)
            self.standby.add(m)
            yield f"standby {m}"
        elif state == "waiting":
            # an earlier incarnation's node with our id: the join waits (the model's Join comes later)
            yield f"note {m} waiting for an earlier incarnation to go"
        elif state == "rejoining":
            self.standby.discard(m)
            yield f"rejoin {m}"
        elif state == "closed" and exit_:
            if works:  # an exit whose resources were not all revoked first
                yield f"unmapped {m} closed while working on {sorted(works)}"
            if m not in self.standby:
                yield from self._leave(m)
            yield f"note {m} closed"
        else:
            yield f"unmapped {m} session {state}"


def trace_lines(events: Iterable[dict[str, Any]], algo: str = "resource") -> Iterator[str]:
    events = list(events)
    mapper = Mapper()
    mapper.plan_exits(events)
    yield f"algo {algo}"
    for e in events:
        yield from mapper.lines(e)


def export(run: Path, out: Path) -> Path:
    algo = "global" if "global" in run.name else "resource"
    target = out / f"{run.name}.trace"
    target.write_text("\n".join(trace_lines(events_of(run), algo)) + "\n")
    return target


# -- the campaign ----------------------------------------------------------------------------------


def campaign_steps(target_dir: Path) -> list[tuple[Path, dict[str, Any], int, int]]:
    """(logs dir, step record, window start, window end) per campaign step with its fleet's streams."""
    steps = [json.loads(line) for line in (target_dir / "steps.jsonl").read_text().splitlines() if line.strip()]
    starts: list[int | None] = [
        min((int(f["start_ns"]) for f in s.get("faults", []) if "start_ns" in f), default=None) for s in steps]
    runs = sorted(p for p in target_dir.glob("*/run*/logs") if any(p.glob("*.jsonl")))
    out = []
    streams = {logs: events_of(logs) for logs in runs}
    for k, step in enumerate(steps):
        start = starts[k]
        if start is None:
            continue
        later = [t for t in starts[k + 1:] if t is not None]
        end = later[0] if later else 1 << 62
        for logs, events in streams.items():
            if events and events[0]["ts"] <= start <= events[-1]["ts"]:
                out.append((logs, step, start, end))
                break
    return out


JUST_BEFORE_NS = 1_000_000_000
"""A process heard from this shortly before a step began was alive when it began (workers tick every
0.1 s while they work; a process that died in an earlier step has been silent since that step)."""


def step_lines(events: list[dict[str, Any]], algo: str, start: int, end: int) -> Iterator[str]:
    """One campaign step's trace: a preamble (the state at ``start``), then its window's events."""
    before = Mapper()
    before.plan_exits(events)
    for e in events:
        if e["ts"] >= start:
            break
        list(before.lines(e))
    # live at the start: a process with an event in the step or after it, or one heard from just
    # before it (a process killed at the step's start has no event after it: it dies in the step,
    # after its last line, which the model allows at any point)
    later = {e["member"] for e in events if e["ts"] >= start}
    later |= {e["member"] for e in events if start - JUST_BEFORE_NS <= e["ts"] < start}
    yield f"algo {algo}"
    mapper = Mapper()
    mapper.exits = before.exits
    live = [m for m in before.seen if m in later and m not in before.standby]
    for m in live:
        mapper.seen.add(m)
        yield f"join {m}"
    if before.office in live:
        yield f"office {before.office}  # preamble: in office when the step began"
    for m in live:
        for r in sorted(before.working.get(m, ())):
            mapper.working.setdefault(m, set()).add(r)
            yield f"start {m} {r} 0  # preamble: working when the step began"
    for e in events:
        if start <= e["ts"] < end:
            yield from mapper.lines(e)


def export_campaign(target_dir: Path, out: Path, sample: int, seed: int) -> list[Path]:
    steps = campaign_steps(target_dir)
    picked = sorted(random.Random(seed).sample(range(len(steps)), min(sample, len(steps))))
    algo = "global" if "global" in target_dir.name else "resource"
    written = []
    cache: dict[Path, list[dict[str, Any]]] = {}
    for k in picked:
        logs, step, start, end = steps[k]
        if logs not in cache:
            cache[logs] = events_of(logs)
        events = cache[logs]
        target = out / f"{target_dir.name}-step{step['index']:04d}-{step['kind']}.trace"
        target.write_text("\n".join(step_lines(events, algo, start, end)) + "\n")
        written.append(target)
    return written


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("runs", nargs="*", type=Path)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--campaign", type=Path, action="append", default=[],
                   help="a campaign target directory (with steps.jsonl)")
    p.add_argument("--sample", type=int, default=20, help="campaign steps per target")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for run in args.runs:
        if run.is_dir() and any(run.glob("*.jsonl")):
            print(export(run, args.out))
    for target in args.campaign:
        for path in export_campaign(target, args.out, args.sample, args.seed):
            print(path)


if __name__ == "__main__":
    main()
