"""The member's per-resource state machine on its own, without ZooKeeper: each transition's new
table and effects, and invariants over random runs (claims won or lost, releases that fail)."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st
from rebalanser import resource_state as rs
from rebalanser.resource_state import After, Claim, Phase, Release, StartCallback, StopCallback

NODE = "m-0000000001"


def owning(*names: str, token: int = 7) -> rs.Resources:
    table, effects = rs.assign(rs.EMPTY, set(names), set())
    assert effects == [Claim(frozenset(names))]
    table, effects = rs.claimed(table, dict.fromkeys(names, token), 1, NODE)
    assert effects == [StartCallback(dict.fromkeys(sorted(names), token))]
    return table


def test_an_assignment_makes_its_resources_wanted_and_claims_them() -> None:
    table, effects = rs.assign(rs.EMPTY, {"a", "b"}, set())
    assert table.phases() == {"a": Phase.WANTED, "b": Phase.WANTED}
    assert effects == [Claim(frozenset({"a", "b"}))]


def test_only_claims_won_become_owned_and_are_started() -> None:
    table, _ = rs.assign(rs.EMPTY, {"a", "b"}, set())
    table, effects = rs.claimed(table, {"a": 5}, 9, NODE)
    assert table.phases() == {"a": Phase.OWNED, "b": Phase.WANTED}
    assert table.owned["a"] == (5, 9, NODE)
    assert effects == [StartCallback({"a": 5})]


def test_a_claim_won_for_a_resource_no_longer_wanted_does_not_make_it_owned() -> None:
    table, effects = rs.claimed(rs.EMPTY, {"x": 5}, 9, NODE)
    assert table == rs.EMPTY and effects == []


def test_a_resource_taken_away_is_stopped_then_released_and_the_rest_is_kept() -> None:
    table = owning("a", "b")
    table, effects = rs.assign(table, {"b", "c"}, {"a", "b"})
    assert table.phases() == {"a": Phase.STOPPING, "b": Phase.OWNED, "c": Phase.WANTED}
    assert effects == [StopCallback(frozenset({"a"})), Release(frozenset({"a"})), Claim(frozenset({"c"}))]
    table = rs.stopped(table, {"a"})
    assert table.phase("a") is Phase.RELEASING
    assert rs.released(table, {"a"}).phase("a") is None


def test_claims_held_without_work_and_no_longer_assigned_are_released() -> None:
    table, effects = rs.assign(rs.EMPTY, {"a"}, {"a", "k"})
    assert table.phases() == {"a": Phase.WANTED, "k": Phase.RELEASING}
    assert effects == [Release(frozenset({"k"})), Claim(frozenset({"a"}))]


def test_a_release_that_did_not_go_through_is_pending_until_it_does() -> None:
    table, _ = rs.assign(rs.EMPTY, set(), {"k"})
    assert rs.pending_release(table) == Release(frozenset({"k"}))
    assert rs.pending_release(rs.released(table, {"k"})) is None


def test_a_resource_waiting_for_release_that_is_assigned_again_is_wanted() -> None:
    table, _ = rs.assign(rs.EMPTY, set(), {"k"})
    table, effects = rs.assign(table, {"k"}, {"k"})
    assert table.phases() == {"k": Phase.WANTED}
    assert effects == [Claim(frozenset({"k"}))]


def test_when_the_lease_runs_out_owned_resources_stop_and_are_wanted_again() -> None:
    table = owning("a")
    table, effects = rs.stop_all(table, After.WANTED)
    assert table.phases() == {"a": Phase.STOPPING}
    assert effects == [StopCallback(frozenset({"a"}))]
    assert rs.stopped(table, {"a"}).phases() == {"a": Phase.WANTED}


def test_a_barrier_stop_keeps_the_claims_and_forgets_the_assignment() -> None:
    table, _ = rs.assign(owning("a"), {"a", "w"}, {"a"})
    table, effects = rs.stop_all(table, After.NOTHING)
    assert effects == [StopCallback(frozenset({"a"}))]
    assert rs.stopped(table, {"a"}) == rs.EMPTY


def test_leaving_stops_everything_and_releases_every_claim() -> None:
    table, _ = rs.assign(owning("a"), {"a"}, {"a", "k"})
    table, effects = rs.stop_all(table, After.RELEASING)
    assert effects == [StopCallback(frozenset({"a"})), Release(frozenset({"a", "k"}))]
    assert rs.stopped(table, {"a"}).phases() == {"a": Phase.RELEASING, "k": Phase.RELEASING}


def test_a_lost_session_stops_everything_and_leaves_nothing_to_release() -> None:
    table, _ = rs.assign(owning("a"), {"a", "w"}, {"a", "k"})
    table, effects = rs.session_ended(table)
    assert effects == [StopCallback(frozenset({"a"}))]
    assert rs.stopped(table, {"a"}) == rs.EMPTY


def test_a_claim_deleted_by_someone_else_stops_its_resource_which_is_wanted_again() -> None:
    table = owning("a", "b")
    table, effects = rs.claims_lost(table, {"a"})
    assert table.phases() == {"a": Phase.STOPPING, "b": Phase.OWNED}
    assert effects == [StopCallback(frozenset({"a"}))]
    assert rs.stopped(table, {"a"}).phases() == {"a": Phase.WANTED, "b": Phase.OWNED}


def test_a_lost_claim_is_not_released_any_more() -> None:
    table, _ = rs.assign(owning("a", "b"), set(), {"a", "b"})  # both stopping, then to be released
    table, _ = rs.claims_lost(table, {"a"})
    table = rs.stopped(table, {"a", "b"})
    assert table.phases() == {"b": Phase.RELEASING}
    table, _ = rs.claims_lost(table, {"b"})
    assert table == rs.EMPTY


def test_a_start_called_off_makes_the_resource_wanted_again_with_no_stop_callback() -> None:
    table = owning("a", "b")
    table = rs.not_started(table, {"a", "z"})
    assert table.phases() == {"a": Phase.WANTED, "b": Phase.OWNED}
    assert rs.claim_targets(table, None) == Claim(frozenset({"a"}))


def test_claim_targets_are_the_wanted_resources_or_those_of_them_just_released() -> None:
    table, _ = rs.assign(rs.EMPTY, {"a", "b"}, set())
    assert rs.claim_targets(table, None) == Claim(frozenset({"a", "b"}))
    assert rs.claim_targets(table, {"b", "z"}) == Claim(frozenset({"b"}))


# -- invariants over random runs ----------------------------------------------------------------

NAMES = st.sets(st.sampled_from("abcdefgh"))


@dataclass
class Member:
    """Executes effects like the member loop does, against a simulated set of claims, checking
    each effect against the table at the moment it runs."""

    draw: st.DataObject
    table: rs.Resources = rs.EMPTY
    claims: set[str] = field(default_factory=set)  # what our session holds in ZooKeeper
    desired: frozenset[str] = frozenset()
    token: int = 0
    started: set[str] = field(default_factory=set)  # on_assigned called, on_revoked not yet

    def step(self, step: rs.Step) -> None:
        self.table, effects = step
        for effect in effects:
            self.execute(effect)

    def execute(self, effect: rs.Effect) -> None:
        match effect:
            case Claim(names):
                won = self.draw.draw(st.sets(st.sampled_from(sorted(names))), label="won") if names else set()
                self.claims |= won
                self.token += 1
                before = self.table
                self.step(rs.claimed(self.table, dict.fromkeys(won, self.token), 1, NODE))
                for name in won:
                    assert before.phase(name) is Phase.WANTED, "owned without having been wanted"
            case StartCallback(tokens):
                for name in tokens:
                    assert self.table.phase(name) is Phase.OWNED and name in self.claims
                    assert name not in self.started, "started twice without a stop in between"
                self.started |= set(tokens)
            case StopCallback(names):
                for name in names:
                    assert self.table.phase(name) is Phase.STOPPING, "on_revoked while still owned"
                    assert name in self.started
                self.started -= names
                self.table = rs.stopped(self.table, names)
            case Release(names):
                assert not names & self.table.owned.keys(), "releasing a claim still worked on"
                assert not names & self.table.stopping.keys(), "releasing before the stop returned"
                if self.draw.draw(st.booleans(), label="release goes through"):
                    self.claims -= names
                    self.table = rs.released(self.table, names)


OPS = st.one_of(
    st.tuples(st.just("assign"), NAMES),
    st.tuples(st.just("retry"), st.none() | NAMES),
    st.tuples(st.just("stop_all"), st.sampled_from(list(After))),
    st.tuples(st.just("session_ended"), st.none()),
    st.tuples(st.just("resync"), st.none()),
)


@settings(max_examples=300, deadline=None)
@given(st.data(), st.lists(OPS, max_size=25))
def test_invariants_hold_over_any_run(data: st.DataObject, ops: list[tuple[str, object]]) -> None:
    member = Member(data)
    for op, arg in ops:
        if op == "assign":
            assert isinstance(arg, set)
            member.desired = frozenset(arg)
            member.step(rs.assign(member.table, arg, set(member.claims)))
        elif op == "retry":
            assert arg is None or isinstance(arg, set)
            member.execute(rs.claim_targets(member.table, arg))
        elif op == "stop_all":
            assert isinstance(arg, After)
            member.step(rs.stop_all(member.table, arg))
            if arg is not After.WANTED:
                member.desired = frozenset()
        elif op == "session_ended":
            member.step(rs.session_ended(member.table))
            member.claims.clear()
            member.desired = frozenset()
        else:
            pending = rs.pending_release(member.table)
            if pending is not None:
                member.execute(pending)

        table = member.table
        phases = table.phases()
        sizes = len(table.wanted) + len(table.owned) + len(table.stopping) + len(table.releasing)
        assert sizes == len(phases), "a resource is in two phases at once"
        assert not table.stopping, "a stop callback's resources left stopping after it returned"
        assert table.owned.keys() == member.started, "owned is exactly what was started and not stopped"
        assert table.owned.keys() <= member.claims, "owned without holding the claim"
        assert table.owned.keys() | table.wanted <= member.desired, "working on or claiming an unassigned resource"
        if op == "assign":
            assert not table.releasing & member.desired, "assigned again but still waiting for release"
