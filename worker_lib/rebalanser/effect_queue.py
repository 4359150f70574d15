"""The member's one effect queue: the effects of its three machines (joining and the session,
:mod:`member_state`; following, :mod:`follow` and :mod:`follower`; per-resource work,
:mod:`resource_state`) in one queue, drained by one loop.

A transition's effects go to the front of the queue, in order: they follow the effect whose outcome
produced them, ahead of what was queued earlier, as a call would, but without recursion. A transition
made while the queue drains only queues more, so an effect never runs while another is on the stack
(:attr:`EffectQueue.deepest` counts it; the tests assert it stays 1). An exception out of an effect
ends the drain and clears the queue (the member's executor reports and swallows those it can go on
after; a lost connection ends the run, and the resync after reconnecting redoes what is left).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from typing import Generic, TypeVar

E = TypeVar("E")


class EffectQueue(Generic[E]):
    """Used by one thread only (the member's)."""

    def __init__(self) -> None:
        self._todo: deque[E] = deque()
        self._stack: list[E] = []
        self.deepest = 0  # the most effects ever on the stack at once
        self.executed = 0

    def push(self, effects: Iterable[E]) -> None:
        """Puts ``effects`` at the front of the queue, in order."""
        self._todo.extendleft(reversed(list(effects)))

    @property
    def draining(self) -> bool:
        return bool(self._stack)

    def drain(self, execute: Callable[[E], None], go_on: Callable[[], bool] = lambda: True) -> None:
        """Runs the queued effects in order while ``go_on()``; returns at once when called from an
        effect (the drain under way runs what was queued)."""
        if self._stack:
            return
        try:
            while self._todo and go_on():
                effect = self._todo.popleft()
                self._stack.append(effect)
                self.deepest = max(self.deepest, len(self._stack))
                self.executed += 1
                try:
                    execute(effect)
                finally:
                    self._stack.pop()
        finally:
            self._todo.clear()

    def __len__(self) -> int:
        return len(self._todo)
