"""Adaptive rebalance interval: a pure function of what the operator observed, and when.

    policy = TuningPolicy(min_interval=2, max_interval=30)
    state = initial_state(policy, now=t0)
    state = observe(policy, state, now=t1, membership_changes=3, rolling_out=False)
    state.effective      # what goes to G/config effectiveIntervalSeconds

Policy (documented in docs/operator.md):

* ``adaptive=False`` pins the interval to ``min_interval``.
* While the workload rolls out, the interval is ``max_interval``: members come and go in waves, and one
  rebalance after the wave beats one per pod.
* Membership churn raises it: with ``n`` membership changes in the last ``churn_window`` seconds the target
  is ``base * 2**(n-1)`` (``base`` = ``min_interval``, or 1 s when the minimum is 0), capped at
  ``max_interval``; one isolated change keeps the minimum. Rising is immediate.
* After ``quiet_period`` seconds without churn or rollout the interval halves every ``decay_every``
  seconds until it is back at ``min_interval``.

Guarantees: ``min_interval <= effective <= max_interval`` always; the function never reads a clock
(``now`` is a monotonic timestamp supplied by the caller), so it is deterministic and unit-testable.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

FIXED = "Fixed"
ROLLING_OUT = "RollingOut"
CHURN = "Churn"
QUIET = "Quiet"
DECAYING = "Decaying"


@dataclass(frozen=True)
class TuningPolicy:
    min_interval: float
    max_interval: float
    adaptive: bool = True
    churn_window: float = 60.0
    quiet_period: float = 30.0
    decay_every: float = 15.0

    def __post_init__(self) -> None:
        if not 0 <= self.min_interval <= self.max_interval:
            raise ValueError(f"need 0 <= min_interval <= max_interval, got {self.min_interval}, {self.max_interval}")
        if self.churn_window <= 0 or self.quiet_period < 0 or self.decay_every <= 0:
            raise ValueError("churn_window and decay_every must be positive, quiet_period non-negative")

    def clamp(self, value: float) -> float:
        return min(max(value, self.min_interval), self.max_interval)

    def churn_target(self, changes: int) -> float:
        if changes <= 1:
            return self.min_interval
        base = self.min_interval if self.min_interval > 0 else 1.0
        return self.clamp(base * 2.0 ** min(changes - 1, 32))


@dataclass(frozen=True)
class TuningState:
    effective: float
    reason: str = QUIET
    changes: tuple[float, ...] = ()  # timestamps of recent membership changes (within churn_window)
    peak: float = 0.0  # the interval chosen at the last disturbance
    last_disturbance: float | None = None


def initial_state(policy: TuningPolicy, *, now: float, seed: float | None = None) -> TuningState:
    """The state of a freshly (re)started operator; ``seed`` (e.g. the last published interval)
    keeps a raised interval across restarts, decaying normally from ``now``."""
    if not policy.adaptive:
        return TuningState(effective=policy.min_interval, reason=FIXED)
    if seed is None or policy.clamp(seed) <= policy.min_interval:
        return TuningState(effective=policy.min_interval)
    return TuningState(policy.clamp(seed), DECAYING, (), policy.clamp(seed), now)


def observe(
    policy: TuningPolicy, state: TuningState, *, now: float, membership_changes: int, rolling_out: bool
) -> TuningState:
    """The next state after observing ``membership_changes`` (joins + leaves) at ``now``."""
    if not policy.adaptive:
        return TuningState(effective=policy.min_interval, reason=FIXED)
    changes = tuple(t for t in state.changes if now - t < policy.churn_window)
    changes += (now,) * max(0, membership_changes)
    current = policy.clamp(state.effective)
    if rolling_out:
        return TuningState(policy.max_interval, ROLLING_OUT, changes, policy.max_interval, now)
    if membership_changes > 0:
        target = policy.churn_target(len(changes))
        if target > policy.min_interval:
            peak = max(current, target)
            return TuningState(peak, CHURN, changes, peak, now)
    return _decayed(policy, state, changes, now)


def _decayed(policy: TuningPolicy, state: TuningState, changes: tuple[float, ...], now: float) -> TuningState:
    since = state.last_disturbance
    if since is None or state.peak <= policy.min_interval:
        return TuningState(policy.min_interval, QUIET, changes)
    quiet_for = now - since
    if quiet_for < policy.quiet_period:
        return replace(state, effective=policy.clamp(state.peak), changes=changes)
    halvings = 1 + int((quiet_for - policy.quiet_period) // policy.decay_every)
    value = policy.clamp(state.peak) / 2.0 ** min(halvings, 64)
    base = policy.min_interval if policy.min_interval > 0 else 1.0
    if value < base or value <= policy.min_interval:
        return TuningState(policy.min_interval, QUIET, changes)
    return replace(state, effective=value, reason=DECAYING, changes=changes)
