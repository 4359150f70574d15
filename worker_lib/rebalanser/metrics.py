"""Prometheus metrics of the worker library (served when the application exposes them, e.g.
``rebalanser worker --metrics-port``)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

REBALANCES = Counter("rebalanser_rebalances_total", "Rebalances completed by this process as coordinator")
MOVED = Counter(
    "rebalanser_moved_resources_total", "Resources given to another owner (live or departed) by those rebalances"
)
REBALANCE_SECONDS = Histogram(
    "rebalanser_rebalance_seconds", "Coordinator time per rebalance",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
OWNED = Gauge("rebalanser_owned_resources", "Resources this member currently works on")
COORDINATOR = Gauge("rebalanser_is_coordinator", "1 while this member is the coordinator")
SESSION_EVENTS = Counter("rebalanser_session_events_total", "ZooKeeper session transitions", ["state"])
LEASE_EXPIRIES = Counter("rebalanser_lease_expiries_total", "Times the self-fencing lease ran out")
BAD_DATA = Counter(
    "rebalanser_bad_data_total", "Values read from ZooKeeper that were rejected (and ignored), by record kind",
    ["kind"],
)
