"""Several clients in one process each report their own series (metrics are injected, never global)."""

from __future__ import annotations

import pytest
from kazoo.client import KazooClient
from prometheus_client import REGISTRY, CollectorRegistry
from rebalanser.client import Client
from rebalanser.options import Options
from rebalanser.prometheus import PrometheusMetrics

from tests.integration.conftest import add_resources
from tests.support.recorder import Recorder
from tests.support.workers import wait_for

pytestmark = pytest.mark.zk

RESOURCES = [f"r{i}" for i in range(6)]


def test_two_clients_in_one_process_report_their_own_series(
    zk: KazooClient, zk_hosts: str, group_path: str
) -> None:
    add_resources(zk, group_path, RESOURCES)
    registries = {name: CollectorRegistry() for name in ("a", "b")}
    handlers = {name: Recorder() for name in registries}
    clients = {name: Client(Options(zk_hosts, group_path, member_id=name, create_group=True,
                                    session_timeout=4, min_interval=0.1,
                                    metrics=PrometheusMetrics(registries[name])), handlers[name])
               for name in registries}
    try:
        for client in clients.values():
            client.start(timeout=30)

        def gauges() -> dict[str, float | None]:
            return {n: r.get_sample_value("rebalanser_owned_resources") for n, r in registries.items()}

        wait_for(lambda: all(len(h.owned) == 3 for h in handlers.values())
                 and gauges() == {n: float(len(h.owned)) for n, h in handlers.items()}, 60,
                 lambda: f"owned {[sorted(h.owned) for h in handlers.values()]}, gauges {gauges()}")
        coordinator = {n: r.get_sample_value("rebalanser_is_coordinator") or 0.0 for n, r in registries.items()}
        assert sorted(coordinator.values()) == [0.0, 1.0], coordinator  # one member coordinates, and only it says so
        leader = next(n for n, v in coordinator.items() if v == 1.0)
        assert (registries[leader].get_sample_value("rebalanser_rebalances_total") or 0) >= 1
        assert not [m for m in REGISTRY.collect() if m.name.startswith("rebalanser_")], "series in the global registry"
    finally:
        for client in clients.values():
            client.stop(timeout=30)
