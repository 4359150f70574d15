"""A killed worker's resources, from the workers' own JSON events: how long each went without work, and
waiting for the victim's log to reach its kill (``tests/pods/test_replicas_pods.py``, ``bench/failover.py``).

    victim_logged(scene, "fo", victim, instance, kill_ts)     # its followed log has caught up with the kill
    tick_gaps_after(scene.events("fo"), victim, instance, held, kill_ts)   # resource -> seconds
"""

from __future__ import annotations

from collections.abc import Callable

from tests.support.failoverscene import FailoverScene
from tests.support.invariants import Event
from tests.support.kubectl import wait_until


def tick_gaps_after(events: list[Event], victim: str, instance: int, resources: set[str], at: int) -> dict[str, float]:
    """resource -> seconds from the victim instance's last tick of it (at or before ``at``, the kill's
    CLOCK_MONOTONIC ns; ``at`` itself when it had none) to the first tick of it by any other instance
    after ``at`` (a resource never worked on again is left out)."""
    last: dict[str, int] = {}
    first: dict[str, int] = {}
    for e in events:
        if e["event"] != "tick" or e["resource"] not in resources:
            continue
        ts, resource = int(e["ts"]), e["resource"]
        if (e["id"], e["_pid"]) == (victim, instance):
            if ts <= at:
                last[resource] = max(last.get(resource, ts), ts)
        elif ts >= at and resource not in first:
            first[resource] = ts
    return {r: (first[r] - last.get(r, at)) / 1e9 for r in sorted(first)}


def victim_logged(scene: FailoverScene, group: str, victim: str, instance: int, ts: int, timeout: float = 60.0,
                  warn: Callable[[str], None] | None = None) -> bool:
    """Waits until the victim instance's log (followed, or fetched after its restart) reaches its kill at
    ``ts``: its last tick before the kill is then known. Bounded; False on a timeout (``warn`` is told),
    and the log it has is used."""
    def reached() -> bool:
        last = [int(e["ts"]) for e in scene.events(group) if (e["id"], e["_pid"]) == (victim, instance)]
        if last and max(last) >= ts - 500_000_000:
            return True
        scene.logs_of_pod_previous(victim)
        return False

    try:
        wait_until(reached, timeout, f"{victim}: its log does not reach the kill", poll=1.0)
    except AssertionError as exc:
        if warn is not None:
            warn(f"warning: {exc}")
        return False
    return True
