"""Operator replicas' own evidence: the ``replica-serve``, ``replica-write`` and ``replica-stop`` log lines
(:mod:`rebalanser_operator.replicaserve`) and what they show, for ``tests/operator/test_replicas_e2e.py``
(replicas as host processes), ``tests/pods/test_replicas_pods.py`` (the chart's replicas as pods) and
``bench/failover.py``'s replica cells.

    lines = parse(text, member="op-1#0")          # one replica instance's log; every line's member renamed
    spans = check_one_at_a_time(lines, cut={"op-1#0": killed_at})
    serving_now(spans)                            # group -> the member serving it now
    handovers(spans, since=t)                     # (group, from, to, gap) of each move after ``t``
    closed_session(line, "fo-0")                  # this line says a replica closed pod fo-0's member session

Each line carries the replica, the group, the claim's token and the wall-clock time (the replicas share a
host, or a node whose kernel is this host's). A member is whatever names one replica instance: the
member id for host processes, ``<pod>#<container instance>`` for pods (a restarted container keeps its
pod's name, and must not be taken for its dead predecessor).
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

from rebalanser_operator.failover.endmember import Outcome

LINE = re.compile(r"replica-(serve|write|stop) member=(\S+) group=(\S+) token=(\d+) at=([0-9.]+)")
#: member, token, start, end (inf: still serving)
Interval = tuple[str, int, float, float]


@dataclass(frozen=True)
class Line:
    kind: str
    member: str
    group: str
    token: int
    at: float


def parse(text: str, member: str | None = None) -> list[Line]:
    """The replica lines of one log (plain or JSON lines: the message is matched wherever it is);
    ``member`` replaces the member id the lines name."""
    found = []
    for match in LINE.finditer(text):
        kind, named, group, token, at = match.groups()
        found.append(Line(kind, member if member is not None else named, group, int(token), float(at)))
    return found


def intervals(lines: list[Line], cut: dict[str, float] | None = None) -> dict[str, list[Interval]]:
    """Each group's serving intervals from the log lines. ``cut``: a replica killed or frozen at that time,
    whose intervals begun before it end there at the latest (it can act no more; a frozen one's stop line
    comes only after its thaw)."""
    cut = cut or {}
    open_: dict[tuple[str, str], tuple[int, float]] = {}
    found: dict[str, list[Interval]] = {}

    def end(member: str, start: float, at: float) -> float:
        return min(at, cut[member]) if member in cut and start < cut[member] else at

    for line in lines:
        key = (line.group, line.member)
        if line.kind == "serve":
            assert key not in open_, f"{line.member} started serving {line.group} twice without a stop"
            open_[key] = (line.token, line.at)
        elif line.kind == "stop":
            token, start = open_.pop(key)
            found.setdefault(line.group, []).append((line.member, token, start, end(line.member, start, line.at)))
    for (group, member), (token, start) in open_.items():
        found.setdefault(group, []).append((member, token, start, end(member, start, float("inf"))))
    return found


def check_one_at_a_time(lines: list[Line], cut: dict[str, float] | None = None) -> dict[str, list[Interval]]:
    """No two replicas' intervals of a group overlap; every write lies inside its writer's interval with
    its token; returns the intervals."""
    spans = intervals(lines, cut)
    for group, items in spans.items():
        ordered = sorted(items, key=lambda item: item[2])
        for before, after in itertools.pairwise(ordered):
            assert before[3] <= after[2], f"{group}: {before[0]} served until {before[3]:.3f} but {after[0]} " \
                                          f"from {after[2]:.3f}: {ordered}"
            assert after[1] > before[1], f"{group}: the token did not grow at the handover: {ordered}"
    for line in lines:
        if line.kind != "write":
            continue
        inside = [s for s in spans.get(line.group, []) if s[0] == line.member and s[2] <= line.at <= s[3]]
        assert inside and inside[0][1] == line.token, f"a write outside its writer's interval: {line}; {spans}"
    return spans


def serving_now(spans: dict[str, list[Interval]]) -> dict[str, str]:
    """group -> the member whose interval is still open (the latest such, should there be two)."""
    now = {}
    for group, items in spans.items():
        open_ = [item for item in items if item[3] == float("inf")]
        if open_:
            now[group] = max(open_, key=lambda item: item[2])[0]
    return now


@dataclass(frozen=True)
class Handover:
    group: str
    before: str
    after: str
    released: float  # the previous server's end (its stop line, or its cut)
    taken: float  # the next server's start

    @property
    def gap(self) -> float:
        return self.taken - self.released


def handovers(spans: dict[str, list[Interval]], since: float = 0.0) -> list[Handover]:
    """Every move of a group from one member to the next whose release came at or after ``since``."""
    found = []
    for group, items in sorted(spans.items()):
        ordered = sorted(items, key=lambda item: item[2])
        for before, after in itertools.pairwise(ordered):
            if before[3] >= since:
                found.append(Handover(group, before[0], after[0], before[3], after[2]))
    return found


def taken_after(lines: list[Line], groups: set[str], since: float) -> dict[str, float]:
    """Seconds from ``since`` (a replica's kill or freeze) to the first serve line of each of ``groups``
    after it. A group with none is left out: its new replica began serving it before ``since`` (the
    replicas' share changed between the settle and the fault), so the fault's takeover does not time it."""
    after = {g: [ln.at for ln in lines if ln.kind == "serve" and ln.group == g and ln.at > since] for g in groups}
    return {g: min(at) - since for g, at in after.items() if at}


def closed_session(line: str, pod: str) -> bool:
    """Whether ``line`` is a replica's failover line saying it closed the session of ``pod``'s ended
    instance (``podwatch``'s log line; not its "left to expire" warning about the same pod)."""
    return f"failover: pod {pod}'s" in line and f" {Outcome.CLOSED.value} in " in line
