"""A member's seat in the election: the coordinator instance it runs while its node is the lowest,
else a follower watching its predecessor; and the role and epoch it reports (``on_role``). Runs on the
member's thread only; reports of a coordinator instance arrive as events posted to the member's loop
and name the instance, so one from an instance that has been replaced or stopped is ignored.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from kazoo.client import KazooClient

from rebalanser import member_events as ev
from rebalanser.coordinator import Coordinator
from rebalanser.membership import Roster, watch_predecessor
from rebalanser.options import Options
from rebalanser.paths import GroupPaths, MemberNode

log = logging.getLogger("rebalanser.client")  # the member's log, as before this was split out


class Seat:
    def __init__(self, paths: GroupPaths, options: Options, zk: Callable[[], KazooClient],
                 post: Callable[[ev.Event], None], on_role: Callable[[str, int], None]) -> None:
        self.paths, self.options = paths, options
        self._zk, self._post, self._on_role = zk, post, on_role
        self.role = "none"
        self.epoch = 0
        self._epoch_seen = 0  # the highest epoch this member has known: a floor for its own next term
        self.coordinator: Coordinator | None = None
        self._seq = 0  # which coordinator instance is current

    def read_epoch(self) -> int:
        stat = self._zk().exists(self.paths.epoch)
        return int(stat.version) if stat else 0

    def lead(self, me: MemberNode, roster: Roster) -> None:
        """Our node is the lowest: run a coordinator instance (unless one runs already)."""
        if self.coordinator is not None and self.coordinator.active:
            return
        self._seq += 1
        seq = self._seq
        self.coordinator = Coordinator(
            self._zk(), self.paths, self.options, me,
            on_epoch=lambda epoch: self._post(ev.CoordinatorEpoch(seq, epoch)),
            on_deposed=lambda reason: self._post(ev.Deposed(seq, reason)),
            on_bad_data=lambda error: self._post(ev.BadData(error)),
            epoch_floor=self._epoch_seen,
            known_members=roster.known(),
        )
        self.coordinator.start()

    def follow(self, before: MemberNode) -> None:
        """``before`` is our predecessor: we are a follower, watching it."""
        if self.coordinator is not None:
            self.stop()
        if self.role != "follower":
            self._set_role("follower", self.read_epoch())
        if not watch_predecessor(self._zk(), self.paths, before, lambda: self._post(ev.ElectionChanged())):
            self._post(ev.ElectionChanged())

    def in_office(self, seq: int, epoch: int) -> None:
        """Coordinator instance ``seq`` took office under ``epoch``."""
        if not self._current(seq):
            log.info("ignoring the epoch %d of a coordinator instance that was stopped", epoch)
            return
        self.options.metrics.coordinator(True)
        self._set_role("coordinator", epoch)

    def deposed(self, seq: int, reason: str) -> bool:
        """Coordinator instance ``seq`` lost office; True if it was the current one (elect again)."""
        if not self._current(seq):
            return False
        log.warning("no longer coordinator: %s", reason)
        self.stop()
        self._set_role("follower", self.read_epoch())
        return True

    def stop(self) -> None:
        """Stops the coordinator instance we run, if any."""
        if self.coordinator is not None:
            self.coordinator.stop(wait=False)
            self.coordinator = None
            self.options.metrics.coordinator(False)

    def _current(self, seq: int) -> bool:
        return self.coordinator is not None and seq == self._seq

    def _set_role(self, role: str, epoch: int) -> None:
        if (role, epoch) == (self.role, self.epoch):
            return
        self.role, self.epoch = role, epoch
        self._epoch_seen = max(self._epoch_seen, epoch)
        self._on_role(role, epoch)
