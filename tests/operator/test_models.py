"""Spec parsing and validation: what the schema cannot express is caught here."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rebalanser.config import Algorithm
from rebalanser.paths import is_valid_resource_name
from rebalanser.wire import decode_config, encode_config
from rebalanser_operator.spec.models import (
    MAX_TOTAL_RESOURCES,
    RESOURCE_NAME_PATTERN,
    SPEC_BYTES_BUDGET,
    ResourceGroupSpec,
    SpecError,
)

from tests.operator.spec_limits import largest_specs, oversized_specs

CONNECT = {"connect": "zk-0:2181"}
NAME_CHARS = "AZaz09_.:@+=-/ é"


@given(st.text(alphabet=NAME_CHARS, min_size=0, max_size=8))
def test_resource_name_pattern_equals_the_library_rule(name: str) -> None:
    assert bool(re.match(RESOURCE_NAME_PATTERN, name)) == is_valid_resource_name(name)


@pytest.mark.parametrize("name", [".", "..", "a/b", "", "x y"])
def test_invalid_resource_names_are_rejected(name: str) -> None:
    with pytest.raises(SpecError, match=r"spec\.resources"):
        ResourceGroupSpec.parse({"zookeeper": CONNECT, "resources": [name]})


@pytest.mark.parametrize("name", ["...", ".a", "..a", "a..", "orders-0", "k=v@x:1+2"])
def test_unusual_but_valid_resource_names_are_accepted(name: str) -> None:
    assert ResourceGroupSpec.parse({"zookeeper": CONNECT, "resources": [name]}).desired_resources() == {name}


def test_resource_sets_expand_and_merge_with_explicit_names() -> None:
    spec = ResourceGroupSpec.parse(
        {
            "zookeeper": CONNECT,
            "resources": ["orders-1", "extra"],
            "resourceSets": [{"prefix": "orders-", "count": 3}, {"prefix": "p", "count": 0}],
        }
    )
    assert spec.desired_resources() == {"orders-0", "orders-1", "orders-2", "extra"}


def test_empty_prefix_generates_plain_numbers() -> None:
    spec = ResourceGroupSpec.parse({"zookeeper": CONNECT, "resourceSets": [{"prefix": "", "count": 2}]})
    assert spec.desired_resources() == {"0", "1"}


def test_total_resource_count_is_bounded() -> None:
    with pytest.raises(SpecError, match="at most"):
        ResourceGroupSpec.parse(
            {"zookeeper": CONNECT, "resourceSets": [{"prefix": "a", "count": MAX_TOTAL_RESOURCES},
                                                    {"prefix": "b", "count": 1}]}
        )


def test_min_interval_above_max_is_rejected_with_a_clear_message() -> None:
    with pytest.raises(SpecError, match="minIntervalSeconds must not exceed"):
        ResourceGroupSpec.parse({"zookeeper": CONNECT, "rebalance": {"minIntervalSeconds": 9, "maxIntervalSeconds": 3}})


def test_missing_connect_string_is_named() -> None:
    with pytest.raises(SpecError, match=r"spec\.zookeeper\.connect"):
        ResourceGroupSpec.parse({"zookeeper": {}})


@pytest.mark.parametrize("path", ["/zookeeper/x", "relative", "/a//b", "/a/./b", "/a/"])
def test_bad_group_paths_are_rejected(path: str) -> None:
    with pytest.raises(SpecError):
        ResourceGroupSpec.parse({"zookeeper": {**CONNECT, "path": path}})


def test_default_and_explicit_group_paths() -> None:
    default = ResourceGroupSpec.parse({"zookeeper": CONNECT})
    assert default.group_path("shop", "orders") == "/rebalanser/shop/orders"
    explicit = ResourceGroupSpec.parse({"zookeeper": {**CONNECT, "path": "/apps/orders"}})
    assert explicit.group_path("shop", "orders") == "/apps/orders"


def test_defaults_match_the_contract() -> None:
    spec = ResourceGroupSpec.parse({"zookeeper": CONNECT})
    assert spec.algorithm is Algorithm.RESOURCE_BARRIER
    assert spec.rebalance.min_interval_seconds == 2 and spec.rebalance.max_interval_seconds == 30
    assert spec.rebalance.adaptive is True and spec.rebalance.departure_grace_seconds == 0
    assert spec.resources == [] and spec.workload is None


def test_group_config_carries_the_rebalance_settings() -> None:
    spec = ResourceGroupSpec.parse(
        {"zookeeper": CONNECT, "algorithm": "GlobalBarrier",
         "rebalance": {"minIntervalSeconds": 1, "maxIntervalSeconds": 20, "departureGraceSeconds": 5}}
    )
    config = spec.group_config(4.0)
    assert config.algorithm is Algorithm.GLOBAL_BARRIER
    assert (config.min_interval_seconds, config.max_interval_seconds) == (1, 20)
    assert config.effective_interval_seconds == 4.0 and config.departure_grace_seconds == 5
    assert decode_config(encode_config(config)) == config


def test_unknown_algorithm_and_workload_kind_are_rejected() -> None:
    with pytest.raises(SpecError, match="algorithm"):
        ResourceGroupSpec.parse({"zookeeper": CONNECT, "algorithm": "RoundRobin"})
    with pytest.raises(SpecError, match="workload"):
        ResourceGroupSpec.parse({"zookeeper": CONNECT, "workload": {"kind": "DaemonSet", "name": "w"}})


@pytest.mark.parametrize("corner", ["long-names", "many-names"])
def test_the_largest_spec_is_accepted_and_fits_the_budget(corner: str) -> None:
    spec = largest_specs()[corner]
    ResourceGroupSpec.parse(spec)
    size = len(json.dumps(spec, separators=(",", ":")))
    assert size <= SPEC_BYTES_BUDGET < 256 * 1024 - 8 * 1024, f"{corner}: {size} bytes"


@pytest.mark.parametrize("corner", ["long-names+1", "many-names+1"])
def test_a_spec_past_the_limits_is_rejected_with_a_clear_message(corner: str) -> None:
    with pytest.raises(SpecError, match=r"spec\.resources"):
        ResourceGroupSpec.parse(oversized_specs("zk-0:2181")[corner])


def test_a_pod_selector_label_key_past_its_longest_is_rejected() -> None:
    labels = {"k" * 318: "v"}
    with pytest.raises(SpecError, match="label keys are at most 317"):
        ResourceGroupSpec.parse({"zookeeper": CONNECT, "podSelector": {"matchLabels": labels}})
