"""The barrier's pure rules: which stop orders bind a member, and which rounds need not run."""

from __future__ import annotations

from rebalanser.barrier import moves_nothing, stop_binds, takes_nothing_away
from rebalanser.wire import BarrierRecord, Phase


def test_a_stop_order_binds_only_under_the_current_epoch() -> None:
    assert stop_binds(BarrierRecord(Phase.STOP, 4, epoch=3), current_epoch=3)
    assert not stop_binds(BarrierRecord(Phase.STOP, 4, epoch=2), current_epoch=3), "a replaced coordinator's"
    assert not stop_binds(BarrierRecord(Phase.STOP, 1), current_epoch=3), "written by hand, without an epoch"
    assert not stop_binds(BarrierRecord(Phase.STOP, 1), current_epoch=0), "no G/epoch: no coordinator in office"
    assert not stop_binds(BarrierRecord(Phase.ASSIGNED, 4, epoch=3), current_epoch=3)


def test_a_round_moves_nothing_only_when_every_stored_assignment_is_the_plan() -> None:
    written = {"m1": ("a", "b"), "m2": ("c",)}
    assert moves_nothing(written, {"m1": ("a", "b"), "m2": ("c",)})
    assert not moves_nothing(written, {"m1": ("a", "b"), "m2": ("c", "d")}), "a resource added"
    assert not moves_nothing(written, {"m1": ("a", "b", "c")}), "a departed member's assignment is left"
    assert not moves_nothing(written, {**written, "m3": ()}), "a member that joined has none yet"
    assert not moves_nothing({**written, "m2": ("\0corrupt",)}, {"m1": ("a", "b"), "m2": ("c",)})


def test_a_round_takes_nothing_away_only_when_every_live_member_keeps_what_it_holds() -> None:
    written = {"m1": ("a", "b"), "m2": ("c",), "gone": ("d", "e")}
    live = {"m1", "m2", "m3"}
    assert takes_nothing_away(written, {"m1": ("a", "b"), "m2": ("c",), "m3": ()}, live), "an idle member joined"
    assert takes_nothing_away(written, {"m1": ("a", "b", "d"), "m2": ("c", "e")}, {"m1", "m2"}), \
        "a departed member's resources handed out"
    assert takes_nothing_away(written, {"m1": ("a", "b"), "m2": ("c", "new")}, live), "a new resource"
    assert not takes_nothing_away(written, {"m1": ("a",), "m2": ("c",), "m3": ("b",)}, live), "b moves to m3"
    assert not takes_nothing_away(written, {"m1": ("a",), "m2": ("c",)}, live), "b was deleted from the group"
    assert not takes_nothing_away({"m1": ("\0corrupt",)}, {"m1": ("a",)}, {"m1"}), "unreadable: a full round"
    dup = {"m1": ("a",), "m1-dup": ("b",)}
    assert not takes_nothing_away(dup, {"m1": ("a", "b")}, {"m1", "m1-dup"}), \
        "a listed member node left out of the plan (a duplicate id) still loses what it holds"
