"""Prometheus series for a member's reports (needs the ``rebalanser[metrics]`` extra).

Usage::

    from prometheus_client import CollectorRegistry, start_http_server
    from rebalanser.prometheus import PrometheusMetrics

    registry = CollectorRegistry()
    options = Options(hosts, group, metrics=PrometheusMetrics(registry))
    start_http_server(9100, registry=registry)

Every :class:`PrometheusMetrics` creates its own series in the registry it is given (nothing is
registered at import time), so two clients in one process either use two registries, or share one
and tell their series apart by ``labels`` (for example ``{"group": "orders"}``): then the first
creates the series and each adds its own labelled children.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

REBALANCE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class PrometheusMetrics:
    """A :class:`rebalanser.metrics.Metrics` that keeps its series in ``registry``.

    ``labels`` are added to every series of this member (the same label names for every member that
    shares the registry).
    """

    def __init__(self, registry: CollectorRegistry, labels: Mapping[str, str] | None = None) -> None:
        self.registry = registry
        self._labels = dict(labels or {})
        names = tuple(self._labels)
        series = _series_of(registry, names)
        self._rebalances = series.rebalances.labels(**self._labels) if names else series.rebalances
        self._moved = series.moved.labels(**self._labels) if names else series.moved
        self._rebalance_seconds = series.seconds.labels(**self._labels) if names else series.seconds
        self._owned = series.owned.labels(**self._labels) if names else series.owned
        self._coordinator = series.coordinator.labels(**self._labels) if names else series.coordinator
        self._lease_expiries = series.lease_expiries.labels(**self._labels) if names else series.lease_expiries
        self._session_events = series.session_events
        self._bad_data = series.bad_data

    def rebalanced(self, moved: int, seconds: float) -> None:
        self._rebalances.inc()
        self._moved.inc(moved)
        self._rebalance_seconds.observe(seconds)

    def owned(self, count: int) -> None:
        self._owned.set(count)

    def coordinator(self, active: bool) -> None:
        self._coordinator.set(1 if active else 0)

    def session_event(self, state: str) -> None:
        self._session_events.labels(**self._labels, state=state).inc()

    def lease_expired(self) -> None:
        self._lease_expiries.inc()

    def bad_data(self, kind: str) -> None:
        self._bad_data.labels(**self._labels, kind=kind).inc()


class _Series:
    """The metric families in one registry (created once per registry)."""

    def __init__(self, registry: CollectorRegistry, names: tuple[str, ...]) -> None:
        self.names = names
        self.rebalances = Counter(
            "rebalanser_rebalances_total", "Rebalances completed by this member as coordinator", names,
            registry=registry,
        )
        self.moved = Counter(
            "rebalanser_moved_resources_total",
            "Resources given to another owner (live or departed) by those rebalances", names, registry=registry,
        )
        self.seconds = Histogram(
            "rebalanser_rebalance_seconds", "Coordinator time per rebalance", names, registry=registry,
            buckets=REBALANCE_BUCKETS,
        )
        self.owned = Gauge("rebalanser_owned_resources", "Resources this member currently works on", names,
                           registry=registry)
        self.coordinator = Gauge("rebalanser_is_coordinator", "1 while this member is the coordinator", names,
                                 registry=registry)
        self.lease_expiries = Counter(
            "rebalanser_lease_expiries_total", "Times the self-fencing lease ran out", names, registry=registry
        )
        self.session_events = Counter(
            "rebalanser_session_events_total", "ZooKeeper session transitions", (*names, "state"), registry=registry
        )
        self.bad_data = Counter(
            "rebalanser_bad_data_total", "Values read from ZooKeeper that were rejected (and ignored), by record kind",
            (*names, "kind"), registry=registry,
        )


# Which families a registry already holds; a registry that is dropped drops its entry.
_by_registry: weakref.WeakKeyDictionary[CollectorRegistry, _Series] = weakref.WeakKeyDictionary()


def _series_of(registry: CollectorRegistry, names: tuple[str, ...]) -> _Series:
    """The families of ``registry``: created by the first member that uses it, shared by the next ones."""
    series = _by_registry.get(registry)
    if series is None:
        series = _by_registry[registry] = _Series(registry, names)
        return series
    if series.names != names:
        raise ValueError(f"this registry's rebalanser series have labels {list(series.names)}, not {list(names)}")
    if not names:
        raise ValueError("two members share a registry: give each one labels (e.g. {'member': ...}) to tell them apart")
    return series
