"""What a member reports about itself, through the :class:`Metrics` given in ``Options.metrics``.

The library keeps no series of its own: the default, :class:`NoMetrics`, drops every report, and
:class:`rebalanser.prometheus.PrometheusMetrics` (the ``rebalanser[metrics]`` extra) turns them into
Prometheus series in a registry the application chooses, so several clients in one process each
report their own series.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class Metrics(Protocol):
    """Receives a member's reports. Called on library threads: keep each call quick and never raise."""

    def rebalanced(self, moved: int, seconds: float) -> None:
        """This member, as coordinator, completed a rebalance that gave ``moved`` resources to another owner."""

    def owned(self, count: int) -> None:
        """This member now works on ``count`` resources."""

    def coordinator(self, active: bool) -> None:
        """This member became (True) or stopped being (False) the coordinator."""

    def session_event(self, state: str) -> None:
        """The ZooKeeper session changed state (``connected``, ``suspended``, ``lost``, ...)."""

    def lease_expired(self) -> None:
        """The self-fencing lease ran out: the member stopped all work."""

    def bad_data(self, kind: str) -> None:
        """A value read from ZooKeeper was rejected (and ignored); ``kind`` names the record."""


class NoMetrics:
    """The default :class:`Metrics`: reports go nowhere."""

    def rebalanced(self, moved: int, seconds: float) -> None:
        pass

    def owned(self, count: int) -> None:
        pass

    def coordinator(self, active: bool) -> None:
        pass

    def session_event(self, state: str) -> None:
        pass

    def lease_expired(self) -> None:
        pass

    def bad_data(self, kind: str) -> None:
        pass
