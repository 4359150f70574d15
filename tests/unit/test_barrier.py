"""The barrier's pure rules: which stop orders bind a member, and which rounds need not run."""

from __future__ import annotations

from rebalanser.barrier import moves_nothing, stop_binds
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
