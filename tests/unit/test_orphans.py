"""The orphan hand-out, specified by its properties (no ZooKeeper involved)."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st
from rebalanser.assignment import assign
from rebalanser.orphans import any_orphaned, hand_out, orphaned

member_ids = st.lists(st.sampled_from([f"m{i}" for i in range(8)]), min_size=1, max_size=8, unique=True)
resource_names = st.lists(st.sampled_from([f"r{i}" for i in range(40)]), max_size=40, unique=True)


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[str], list[str], dict[str, str], list[str]]:
    members = draw(member_ids)
    resources = draw(resource_names)
    former = draw(st.lists(st.sampled_from([f"m{i}" for i in range(10)]), min_size=1, max_size=10))
    current = {r: draw(st.sampled_from(former)) for r in resources if draw(st.booleans())}
    gone = sorted(set(former) - set(members))
    reserved = draw(st.lists(st.sampled_from(gone), unique=True)) if gone else []
    return members, resources, current, reserved


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_every_resource_gets_an_owner_and_no_live_or_reserved_member_loses_one(
    scenario: tuple[list[str], list[str], dict[str, str], list[str]],
) -> None:
    members, resources, current, reserved = scenario
    plan = hand_out(members, resources, current, reserved)
    assert set(plan.owners) == set(resources)
    for resource, owner in current.items():
        if owner in members or owner in reserved:
            assert plan.owners[resource] == owner, f"{resource} was taken from {owner}"
    handed = [r for r in resources if r not in current or current[r] not in set(members) | set(reserved)]
    assert all(plan.owners[r] in members for r in handed), "an orphan went to a member that is not live"
    assert plan.moved == 0


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_orphans_fill_the_least_loaded_first(scenario: tuple[list[str], list[str], dict[str, str], list[str]]) -> None:
    """Whoever received an orphan ends with at most one more than the least loaded live member: the
    hand-out is as balanced as it can be without taking anything away."""
    members, resources, current, reserved = scenario
    plan = hand_out(members, resources, current, reserved)
    load = {m: sum(1 for o in plan.owners.values() if o == m) for m in members}
    receivers = {plan.owners[r] for r in orphaned(resources, current, members, reserved)}
    for member in receivers:
        assert load[member] <= min(load.values()) + 1, f"{member} got orphans while another had fewer: {load}"


@settings(max_examples=200, deadline=None)
@given(scenarios())
def test_a_balanced_start_stays_balanced_when_a_member_departs(
    scenario: tuple[list[str], list[str], dict[str, str], list[str]],
) -> None:
    """From a balanced assignment, handing out one departed member's resources ends balanced (loads
    within one), so the full rebalance after the interval moves nothing."""
    members, resources, _, _ = scenario
    if len(members) < 2:
        return
    everyone = members
    balanced = assign(everyone, resources, {}).owners
    survivors = everyone[1:]
    plan = hand_out(survivors, resources, balanced)
    loads = [sum(1 for o in plan.owners.values() if o == m) for m in survivors]
    assert max(loads) - min(loads) <= 1, loads
    assert assign(survivors, resources, plan.owners).moved == 0


def test_deterministic_whatever_the_input_order() -> None:
    members = [f"m{i}" for i in range(5)]
    resources = [f"r{i}" for i in range(50)]
    current = {r: f"m{i % 7}" for i, r in enumerate(resources)}
    expected = hand_out(members, resources, current).owners
    for seed in range(5):
        rng = random.Random(seed)
        shuffled_members, shuffled_resources = members[:], resources[:]
        rng.shuffle(shuffled_members)
        rng.shuffle(shuffled_resources)
        assert hand_out(shuffled_members, shuffled_resources, dict(reversed(current.items()))).owners == expected


def test_orphaned_lists_unowned_and_departed_members_resources_but_not_reserved_ones() -> None:
    current = {"a": "m1", "b": "gone", "c": "away"}
    assert orphaned(["a", "b", "c", "d"], current, live=["m1"], reserved=["away"]) == ["b", "d"]
    assert orphaned(["a"], current, live=["m1"]) == []


def test_no_live_member_assigns_nothing() -> None:
    assert hand_out([], ["a", "b"], {"a": "gone"}).owners == {}


def test_a_new_member_waiting_for_the_interval_takes_the_orphans_first() -> None:
    """A member joined and holds nothing yet (its share waits for the interval); another dies: the
    newcomer, least loaded, takes the dead member's resources, and nobody else's move."""
    current = {f"r{i}": ("a" if i < 3 else "b" if i < 6 else "dead") for i in range(9)}
    plan = hand_out(["a", "b", "new"], list(current), current)
    assert {r for r, m in plan.owners.items() if m == "new"} == {"r6", "r7", "r8"}
    assert all(plan.owners[f"r{i}"] == current[f"r{i}"] for i in range(6))


@settings(max_examples=200, deadline=None)
@given(scenarios())
def test_any_orphaned_agrees_with_the_list(scenario: tuple[list[str], list[str], dict[str, str], list[str]]) -> None:
    members, resources, current, reserved = scenario
    found = orphaned(resources, current, members, reserved)
    keepers = set(members) | set(reserved)
    assert any_orphaned(resources, current, keepers) == bool(found)
    assert not any_orphaned(resources, current, keepers, known=set(found))


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=1, max_value=8), st.integers(min_value=0, max_value=120))
def test_a_rollout_moves_each_resource_at_most_twice_and_never_stops_a_live_member(pods: int, count: int) -> None:
    """A rolling restart inside one long interval: each new pod joins (it waits for the interval, so it
    gets nothing), then an old pod leaves and its resources are handed out at once. No live member
    ever loses a resource to a hand-out; the owed rebalance at the end balances the new pods; a
    resource changes owner at most twice (its old pod's departure, then the final rebalance)."""
    resources = [f"r{i}" for i in range(count)]
    old = [f"old{i}" for i in range(pods)]
    owners = assign(old, resources, {}).owners
    moves = dict.fromkeys(resources, 0)
    live = list(old)
    for i in range(pods):
        live.append(f"new{i}")
        live.remove(old[i])
        after = hand_out(live, resources, owners).owners
        for r, m in owners.items():
            if m in live:
                assert after[r] == m, f"{r} was taken from live member {m}"
        for r in resources:
            moves[r] += after[r] != owners[r]
        owners = after
    final = assign(live, resources, owners).owners
    for r in resources:
        moves[r] += final[r] != owners[r]
    loads = [sum(1 for m in final.values() if m == p) for p in live]
    assert max(loads) - min(loads) <= 1
    assert max(moves.values(), default=0) <= 2, moves
