"""``G/config``: the group-wide settings the operator writes and every worker watches.

Format (JSON object, unknown keys ignored so newer operators stay readable)::

    {"algorithm": "ResourceBarrier" | "GlobalBarrier",
     "minIntervalSeconds": 2.0, "maxIntervalSeconds": 30.0,
     "effectiveIntervalSeconds": 2.0,      # what the coordinator waits between rebalances
     "departureGraceSeconds": 0.0}

Encoded and decoded (within bounds) by :mod:`rebalanser.wire`. Malformed data is rejected with a
logged reason; the workers then keep their own options.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum


class Algorithm(StrEnum):
    """How a rebalance hands resources over (docs/protocol.md)."""

    RESOURCE_BARRIER = "ResourceBarrier"
    GLOBAL_BARRIER = "GlobalBarrier"

    @staticmethod
    def parse(text: str) -> Algorithm:
        """Accepts the CRD spelling (``ResourceBarrier``) and the CLI one (``resource-barrier``)."""
        normalised = text.replace("-", "").replace("_", "").lower()
        for algorithm in Algorithm:
            if algorithm.value.lower() == normalised:
                return algorithm
        raise ValueError(f"unknown algorithm {text!r}: use resource-barrier or global-barrier")


MAX_INTERVAL = 3600.0
MAX_GRACE = 3600.0

#: attribute name -> (JSON key, upper bound); every one is a finite number >= 0.
_NUMBERS = {
    "min_interval_seconds": ("minIntervalSeconds", MAX_INTERVAL),
    "max_interval_seconds": ("maxIntervalSeconds", MAX_INTERVAL),
    "effective_interval_seconds": ("effectiveIntervalSeconds", MAX_INTERVAL),
    "departure_grace_seconds": ("departureGraceSeconds", MAX_GRACE),
}


@dataclass(frozen=True)
class GroupConfig:
    """The settings of one group, validated on construction (:class:`ValueError` names the field).

    Numbers are stored as floats; ``effective_interval_seconds`` may be None (then the coordinator
    uses ``min_interval_seconds``).
    """

    algorithm: Algorithm = Algorithm.RESOURCE_BARRIER
    min_interval_seconds: float = 2.0
    max_interval_seconds: float = 30.0
    effective_interval_seconds: float | None = None
    departure_grace_seconds: float = 0.0

    def __post_init__(self) -> None:
        algorithm: object = self.algorithm
        if isinstance(algorithm, str) and not isinstance(algorithm, Algorithm):
            try:
                algorithm = Algorithm(algorithm)
            except ValueError:
                raise ValueError(
                    f"algorithm: must be one of {', '.join(a.value for a in Algorithm)}, got {algorithm[:40]!r}"
                ) from None
        if not isinstance(algorithm, Algorithm):
            raise ValueError(f"algorithm: must be a string, got {type(algorithm).__name__}")
        object.__setattr__(self, "algorithm", algorithm)
        for attribute, (key, high) in _NUMBERS.items():
            value = getattr(self, attribute)
            if value is None and attribute == "effective_interval_seconds":
                continue
            object.__setattr__(self, attribute, _bounded(key, value, high))
        if self.min_interval_seconds > self.max_interval_seconds:
            raise ValueError("minIntervalSeconds must not exceed maxIntervalSeconds")

    @classmethod
    def from_json(cls, value: Mapping[str, object]) -> GroupConfig:
        """A config from its JSON object (camelCase keys; unknown keys ignored, missing ones default)."""
        if not isinstance(value, Mapping):
            raise ValueError(f"config must be a JSON object, got {type(value).__name__}")
        fields: dict[str, object] = {}
        if "algorithm" in value:
            fields["algorithm"] = value["algorithm"]
        for attribute, (key, _) in _NUMBERS.items():
            if key in value:
                fields[attribute] = value[key]
        return cls(**fields)  # type: ignore[arg-type]  # each value is checked in __post_init__

    def to_json(self) -> dict[str, str | float | None]:
        """The JSON object :meth:`from_json` reads back into an equal config."""
        return {
            "algorithm": self.algorithm.value,
            "minIntervalSeconds": self.min_interval_seconds,
            "maxIntervalSeconds": self.max_interval_seconds,
            "effectiveIntervalSeconds": self.effective_interval_seconds,
            "departureGraceSeconds": self.departure_grace_seconds,
        }

    @property
    def interval(self) -> float:
        """The interval the coordinator honours: the effective one, clamped into [min, max]."""
        value = self.effective_interval_seconds
        if value is None:
            return self.min_interval_seconds
        return min(max(value, self.min_interval_seconds), self.max_interval_seconds)


def _bounded(key: str, value: object, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{key}: must be a number, got {type(value).__name__}")
    number = float(value)
    if not math.isfinite(number) or not 0 <= number <= high:
        raise ValueError(f"{key}: must lie in [0, {high:g}], got {value!r}")
    return number
