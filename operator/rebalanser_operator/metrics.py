"""Prometheus metrics of the operator (``--metrics-port``; ``GET /metrics``).

Every metric lives in the :class:`Metrics` object's own registry (no global state), so tests can
create as many as they like. Per-group series are labelled ``namespace``/``name`` and removed when
the ResourceGroup goes away.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from rebalanser_operator.spec.models import Phase

_GROUP = ("namespace", "name")


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.reconciles = Counter(
            "rebalanser_operator_reconciles_total", "Reconciliations of a ResourceGroup, by result.",
            ["result"], registry=r,
        )
        self.reconcile_seconds = Histogram(
            "rebalanser_operator_reconcile_seconds", "Time to make ZooKeeper match a spec.",
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30), registry=r,
        )
        self.resources_created = Counter(
            "rebalanser_operator_resources_created_total", "Resource znodes created.", registry=r
        )
        self.resources_deleted = Counter(
            "rebalanser_operator_resources_deleted_total", "Resource znodes deleted.", registry=r
        )
        self.status_patches = Counter(
            "rebalanser_operator_status_patches_total", "Status patches sent to the API server.", registry=r
        )
        self.status_refresh_seconds = Histogram(
            "rebalanser_operator_status_refresh_seconds", "Time to read a group and compute its status.",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5), registry=r,
        )
        self.events = Counter(
            "rebalanser_operator_events_total", "Kubernetes Events posted, by reason.", ["reason"], registry=r
        )
        self.zookeeper_connections = Gauge(
            "rebalanser_operator_zookeeper_connections", "Open ZooKeeper connections (one per connect string).",
            registry=r,
        )
        self.replica_groups = Gauge(
            "rebalanser_operator_replica_groups",
            "ResourceGroups this operator replica holds in the operator group (docs/operator-replicas.md).",
            registry=r,
        )
        self.replica_in_office = Gauge(
            "rebalanser_operator_replica_in_office",
            "1 while this replica is the operator group's coordinator (the writer of its resource list).", registry=r,
        )
        self.replica_handovers = Counter(
            "rebalanser_operator_replica_handovers_total", "ResourceGroups this replica gained or let go of.",
            ["direction"], registry=r,
        )
        self.group_members = Gauge("rebalanser_group_members", "Live members of a group.", _GROUP, registry=r)
        self.group_resources = Gauge("rebalanser_group_resources", "Resources of a group.", _GROUP, registry=r)
        self.group_assigned = Gauge("rebalanser_group_assigned", "Assigned resources of a group.", _GROUP, registry=r)
        self.group_interval = Gauge(
            "rebalanser_group_effective_interval_seconds", "Effective rebalance interval.", _GROUP, registry=r
        )
        self.group_zookeeper_connected = Gauge(
            "rebalanser_group_zookeeper_connected", "1 when the group's ZooKeeper is reachable.", _GROUP, registry=r
        )
        self.group_phase = Gauge(
            "rebalanser_group_phase", "1 for the group's current phase.", (*_GROUP, "phase"), registry=r
        )
        self.group_rebalances = Counter(
            "rebalanser_group_rebalances_total", "Completed rebalances seen by the operator.", _GROUP, registry=r
        )

    def set_phase(self, namespace: str, name: str, phase: Phase) -> None:
        for candidate in Phase:
            self.group_phase.labels(namespace, name, candidate.value).set(1 if candidate is phase else 0)

    def forget_group(self, namespace: str, name: str) -> None:
        for gauge in (
            self.group_members, self.group_resources, self.group_assigned, self.group_interval,
            self.group_zookeeper_connected,
        ):
            _remove(gauge, namespace, name)
        _remove(self.group_rebalances, namespace, name)
        for candidate in Phase:
            _remove(self.group_phase, namespace, name, candidate.value)

    def serve(self, port: int, addr: str = "0.0.0.0") -> None:
        start_http_server(port, addr=addr, registry=self.registry)


def _remove(metric: Gauge | Counter, *labels: str) -> None:
    try:
        metric.remove(*labels)
    except KeyError:
        pass
