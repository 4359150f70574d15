"""The stop-callback step's choice of a resource, against a fleet whose observation window moves on."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from tests.chaos.faults import stop_callback_fault
from tests.chaos.fleet import Settings
from tests.chaos.step import StepResult


@dataclass
class _Worker:
    member_id: str = "w0"
    behaviour: str = "slow"

    def terminate(self, timeout: float) -> int:
        return 0


@dataclass
class _Fleet:
    """What the step reads of a fleet: the worker owned ``r`` in one window and nothing in the next."""

    windows: list[set[str]] = field(default_factory=lambda: [{"r"}])
    settings: Settings = field(default_factory=Settings)
    worker: _Worker = field(default_factory=_Worker)
    spawned: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)

    def running(self) -> list[_Worker]:
        return [self.worker]

    def owned_by(self, worker: _Worker) -> set[str]:
        return self.windows.pop(0) if self.windows else set()

    def spawn(self, member_id: str, behaviour: str) -> _Worker:
        self.spawned.append(member_id)
        return self.worker

    def delete_resource(self, name: str) -> None:
        self.deleted.append(name)

    def add_resource(self, name: str) -> None:
        pass


def test_a_worker_that_owns_nothing_by_the_time_of_the_choice_is_restarted_instead() -> None:
    """A Global Barrier campaign ended with ``IndexError: Cannot choose from an empty sequence``: the
    worker owned a resource when it was picked, and nothing in the window read for the choice."""
    fleet = _Fleet()
    rng = random.Random(0)  # first draw 0.84: the deletion branch
    records = stop_callback_fault(fleet, rng, StepResult(0, "single", "stop-slow", "0"), "slow")  # type: ignore[arg-type]
    assert [r.detail for r in records] == ["graceful restart (exit 0)"]
    assert fleet.spawned == ["w0"] and fleet.deleted == []
