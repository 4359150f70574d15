"""The start-up window: when the coordinator makes the first assignment of a group that has none.

Workers of a new group rarely join at one instant: pods start over a second or more. Assigning at
once hands every resource to the few members already there; each claims what it got (ZooKeeper
writes, ``on_assigned``), and the next rebalance a moment later moves almost all of it again. So the
first assignment of a group with nothing assigned waits until membership has gone quiet: until no
member has joined for ``quiet`` seconds, and never longer than ``max_wait`` after the window opened
(a steady trickle of joins cannot hold it back for good). Later rebalances never wait for it.

Pure: times are monotonic seconds the coordinator passes in.
"""

from __future__ import annotations


def window_end(opened: float, last_join: float, quiet: float, max_wait: float) -> float:
    """The instant the first assignment may be made: ``quiet`` after the later of the window's
    opening and the last membership change, capped at ``max_wait`` after the opening. With
    ``quiet`` 0 the window is closed at once (assign immediately)."""
    if quiet <= 0:
        return opened
    return min(max(opened, last_join) + quiet, opened + max(quiet, max_wait))
