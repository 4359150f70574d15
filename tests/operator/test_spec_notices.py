"""The older forms of a spec: still read with the same meaning, each named with what to write instead
(the SpecCurrent condition); a fraction of a second in a whole-seconds field is read rounded up, never lost."""

from __future__ import annotations

from typing import Any

import pytest
from rebalanser_operator.spec.models import ResourceGroupSpec, WorkloadRef
from rebalanser_operator.spec.notices import spec_notices

CONNECT = {"connect": "zk-0:2181"}
#: Today's forms (v1alpha1 before the cleanup) and the current ones, with the same meaning.
OLDER = {
    "zookeeper": {**CONNECT, "credentialsSecret": "zk-digest", "tls": {"secret": "zk-tls"},
                  "sessionTimeoutSeconds": 10.0},
    "rebalance": {"minIntervalSeconds": 2.0, "maxIntervalSeconds": 30.0, "departureGraceSeconds": 0.0},
    "workload": {"kind": "Deployment", "name": "orders-worker"},
}
CURRENT = {
    "zookeeper": {**CONNECT, "credentialsSecretRef": {"name": "zk-digest"}, "tls": {"secretRef": {"name": "zk-tls"}},
                  "sessionTimeoutSeconds": 10},
    "rebalance": {"minIntervalSeconds": 2, "maxIntervalSeconds": 30, "departureGraceSeconds": 0},
    "workloadRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "orders-worker"},
}


def meaning(spec: ResourceGroupSpec) -> tuple[Any, ...]:
    zk = spec.zookeeper
    assert zk.tls is not None
    return (zk.credentials, zk.tls.secret_keys, zk.session_timeout_seconds, spec.rebalance, spec.workload)


def test_the_older_forms_mean_what_the_current_ones_do() -> None:
    older, current = ResourceGroupSpec.parse(OLDER), ResourceGroupSpec.parse(CURRENT)
    assert meaning(older) == meaning(current)
    assert current.workload == WorkloadRef.model_validate(CURRENT["workloadRef"])


def test_each_older_form_is_named_with_what_to_write() -> None:
    notices = spec_notices(OLDER)
    assert len(notices) == 3
    assert "spec.workload is deprecated: write spec.workloadRef {apiVersion: apps/v1, kind: Deployment, " \
           "name: orders-worker}" in notices[0]
    assert "write spec.zookeeper.credentialsSecretRef {name: zk-digest}" in notices[1]
    assert "write spec.zookeeper.tls.secretRef {name: zk-tls}" in notices[2]
    assert spec_notices(CURRENT) == ()
    assert spec_notices(None) == ()


@pytest.mark.parametrize(("section", "field", "stored", "read"), [
    ("zookeeper", "sessionTimeoutSeconds", 2.5, 3),
    ("rebalance", "minIntervalSeconds", 0.2, 1),
    ("rebalance", "maxIntervalSeconds", 29.01, 30),
    ("rebalance", "departureGraceSeconds", 1.5, 2),
])
def test_a_stored_fraction_is_read_rounded_up_and_named(section: str, field: str, stored: float, read: int) -> None:
    raw: dict[str, Any] = {"zookeeper": dict(CONNECT), "rebalance": {}}
    raw[section] = {**raw[section], field: stored}
    spec = ResourceGroupSpec.parse(raw)
    value = getattr(getattr(spec, section), next(n for n, f in type(getattr(spec, section)).model_fields.items()
                                                  if f.alias == field))
    assert value == read and isinstance(value, int)
    assert spec_notices(raw) == (
        f"spec.{section}.{field}: {stored:g} is not a whole number of seconds; it is read as {read} (rounded up): "
        f"write {read}",
    )


def test_whole_numbers_written_as_floats_are_current() -> None:
    """10.0 is a whole number (YAML writes it so; JSON reaches the operator as 10 or 10.0): no notice."""
    raw = {"zookeeper": {**CONNECT, "sessionTimeoutSeconds": 10.0}}
    assert ResourceGroupSpec.parse(raw).zookeeper.session_timeout_seconds == 10
    assert spec_notices(raw) == ()


def test_rounding_up_keeps_the_interval_order() -> None:
    """min 2.5 and max 2.7 round to 3 and 3: still in order (rounding up is monotonic)."""
    spec = ResourceGroupSpec.parse({"zookeeper": CONNECT, "rebalance": {"minIntervalSeconds": 2.5,
                                                                         "maxIntervalSeconds": 2.7}})
    assert (spec.rebalance.min_interval_seconds, spec.rebalance.max_interval_seconds) == (3, 3)
