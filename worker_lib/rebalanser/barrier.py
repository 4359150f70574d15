"""The Global Barrier's rules that need no ZooKeeper (docs/protocol.md, "Rules of the barrier")."""

from __future__ import annotations

from collections.abc import Collection, Mapping

from rebalanser.wire import BarrierRecord, Phase


def stop_binds(record: BarrierRecord, current_epoch: int) -> bool:
    """A stop order binds a member only when the coordinator in office gave it: its epoch is the
    current one (0: there is no ``G/epoch``, so no coordinator in office)."""
    return record.phase is Phase.STOP and current_epoch > 0 and record.epoch == current_epoch


def moves_nothing(written: Mapping[str, tuple[str, ...]], desired: Mapping[str, tuple[str, ...]]) -> bool:
    """Every member's stored assignment already is the plan's, and no departed member's is left."""
    return written.keys() == desired.keys() and all(written[n] == rs for n, rs in desired.items())


def takes_nothing_away(
    written: Mapping[str, tuple[str, ...]], desired: Mapping[str, tuple[str, ...]], live: Collection[str]
) -> bool:
    """No live member loses a resource: each live member node keeps at least every resource stored for
    it. Only the resources of departed member nodes (in ``written``, not ``live``) and resources nobody
    holds may be handed out, and a resource deleted from the group counts as taken away."""
    for node, held in written.items():
        if node not in live and node not in desired:
            continue  # departed: its session is gone, or its claims still guard what it may work on
        if not set(held) <= set(desired.get(node, ())):
            return False
    return True
