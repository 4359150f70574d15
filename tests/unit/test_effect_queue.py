"""The member's one effect queue (:mod:`rebalanser.effect_queue`): effects run in order, those an
effect produces right after it and ahead of older ones, and never one on the stack of another."""

from __future__ import annotations

import pytest
from rebalanser.effect_queue import EffectQueue


def test_effects_produced_by_an_effect_run_after_it_ahead_of_older_ones_and_never_nested() -> None:
    queue: EffectQueue[str] = EffectQueue()
    ran: list[str] = []
    follows = {"a": ["a1", "a2"], "a1": ["a1x"]}

    def execute(effect: str) -> None:
        ran.append(effect)
        queue.push(follows.get(effect, []))
        queue.drain(execute)  # from inside an effect: only queues (the drain under way runs it)

    queue.push(["a", "b"])
    queue.drain(execute)
    assert ran == ["a", "a1", "a1x", "a2", "b"]
    assert queue.deepest == 1 and queue.executed == 5 and len(queue) == 0


def test_an_exception_ends_the_drain_and_clears_the_queue() -> None:
    queue: EffectQueue[str] = EffectQueue()

    def execute(effect: str) -> None:
        if effect == "lost":
            raise ConnectionError(effect)

    queue.push(["x", "lost", "y"])
    with pytest.raises(ConnectionError):
        queue.drain(execute)
    assert len(queue) == 0 and not queue.draining


def test_the_drain_stops_when_told_to() -> None:
    queue: EffectQueue[str] = EffectQueue()
    ran: list[str] = []
    queue.push(["x", "abort", "y"])
    queue.drain(ran.append, lambda: "abort" not in ran)
    assert ran == ["x", "abort"]
