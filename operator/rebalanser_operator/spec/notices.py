"""What a ResourceGroup's spec still says in an older form: the one place that names them.

    notices = spec_notices(raw_spec)   # ("spec.workload is deprecated: write spec.workloadRef ...", ...)

v1alpha1 has one field for each concept; the older forms stay in the CRD (so objects stored before
the change still validate and keep their fields) and the operator reads them with the same meaning:

- ``spec.workload`` (kind, name) -> ``spec.workloadRef`` (apiVersion apps/v1, kind, name);
- ``spec.zookeeper.credentialsSecret`` (a name) -> ``spec.zookeeper.credentialsSecretRef`` {name};
- ``spec.zookeeper.tls.secret`` (a name) -> ``spec.zookeeper.tls.secretRef`` {name};
- a ``*Seconds`` field holding a fraction (they were numbers; they are whole seconds now): read rounded
  up (:func:`rebalanser_operator.spec.models.whole_seconds`).

Each notice says what the spec holds and what to write instead; the operator shows them in the
``SpecCurrent`` condition and a Warning Event (docs/operator.md, "Upgrading"). A pure function of the
raw spec: nothing here reads the API server.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

#: The whole-seconds fields, by their path in the spec.
SECONDS_FIELDS = (
    ("zookeeper", "sessionTimeoutSeconds"),
    ("rebalance", "minIntervalSeconds"),
    ("rebalance", "maxIntervalSeconds"),
    ("rebalance", "departureGraceSeconds"),
)


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _renamed(raw: Mapping[str, Any]) -> list[str]:
    notices = []
    workload = raw.get("workload")
    if isinstance(workload, Mapping):
        notices.append(
            "spec.workload is deprecated: write spec.workloadRef {apiVersion: apps/v1, "
            f"kind: {workload.get('kind')}, name: {workload.get('name')}}} in its place"
        )
    zookeeper = _mapping(raw.get("zookeeper"))
    if isinstance(zookeeper.get("credentialsSecret"), str):
        notices.append(
            "spec.zookeeper.credentialsSecret is deprecated: write spec.zookeeper.credentialsSecretRef "
            f"{{name: {zookeeper['credentialsSecret']}}} in its place"
        )
    tls = _mapping(zookeeper.get("tls"))
    if isinstance(tls.get("secret"), str):
        notices.append(
            f"spec.zookeeper.tls.secret is deprecated: write spec.zookeeper.tls.secretRef {{name: {tls['secret']}}} "
            "in its place"
        )
    return notices


def _fractions(raw: Mapping[str, Any]) -> list[str]:
    notices = []
    for section, name in SECONDS_FIELDS:
        value = _mapping(raw.get(section)).get(name)
        if isinstance(value, float) and math.isfinite(value) and not value.is_integer():
            whole = math.ceil(value)
            notices.append(
                f"spec.{section}.{name}: {value:g} is not a whole number of seconds; it is read as {whole} "
                f"(rounded up): write {whole}"
            )
    return notices


def spec_notices(raw: Mapping[str, Any] | None) -> tuple[str, ...]:
    """Every older form in ``raw`` (a spec as the API server returns it), with what to write instead."""
    spec = _mapping(raw)
    return tuple(_renamed(spec) + _fractions(spec))
