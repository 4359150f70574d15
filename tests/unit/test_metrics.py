"""Metrics are injected: no series exist until an application asks for them, in its own registry."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY, CollectorRegistry
from rebalanser.metrics import Metrics, NoMetrics
from rebalanser.options import Options
from rebalanser.prometheus import PrometheusMetrics


def test_the_default_reports_nowhere_and_registers_nothing() -> None:
    options = Options("127.0.0.1:2181", "/g")
    assert isinstance(options.metrics, NoMetrics) and isinstance(options.metrics, Metrics)
    options.metrics.rebalanced(3, 0.1)
    assert not [m for m in REGISTRY.collect() if m.name.startswith("rebalanser_")]


def test_options_refuse_what_is_not_metrics() -> None:
    with pytest.raises(Exception, match="metrics must implement"):
        Options("127.0.0.1:2181", "/g", metrics=object())  # type: ignore[arg-type]


def test_two_registries_keep_two_sets_of_series() -> None:
    first, second = CollectorRegistry(), CollectorRegistry()
    a, b = PrometheusMetrics(first), PrometheusMetrics(second)
    a.rebalanced(4, 0.2)
    a.owned(7)
    b.owned(2)
    b.bad_data("config")
    assert first.get_sample_value("rebalanser_rebalances_total") == 1
    assert first.get_sample_value("rebalanser_moved_resources_total") == 4
    assert first.get_sample_value("rebalanser_rebalance_seconds_count") == 1
    assert (first.get_sample_value("rebalanser_owned_resources"), second.get_sample_value("rebalanser_owned_resources")
            ) == (7, 2)
    assert second.get_sample_value("rebalanser_rebalances_total") == 0
    assert second.get_sample_value("rebalanser_bad_data_total", {"kind": "config"}) == 1
    assert first.get_sample_value("rebalanser_bad_data_total", {"kind": "config"}) is None
    assert not [m for m in REGISTRY.collect() if m.name.startswith("rebalanser_")]


def test_members_sharing_a_registry_are_told_apart_by_labels() -> None:
    registry = CollectorRegistry()
    a = PrometheusMetrics(registry, {"member": "a"})
    b = PrometheusMetrics(registry, {"member": "b"})
    a.coordinator(True)
    b.coordinator(False)
    a.session_event("connected")
    b.session_event("connected")
    b.session_event("suspended")
    assert registry.get_sample_value("rebalanser_is_coordinator", {"member": "a"}) == 1
    assert registry.get_sample_value("rebalanser_is_coordinator", {"member": "b"}) == 0
    assert registry.get_sample_value("rebalanser_session_events_total", {"member": "b", "state": "suspended"}) == 1
    assert registry.get_sample_value("rebalanser_session_events_total", {"member": "a", "state": "suspended"}) is None


def test_sharing_a_registry_without_labels_is_refused() -> None:
    registry = CollectorRegistry()
    PrometheusMetrics(registry)
    with pytest.raises(ValueError, match="give each one labels"):
        PrometheusMetrics(registry)
    with pytest.raises(ValueError, match="have labels"):
        PrometheusMetrics(registry, {"member": "x"})
