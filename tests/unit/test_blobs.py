"""Chunked blob encoding, specified directly."""

import pytest
from rebalanser import blobs
from rebalanser.errors import CorruptDataError


def test_small_values_are_stored_inline() -> None:
    blob = blobs.encode({"resources": ["a"]}, generation=1)
    assert blob.parts == []
    assert blobs.decode_header(blob.header).inline == {"resources": ["a"]}


def test_large_values_round_trip_through_parts() -> None:
    value = {"resources": [f"{i:x}{i * 7919:x}" for i in range(50_000)]}
    blob = blobs.encode(value, generation=7, part_bytes=10_000)
    header = blobs.decode_header(blob.header)
    assert header.parts == len(blob.parts) > 1 and header.generation == 7
    assert blobs.join_parts(header, blob.parts) == value


def test_missing_or_foreign_parts_are_detected() -> None:
    blob = blobs.encode({"x": list(range(20_000))}, generation=1, part_bytes=1000)
    header = blobs.decode_header(blob.header)
    with pytest.raises(CorruptDataError):
        blobs.join_parts(header, blob.parts[:-1])
    with pytest.raises(CorruptDataError):
        blobs.join_parts(header, [b"x" * len(p) for p in blob.parts])


@pytest.mark.parametrize("data", [b"", b"{}", b"RB1", b"RB1Igarbage", b"RB1P{}", b"RB1X123"])
def test_garbage_headers_are_rejected(data: bytes) -> None:
    with pytest.raises(CorruptDataError):
        blobs.decode_header(data)
