"""The assignment function, specified by its properties (no ZooKeeper involved)."""

from __future__ import annotations

import itertools
import random

from hypothesis import given, settings
from hypothesis import strategies as st
from rebalanser.assignment import Plan, SortedNames, assign, sorted_names

member_ids = st.lists(st.sampled_from([f"m{i}" for i in range(8)]), min_size=1, max_size=8, unique=True)
resource_names = st.lists(st.sampled_from([f"r{i}" for i in range(40)]), max_size=40, unique=True)


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[str], list[str], dict[str, str]]:
    members = draw(member_ids)
    resources = draw(resource_names)
    former = draw(st.lists(st.sampled_from([f"m{i}" for i in range(10)]), min_size=1, max_size=10))
    current = {r: draw(st.sampled_from(former)) for r in resources if draw(st.booleans())}
    return members, resources, current


def minimum_movement(members: list[str], resources: list[str], current: dict[str, str]) -> int:
    """Brute force over every choice of which members may hold q+1: the least forced movement."""
    held = {m: sum(1 for r in resources if current.get(r) == m) for m in members}
    base, extra = divmod(len(resources), len(members))
    best = None
    for bigger in itertools.combinations(members, extra):
        caps = {m: base + (m in bigger) for m in members}
        moved = sum(max(0, held[m] - caps[m]) for m in members)
        best = moved if best is None else min(best, moved)
    return best or 0


@given(scenarios())
def test_every_resource_gets_exactly_one_member(s: tuple[list[str], list[str], dict[str, str]]) -> None:
    members, resources, current = s
    plan = assign(members, resources, current)
    assert set(plan.owners) == set(resources)
    assert set(plan.owners.values()) <= set(members)


@given(scenarios())
def test_loads_differ_by_at_most_one(s: tuple[list[str], list[str], dict[str, str]]) -> None:
    members, resources, current = s
    loads = [len(v) for v in assign(members, resources, current).by_member(members).values()]
    assert max(loads) - min(loads) <= 1


@given(scenarios())
def test_movement_is_exactly_the_minimum(s: tuple[list[str], list[str], dict[str, str]]) -> None:
    members, resources, current = s
    plan = assign(members, resources, current)
    changed = sum(1 for r in resources if current.get(r) in members and plan.owners[r] != current[r])
    assert changed == plan.moved == minimum_movement(members, resources, current)


@given(scenarios(), st.randoms())
def test_result_does_not_depend_on_input_order(
    s: tuple[list[str], list[str], dict[str, str]], rnd: random.Random
) -> None:
    members, resources, current = s
    shuffled_m, shuffled_r = members[:], resources[:]
    rnd.shuffle(shuffled_m)
    rnd.shuffle(shuffled_r)
    assert assign(members, resources, current).owners == assign(shuffled_m, shuffled_r, current).owners


def test_a_join_moves_exactly_the_new_members_share() -> None:
    resources = [f"r{i}" for i in range(1000)]
    members = [f"m{i}" for i in range(10)]
    before = assign(members, resources, {}).owners
    after = assign([*members, "m10"], resources, before)
    assert after.moved == len(after.by_member(["m10"])["m10"]) == 90


def test_a_leave_moves_exactly_the_leavers_resources() -> None:
    resources = [f"r{i}" for i in range(1000)]
    members = [f"m{i}" for i in range(10)]
    before = assign(members, resources, {}).owners
    after = assign(members[1:], resources, before)
    changed = {r for r in resources if after.owners[r] != before[r]}
    assert changed == {r for r, m in before.items() if m == "m0"}
    assert after.moved == 0  # the departed member's resources were orphans, not moves


def test_new_resources_go_to_the_least_loaded_without_moving_others() -> None:
    before = assign(["a", "b"], ["r1", "r2", "r3"], {}).owners
    after = assign(["a", "b"], ["r1", "r2", "r3", "r4"], before)
    assert after.moved == 0
    assert all(after.owners[r] == before[r] for r in before)


def test_reserved_member_keeps_its_resources_and_gets_nothing_new() -> None:
    before = assign(["a", "b", "c"], [f"r{i}" for i in range(9)], {}).owners
    after = assign(["a", "b"], [f"r{i}" for i in range(10)], before, reserved=["c"])
    c_before = sorted(r for r, m in before.items() if m == "c")
    assert sorted(r for r, m in after.owners.items() if m == "c") == c_before
    assert after.moved == 0


def test_no_members_assigns_nothing() -> None:
    assert assign([], ["r1"], {}).owners == {}


@settings(deadline=None, max_examples=3)
@given(st.integers(min_value=1, max_value=3))
def test_hundred_thousand_resources_are_balanced(seed: int) -> None:
    resources = [f"res-{i}" for i in range(100_000)]
    members = [f"m{i}" for i in range(200 + seed)]
    plan = assign(members, resources, {})
    loads = [len(v) for v in plan.by_member(members).values()]
    assert max(loads) - min(loads) <= 1


@given(st.lists(st.sampled_from([f"r{i}" for i in range(30)]), max_size=40))
def test_sorted_names_are_sorted_and_unique_whatever_the_input(names: list[str]) -> None:
    assert sorted_names(names) == sorted(set(names))
    assert sorted_names(tuple(names)) == sorted(set(names))


def test_an_already_sorted_list_is_taken_as_it_is() -> None:
    names = [f"r{i:05d}" for i in range(1000)]
    assert sorted_names(names) is names
    assert sorted_names(["a", "a", "b"]) == ["a", "b"]  # not strictly ascending: deduplicated


@given(scenarios())
@settings(max_examples=50)
def test_sorted_and_shuffled_resources_give_the_same_plan(s: tuple[list[str], list[str], dict[str, str]]) -> None:
    members, resources, current = s
    shuffled = resources + resources[:3]
    random.Random(7).shuffle(shuffled)
    assert assign(members, sorted(set(resources)), current) == assign(members, shuffled, current)


@given(scenarios(), st.lists(st.sampled_from([f"m{i}" for i in range(10)]), max_size=4))
@settings(max_examples=200)
def test_each_members_list_is_what_the_owners_say(s: tuple[list[str], list[str], dict[str, str]],
                                                   reserved: list[str]) -> None:
    """The per-member lists a plan carries (what the coordinator writes) agree with its owners, reserved
    members included; a plan rebuilt from its owners alone groups them the same."""
    members, resources, current = s
    plan = assign(members, resources, current, reserved)
    everyone = sorted(set(members) | set(reserved))
    lists = plan.by_member(everyone)
    assert lists == Plan(plan.owners, plan.moved).by_member(everyone)
    assert {r: m for m, rs in lists.items() for r in rs} == plan.owners
    assert all(rs == sorted(rs) for rs in lists.values())
    assert set(plan.by_member(members)) >= set(members)


def test_a_listing_marked_sorted_is_not_compared_again() -> None:
    names = SortedNames(f"r{i:05d}" for i in range(1000))
    assert sorted_names(names) is names
    assert assign(["a", "b"], names, {}).by_member(["a", "b"]) == {"a": names[:500], "b": names[500:]}
