"""The harness's bad values must be what they claim to be: garbage that breaks a naive reader in the
stated way, and stale records that are well-formed but older than what is stored."""

from __future__ import annotations

import json
import random
import zlib

import pytest
from rebalanser.config import Algorithm
from rebalanser.wire import decode_config

from tests.chaos import garbage as bad

ZNODE_LIMIT = 1 << 20


def _json(target: str, value: bytes) -> object:
    """What a naive reader gets: the blob's inflated JSON for an assignment, the JSON otherwise."""
    if target == "assignment":
        assert value.startswith(bad.MAGIC_INLINE)
        value = zlib.decompress(value[len(bad.MAGIC_INLINE):])
    return json.loads(value)


@pytest.mark.parametrize("target", bad.TARGETS)
@pytest.mark.parametrize("recipe", bad.RECIPES)
def test_every_value_fits_a_znode_and_replays_from_its_seed(target: str, recipe: str) -> None:
    first = bad.garbage(target, recipe, random.Random(7))
    assert first == bad.garbage(target, recipe, random.Random(7))
    assert len(first) < ZNODE_LIMIT


@pytest.mark.parametrize("target", bad.TARGETS)
def test_1e999_overflows_a_naive_integer_conversion(target: str) -> None:
    record = _json(target, bad.garbage(target, "1e999", random.Random(1)))
    assert isinstance(record, dict)
    numbers = [v for v in record.values() if isinstance(v, float)]
    assert numbers, record
    with pytest.raises(OverflowError):
        int(numbers[0])


@pytest.mark.parametrize("target", bad.TARGETS)
def test_deep_nesting_exhausts_a_recursive_parser(target: str) -> None:
    value = bad.garbage(target, "deep", random.Random(3))
    with pytest.raises(RecursionError):
        _json(target, value)


def test_the_zlib_bomb_inflates_far_beyond_its_size() -> None:
    value = bad.garbage("assignment", "zbomb", random.Random(0))
    inflater, inflated, body = zlib.decompressobj(), 0, value[len(bad.MAGIC_INLINE):]
    while body:
        inflated += len(inflater.decompress(body, 16 << 20))
        body = inflater.unconsumed_tail
    assert inflated == bad.BOMB_BYTES and len(value) < bad.BOMB_BYTES // 500


@pytest.mark.parametrize("target", bad.TARGETS)
def test_huge_integers_parse(target: str) -> None:
    record = _json(target, bad.garbage(target, "huge-int", random.Random(2)))
    assert isinstance(record, dict)
    assert any(isinstance(v, int) and v > 10**3000 for v in record.values())


def test_an_inline_blob_round_trips_and_unblob_refuses_anything_else() -> None:
    value = {"epoch": 3, "generation": 9, "resources": ["a", "b"]}
    assert bad.unblob(bad.blob(value)) == value
    assert bad.unblob(b"garbage") is None
    assert bad.unblob(bad.garbage("assignment", "zbomb", random.Random(0))) is None, "bounded, not a bomb"


CURRENT_BARRIER = json.dumps({"phase": "assigned", "generation": 40, "epoch": 7}).encode()


@pytest.mark.parametrize("seed", range(12))
def test_a_stale_barrier_is_well_formed_and_older(seed: int) -> None:
    value, how = bad.stale("barrier", CURRENT_BARRIER, [], random.Random(seed), ["w0"])
    record = json.loads(value)
    assert record["phase"] in ("stop", "assigned") and how
    assert record["generation"] < 40 and record["epoch"] <= 7


def test_a_stale_record_prefers_an_earlier_value_really_written() -> None:
    earlier = json.dumps({"phase": "stop", "generation": 12, "epoch": 5}).encode()
    made = {bad.stale("barrier", CURRENT_BARRIER, [earlier, CURRENT_BARRIER], random.Random(s), [])[0]
            for s in range(20)}
    assert earlier in made and CURRENT_BARRIER not in made


@pytest.mark.parametrize("seed", range(8))
def test_a_stale_assignment_is_older_and_may_carry_another_members_resources(seed: int) -> None:
    current = bad.blob({"epoch": 4, "generation": 30, "algorithm": "ResourceBarrier", "resources": ["r1"]})
    other = bad.blob({"epoch": 4, "generation": 29, "algorithm": "ResourceBarrier", "resources": ["r7", "r8"]})
    value, _ = bad.stale("assignment", current, [other], random.Random(seed), [])
    record = bad.unblob(value)
    assert isinstance(record, dict) and value != current
    assert record["generation"] < 30 and all(isinstance(r, str) for r in record["resources"])


def test_stale_claims_and_member_records_name_a_live_member() -> None:
    for target in ("claim", "member"):
        value, how = bad.stale(target, None, [], random.Random(5), ["w3"])
        assert "w3" in value.decode() and "w3" in how


@pytest.mark.parametrize("algorithm", ["ResourceBarrier", "GlobalBarrier"])
def test_a_config_switch_is_a_valid_config(algorithm: str) -> None:
    config = decode_config(bad.config_switch(algorithm, 0.5))
    assert config.algorithm is Algorithm(algorithm) and config.interval == 0.5


def test_a_stop_order_of_generation_1_on_request() -> None:
    value, how = bad.stale("barrier", CURRENT_BARRIER, [CURRENT_BARRIER[:-1] + b" }"], random.Random(0), [], "stop1")
    assert json.loads(value)["phase"] == "stop" and json.loads(value)["generation"] == 1 and "generation 1" in how
