"""What a compound step may combine: never a deletion of live members' claims from outside with a fault
that keeps a member from hearing ZooKeeper (the claim model leaves that case to the lease and the
fencing token; docs/protocol.md)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest

from tests.chaos import faults
from tests.chaos.fleet import Settings
from tests.chaos.step import Action

CUT_OFF_KINDS = ("pause-", "partition-", "conn-cut")


class _Proxy:
    def restore(self) -> None:
        pass


@dataclass
class _Worker:
    member_id: str
    proxy: _Proxy = field(default_factory=_Proxy)

    def resume(self) -> None:
        pass


@dataclass
class _Fleet:
    settings: Settings = field(default_factory=Settings)
    workers: list[_Worker] = field(default_factory=lambda: [_Worker(f"w{i}") for i in range(5)])
    partition: object = None

    def running(self) -> list[_Worker]:
        return list(self.workers)

    def coordinator(self) -> _Worker:
        return self.workers[0]

    def pick_behaviour(self, rng: random.Random) -> str:
        return "normal"


def _dummy(kind: str, target: str = "-") -> Action:
    return Action(kind, target, lambda: "")


def test_a_group_deletion_never_meets_a_member_cut_off_nor_another_change_of_the_resources(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(faults, "plan_tamper", lambda kind, fleet, rng: [_dummy(kind)])
    monkeypatch.setattr(faults, "churn_action", lambda fleet, rng: _dummy("resource-churn"))
    monkeypatch.setattr(faults, "zk_kill_action", lambda fleet, rng, how: _dummy(f"zk-{how}-kill"))
    deletions = 0
    for seed in range(2000):
        kinds = [a.kind for a in faults.compound(_Fleet(), random.Random(seed))]  # type: ignore[arg-type]
        if "tamper-group" in kinds:
            deletions += 1
            assert not [k for k in kinds if k.startswith(CUT_OFF_KINDS)], f"seed {seed}: {kinds}"
        rewrites = [k for k in kinds if k in ("tamper-group", "tamper-resources", "resource-churn")]
        assert len(rewrites) <= 1 or set(rewrites) == {"resource-churn"}, f"seed {seed}: {kinds}"
        assert len([k for k in kinds if k.startswith(("tamper-", "fake-"))]) <= 1, f"seed {seed}: {kinds}"
    assert deletions > 20, "the group deletion still takes part in compound steps"
