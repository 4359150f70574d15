"""The largest specs the schema admits (shared by the unit tests and the API-server test)."""

from __future__ import annotations

from typing import Any

from rebalanser_operator.spec.models import (
    CONNECT_MAX,
    FULL_LENGTH_NAMES_MAX,
    GROUP_PATH_MAX,
    LABEL_KEY_MAX,
    LONG_LIST_NAME_MAX,
    MAX_EXPLICIT_RESOURCES,
    MAX_RESOURCE_SETS,
    MAX_SELECTOR_EXPRESSIONS,
    MAX_SELECTOR_VALUES,
    MAX_TOTAL_RESOURCES,
    RESOURCE_NAME_MAX,
)


def names(count: int, length: int) -> list[str]:
    """``count`` distinct valid resource names of exactly ``length`` characters."""
    return [f"{i:0{length}d}"[-length:] if length >= 8 else f"{i}".rjust(length, "r") for i in range(count)]


def largest_specs(connect: str | None = None) -> dict[str, dict[str, Any]]:
    """The two corners of the explicit-names rule, each with every other field at its maximum
    (``connect``: a real connect string instead of the longest one)."""
    return {
        "long-names": _largest(connect, names(FULL_LENGTH_NAMES_MAX, RESOURCE_NAME_MAX)),
        "many-names": _largest(connect, names(MAX_EXPLICIT_RESOURCES, LONG_LIST_NAME_MAX)),
    }


def _largest(connect: str | None, resources: list[str]) -> dict[str, Any]:
    per_set = (MAX_TOTAL_RESOURCES - len(resources)) // MAX_RESOURCE_SETS
    path = "/" + "/".join(["p" * 99] * ((GROUP_PATH_MAX - 1) // 100))
    return {
        "zookeeper": {
            "connect": connect if connect is not None else "z" * CONNECT_MAX,
            "path": path,
            "sessionTimeoutSeconds": 600,
            # the longer of credentialsSecret and credentialsSecretRef (one of them); tls is left out (the
            # e2e cluster has no TLS Secret), its longest secretRef still fits the budget (1.3 KB)
            "credentialsSecretRef": {"name": "c" * 253, "usernameKey": "u" * 253, "passwordKey": "p" * 253},
        },
        "resourceSets": [
            {"prefix": f"{i:02d}" + "s" * (RESOURCE_NAME_MAX - 6 - 2), "count": per_set}
            for i in range(MAX_RESOURCE_SETS)
        ],
        "algorithm": "GlobalBarrier",
        "rebalance": {"minIntervalSeconds": 3599, "maxIntervalSeconds": 3600, "adaptive": True,
                      "departureGraceSeconds": 3600},
        "workloadRef": {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "w" * 253},
        "failover": "SessionExpiry",  # the e2e cluster has no pods to watch; the other value is 3 bytes longer
        "podSelector": {
            "matchLabels": {f"{i:02d}" + "k" * (LABEL_KEY_MAX - 2 - 64) + "/" + "n" * 63: "v" * 63 for i in range(64)},
            "matchExpressions": [
                {"key": f"{i}" + "k" * (LABEL_KEY_MAX - 1), "operator": "NotIn",
                 "values": [f"{j:02d}" + "v" * 61 for j in range(MAX_SELECTOR_VALUES)]}
                for i in range(MAX_SELECTOR_EXPRESSIONS)
            ],
        },
        "resources": resources,
    }


def oversized_specs(connect: str) -> dict[str, dict[str, Any]]:
    """Just past the rule: one name too many for full-length names, or one character too long."""
    base = {"zookeeper": {"connect": connect}}
    return {
        "long-names+1": {**base, "resources": names(FULL_LENGTH_NAMES_MAX + 1, LONG_LIST_NAME_MAX + 1)},
        "many-names+1": {**base, "resources": names(MAX_EXPLICIT_RESOURCES + 1, 8)},
    }
