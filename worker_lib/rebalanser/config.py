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

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, model_validator


class Algorithm(StrEnum):
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


class GroupConfig(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True)

    algorithm: Algorithm = Algorithm.RESOURCE_BARRIER
    min_interval_seconds: float = Field(2.0, alias="minIntervalSeconds", ge=0, le=MAX_INTERVAL)
    max_interval_seconds: float = Field(30.0, alias="maxIntervalSeconds", ge=0, le=MAX_INTERVAL)
    effective_interval_seconds: float | None = Field(
        None, alias="effectiveIntervalSeconds", ge=0, le=MAX_INTERVAL
    )
    departure_grace_seconds: float = Field(0.0, alias="departureGraceSeconds", ge=0, le=MAX_GRACE)

    @model_validator(mode="after")
    def _ordered(self) -> GroupConfig:
        if self.min_interval_seconds > self.max_interval_seconds:
            raise ValueError("minIntervalSeconds must not exceed maxIntervalSeconds")
        return self

    @property
    def interval(self) -> float:
        """The interval the coordinator honours: the effective one, clamped into [min, max]."""
        value = self.effective_interval_seconds
        if value is None:
            return self.min_interval_seconds
        return min(max(value, self.min_interval_seconds), self.max_interval_seconds)
