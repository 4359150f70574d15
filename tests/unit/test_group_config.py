"""GroupConfig: the ``G/config`` settings, validated without any third-party library."""

from __future__ import annotations

import json
import math

import pytest
from rebalanser import wire
from rebalanser.config import Algorithm, GroupConfig
from rebalanser.errors import CorruptDataError


def test_defaults_and_camel_case_keys() -> None:
    assert GroupConfig.from_json({}) == GroupConfig()
    config = GroupConfig.from_json({"algorithm": "GlobalBarrier", "minIntervalSeconds": 1, "maxIntervalSeconds": 20,
                                    "effectiveIntervalSeconds": 4, "departureGraceSeconds": 5, "newerKey": [1]})
    assert config.algorithm is Algorithm.GLOBAL_BARRIER
    assert (config.min_interval_seconds, config.max_interval_seconds, config.departure_grace_seconds) == (1, 20, 5)
    assert isinstance(config.min_interval_seconds, float) and config.interval == 4


def test_the_effective_interval_is_clamped_into_min_max() -> None:
    assert GroupConfig(min_interval_seconds=2, max_interval_seconds=10, effective_interval_seconds=60).interval == 10
    assert GroupConfig(min_interval_seconds=2, max_interval_seconds=10, effective_interval_seconds=0).interval == 2
    assert GroupConfig(min_interval_seconds=3).interval == 3


@pytest.mark.parametrize("value, message", [
    ({"minIntervalSeconds": 9, "maxIntervalSeconds": 3}, "minIntervalSeconds must not exceed maxIntervalSeconds"),
    ({"minIntervalSeconds": -1}, r"minIntervalSeconds: must lie in \[0, 3600\]"),
    ({"maxIntervalSeconds": 3601}, r"maxIntervalSeconds: must lie in \[0, 3600\]"),
    ({"departureGraceSeconds": math.inf}, "departureGraceSeconds: must lie in"),
    ({"effectiveIntervalSeconds": math.nan}, "effectiveIntervalSeconds: must lie in"),
    ({"minIntervalSeconds": "2"}, "minIntervalSeconds: must be a number, got str"),
    ({"maxIntervalSeconds": True}, "maxIntervalSeconds: must be a number, got bool"),
    ({"departureGraceSeconds": None}, "departureGraceSeconds: must be a number, got NoneType"),
    ({"algorithm": "RoundRobin"}, "algorithm: must be one of ResourceBarrier, GlobalBarrier"),
    ({"algorithm": 1}, "algorithm: must be a string, got int"),
])
def test_bad_values_are_rejected_naming_the_field(value: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        GroupConfig.from_json(value)


def test_not_an_object_is_rejected() -> None:
    with pytest.raises(ValueError, match="must be a JSON object"):
        GroupConfig.from_json([])  # type: ignore[arg-type]


def test_the_wire_form_is_stable_and_reads_back() -> None:
    config = GroupConfig(Algorithm.GLOBAL_BARRIER, 1, 20, None, 5)
    encoded = wire.encode_config(config)
    assert json.loads(encoded) == {"algorithm": "GlobalBarrier", "minIntervalSeconds": 1.0, "maxIntervalSeconds": 20.0,
                                   "effectiveIntervalSeconds": None, "departureGraceSeconds": 5.0}
    assert wire.decode_config(encoded) == config


def test_a_bad_config_on_the_wire_is_corrupt_data_with_the_reason() -> None:
    with pytest.raises(CorruptDataError, match="rejected group config: minIntervalSeconds: must lie in") as caught:
        wire.decode_config(b'{"minIntervalSeconds": 4000}', path="/g/config")
    assert caught.value.kind == "config" and caught.value.path == "/g/config"


def test_configs_are_frozen() -> None:
    with pytest.raises(AttributeError):
        GroupConfig().min_interval_seconds = 5  # type: ignore[misc]
