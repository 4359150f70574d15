"""The wire formats and the bounded decoder, specified directly (no ZooKeeper)."""

from __future__ import annotations

import hashlib
import json
import time
import zlib
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rebalanser import wire
from rebalanser.config import Algorithm, GroupConfig
from rebalanser.errors import CorruptDataError
from rebalanser.paths import GroupPaths, are_valid_resource_names, is_valid_resource_name
from rebalanser.wire import BarrierRecord, MemberAssignment, Phase, RebalanceRecord

DEEP = b"[" * 100_000 + b"]" * 100_000
UNSAFE = settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)

names = st.from_regex(r"[A-Za-z0-9_.:@+=-]{1,40}", fullmatch=True).filter(lambda n: n not in (".", ".."))
counts = st.integers(min_value=0, max_value=wire.MAX_INT)
texts = st.text(max_size=60)


# -- assignments (the former chunked blobs) -------------------------------------------------------


def decode_blob(blob: wire.Blob) -> MemberAssignment:
    header = wire.decode_assignment_header(blob.header)
    if header.inline is not None:
        return header.inline
    return wire.join_chunks(header, {n: wire.decode_chunk(n, d) for n, d in blob.chunks.items()})


def chunked(assignment: MemberAssignment) -> MemberAssignment:
    """What a chunked assignment decodes to: its names sorted, once each."""
    return MemberAssignment(assignment.epoch, assignment.generation, tuple(sorted(set(assignment.resources))),
                            assignment.algorithm, assignment.member, assignment.stop)


def test_small_assignments_are_stored_inline() -> None:
    blob = wire.encode_assignment(MemberAssignment(1, 2, ("a",)))
    assert blob.chunks == {}
    assert wire.decode_assignment_header(blob.header).inline == MemberAssignment(1, 2, ("a",))


def test_an_assignment_of_a_generation_without_a_stop_says_so_and_others_carry_no_mark() -> None:
    unstopped = MemberAssignment(1, 2, ("a",), "GlobalBarrier", "m-0001", stop=False)
    assert wire.decode_assignment_header(wire.encode_assignment(unstopped).header).inline == unstopped
    assert unstopped.payload()["stop"] is False
    large = MemberAssignment(1, 2, tuple(f"r{i:05d}" for i in range(5_000)), "GlobalBarrier", "m-0001", stop=False)
    assert wire.encode_assignment(large).chunks and decode_blob(wire.encode_assignment(large)) == large, "chunked"
    assert "stop" not in MemberAssignment(1, 2, ("a",), "GlobalBarrier").payload(), "absent means a stop"
    bad = wire.MAGIC + b"I" + zlib.compress(json.dumps(
        {"epoch": 1, "generation": 2, "resources": ["a"], "stop": "no"}).encode())
    with pytest.raises(CorruptDataError, match="stop"):
        wire.decode_assignment_header(bad)


def test_large_assignments_round_trip_through_chunks() -> None:
    value = MemberAssignment(3, 7, tuple(f"{i:x}{i * 7919:x}" for i in range(50_000)), "GlobalBarrier", "m-1")
    blob = wire.encode_assignment(value)
    header = wire.decode_assignment_header(blob.header)
    assert header.inline is None and header.shell is not None and header.shell.generation == 7
    assert list(header.chunks) == list(blob.chunks) and len(blob.chunks) > 50
    assert decode_blob(blob) == chunked(value)


def test_moving_a_few_names_rewrites_a_few_chunks_not_the_list() -> None:
    names = [f"res-{i:06d}" for i in range(20_000)]
    before = wire.encode_assignment(MemberAssignment(1, 1, tuple(names)))
    moved = names[:7000:1000]  # 7 names spread over the list leave; 3 new ones arrive
    after = wire.encode_assignment(MemberAssignment(1, 2, tuple(sorted(set(names) - set(moved) | {"a", "m", "z"}))))
    new = {n: d for n, d in after.chunks.items() if n not in before.chunks}
    assert 1 <= len(new) <= 2 * 10, f"{len(new)} of {len(after.chunks)} chunks rewritten for 10 names"
    written = sum(len(d) for d in new.values()) + len(after.header)
    whole = sum(len(d) for d in after.chunks.values())
    assert written < whole / 5, (written, whole)


def test_chunks_are_bounded_in_size_even_for_names_that_all_end_a_chunk() -> None:
    import zlib as z
    enders = [n for n in (f"n{i}" for i in range(200_000)) if z.crc32(n.encode()) % wire.CHUNK_NAMES == 0][:600]
    runs = wire.encode_assignment(MemberAssignment(1, 1, tuple(enders)), inline_names=0)
    sizes = [len(wire.decode_chunk(n, d)) for n, d in runs.chunks.items()]
    assert min(sizes[:-1]) >= wire.CHUNK_MIN and max(sizes) <= wire.CHUNK_MAX
    plain = wire.encode_assignment(MemberAssignment(1, 1, tuple(f"x{i:05d}" for i in range(5000))), inline_names=0)
    assert max(len(wire.decode_chunk(n, d)) for n, d in plain.chunks.items()) <= wire.CHUNK_MAX


def test_missing_foreign_or_tampered_chunks_are_detected() -> None:
    blob = wire.encode_assignment(MemberAssignment(1, 1, tuple(f"r{i:05d}" for i in range(20_000))))
    header = wire.decode_assignment_header(blob.header)
    chunks = {n: wire.decode_chunk(n, d) for n, d in blob.chunks.items()}
    first, second = list(chunks)[:2]
    with pytest.raises(CorruptDataError):  # a chunk whose data is not what its name says
        wire.decode_chunk(first, blob.chunks[second])
    with pytest.raises(CorruptDataError):  # names out of order: another header's chunks
        wire.join_chunks(header, {**chunks, first: chunks[second], second: chunks[first]})
    with pytest.raises(CorruptDataError):  # a chunk short
        wire.join_chunks(header, {**chunks, first: chunks[first][1:]})
    forged = wire.CHUNK_MAGIC + zlib.compress(b'{"names":["ok","a/b"]}')
    name = wire.encode_chunk(("x",))[0]
    with pytest.raises(CorruptDataError):
        wire.decode_chunk(name, forged)


@pytest.mark.parametrize("data", [
    b"", b"{}", b"RB1", b"RB1Igarbage", b"RB1C{}", b"RB1X123", b"RB1P{}",
    b"RB1C" + zlib.compress(b'{"epoch":1,"generation":1e999,"count":1,"chunks":["c0000000000000000"]}'),
    b"RB1C" + zlib.compress(b'{"epoch":1,"generation":1,"count":1,"chunks":[]}'),
    b"RB1C" + zlib.compress(b'{"epoch":1,"generation":1,"count":1,"chunks":["../x"]}'),
    b"RB1C" + zlib.compress(b'{"epoch":1,"generation":-1,"count":1,"chunks":["c0000000000000000"]}'),
    b"RB1C" + zlib.compress(b'{"epoch":1,"generation":1,"count":1,"chunks":[' + b'"c0000000000000000",' * 20000
                            + b'"c0000000000000000"]}'),
    b"RB1C" + DEEP,
    b"RB1C" + zlib.compress(DEEP),
    b"RB1I" + zlib.compress(DEEP),
    b"RB1I" + zlib.compress(b'{"epoch":1e999,"generation":1,"resources":[]}'),
    b"RB1I" + zlib.compress(b'{"epoch":1,"generation":1,"resources":["a/b"]}'),
    b"RB1I" + zlib.compress(b'{"epoch":1,"generation":1,"resources":[""]}'),
    b"RB1I" + zlib.compress(b'{"epoch":1,"generation":1,"resources":[".."]}'),
    b"RB1I" + zlib.compress(b'{"epoch":1,"generation":1,"resources":[1]}'),
    b"RB1I" + zlib.compress(b'{"epoch":1,"generation":1,"resources":["r0","r1\\n"]}'),
    b"RB1I" + zlib.compress(b'{"epoch":1,"generation":1,"resources":["r0","' + b"x" * 201 + b'"]}'),
    b"RB1I" + zlib.compress(b'{"epoch":1,"generation":1,"resources":[],"algorithm":"RoundRobin"}'),
    b"RB1I" + zlib.compress(b'{"epoch":true,"generation":1,"resources":[]}'),
    b"RB1I" + zlib.compress(b'{"epoch":1,"generation":1,"resources":[]}')[:-2],
    b"RB1I" + zlib.compress(b'{"epoch":1,"generation":1,"resources":[]}') + b"trailing",
], ids=repr)
def test_garbage_assignment_headers_are_rejected(data: bytes) -> None:
    with pytest.raises(CorruptDataError) as caught:
        wire.decode_assignment_header(data, path="/g/assignment/x")
    assert caught.value.kind == "assignment" and caught.value.path == "/g/assignment/x" and caught.value.reason


def test_a_zlib_bomb_is_rejected_after_inflating_no_more_than_the_limit() -> None:
    compressor = zlib.compressobj(9)
    body = b"".join(compressor.compress(b" " * (1 << 20)) for _ in range(512)) + compressor.flush()
    started = time.monotonic()
    with pytest.raises(CorruptDataError, match="inflates to more than"):
        wire.decode_assignment_header(b"RB1I" + body)
    assert time.monotonic() - started < 10
    with pytest.raises(CorruptDataError, match="inflates to more than 1024"):
        wire.inflate(zlib.compress(b" " * 1025), kind="assignment", limit=1024)
    assert wire.inflate(zlib.compress(b" " * 1024), kind="assignment", limit=1024) == b" " * 1024


# -- the bounded JSON decoder ---------------------------------------------------------------------


@pytest.mark.parametrize("data, reason", [
    (b'{"a":1e999}', "finite"), (b'{"a":-1e999}', "finite"), (b'{"a":NaN}', "NaN"),
    (b'{"a":Infinity}', "Infinity"), (b'{"a":-Infinity}', "Infinity"),
    (b'{"a":9223372036854775808}', "out of range"), (b'{"a":' + b"9" * 5000 + b"}", "out of range"),
    (DEEP, "bytes"), (b"[" * 300 + b"]" * 300, "arrays or objects"), (b"[" * 20 + b"]" * 20, "nested deeper"),
    (b'{"a":' + b"[" * 200 + b"]" * 200 + b"}", "nested deeper"),
    (b"{" + b" " * wire.MAX_RECORD_BYTES + b"}", "bytes"),
    (b'{"a":"\xff"}', "not JSON"), (b"{", "not JSON"), (b"[]", "not a JSON object"),
])
def test_the_decoder_bounds_numbers_depth_and_size(data: bytes, reason: str) -> None:
    with pytest.raises(CorruptDataError, match=reason):
        wire.decode_object(data, kind="state")


@given(st.lists(st.one_of(names, st.text(max_size=5), st.integers()), max_size=8))
def test_names_are_checked_in_one_pass_as_one_by_one(values: list[object]) -> None:
    expected = all(isinstance(v, str) and is_valid_resource_name(v) for v in values)
    assert are_valid_resource_names(values) is expected


@pytest.mark.parametrize("values", [["a\nb"], ["ok", "a\nb"], ["a\n"], ["\na"], ["a", "b\n", "c"]])
def test_a_name_holding_a_newline_is_not_read_as_two(values: list[object]) -> None:
    assert are_valid_resource_names(values) is False


def test_the_largest_numbers_in_range_are_kept() -> None:
    value = wire.decode_object(b'{"a":9223372036854775807,"b":-9223372036854775807,"c":1.5e300}', kind="state")
    assert value == {"a": wire.MAX_INT, "b": -wire.MAX_INT, "c": 1.5e300}


# -- records: round trips and arbitrary input -----------------------------------------------------


@given(st.builds(BarrierRecord, st.sampled_from(Phase), counts, counts))
def test_barrier_records_round_trip(record: BarrierRecord) -> None:
    assert wire.decode_barrier(wire.encode_barrier(record)) == record


rebalances = st.builds(
    RebalanceRecord, counts, st.none() | counts, st.none() | texts, st.none() | texts,
    st.none() | st.text(min_size=1, max_size=40), st.none() | st.text(min_size=1, max_size=40),
    st.none() | counts | st.floats(min_value=0, max_value=1e300), st.none() | counts, st.none() | counts,
    st.none() | counts,
)


@given(rebalances)
def test_rebalance_records_round_trip(record: RebalanceRecord) -> None:
    assert wire.decode_rebalance(wire.encode_rebalance(record)) == record


assignments = st.builds(
    MemberAssignment, counts, counts, st.lists(names, max_size=50).map(tuple),
    st.sampled_from([a.value for a in Algorithm]),
)


@given(assignments, st.sampled_from([0, 8, wire.INLINE_NAMES]))
def test_assignments_round_trip_inline_and_in_chunks(assignment: MemberAssignment, inline_names: int) -> None:
    blob = wire.encode_assignment(assignment, inline_names=inline_names)
    inline = len(assignment.resources) <= inline_names
    assert decode_blob(blob) == (assignment if inline else chunked(assignment))


configs = st.builds(
    GroupConfig, algorithm=st.sampled_from(Algorithm),
    min_interval_seconds=st.floats(0, 100), max_interval_seconds=st.floats(100, 3600),
    effective_interval_seconds=st.none() | st.floats(0, 3600), departure_grace_seconds=st.floats(0, 3600),
)


@given(configs)
def test_configs_round_trip(config: GroupConfig) -> None:
    assert wire.decode_config(wire.encode_config(config)) == config


@given(counts)
def test_generation_dirs_round_trip(generation: int) -> None:
    name = GroupPaths.of("/g").stopped_generation(generation).rsplit("/", 1)[1]
    assert wire.decode_generation_dir(name) == generation


def test_a_coordinator_goes_on_only_from_generations_it_can_count_up_from() -> None:
    assert wire.continuable(wire.MAX_GENERATION) == wire.MAX_GENERATION
    assert wire.decode_barrier(wire.encode_barrier(BarrierRecord(Phase.STOP, wire.MAX_GENERATION + 2**32))).generation
    with pytest.raises(CorruptDataError, match="no room"):
        wire.continuable(wire.MAX_GENERATION + 1, kind="state")


@pytest.mark.parametrize("name", ["g", "g12", "g" + "9" * 5000, "g00000000000a", "g000000000001\n", "x000000000001",
                                  "g99999999999999999999", "g" + "\u0661" * 12])
def test_foreign_generation_dirs_are_rejected(name: str) -> None:
    with pytest.raises(CorruptDataError):
        wire.decode_generation_dir(name)


@given(st.integers(-(2**63), 2**63 - 1), st.binary(min_size=16, max_size=16))
def test_a_session_record_reads_back_as_written(session: int, password: bytes) -> None:
    record = wire.SessionRecord(session, password)
    assert wire.decode_session(wire.encode_session(record)) == record
    assert password.hex() not in repr(record)


@pytest.mark.parametrize("data", [
    b'{"version": 2, "sessionId": "0000000000000001", "password": "' + b"0" * 32 + b'"}',  # a later version
    b'{"sessionId": "0000000000000001", "password": "' + b"0" * 32 + b'"}',  # no version
    b'{"version": 1, "sessionId": "1", "password": "' + b"0" * 32 + b'"}',  # not 16 digits
    b'{"version": 1, "sessionId": "000000000000000G", "password": "' + b"0" * 32 + b'"}',
    b'{"version": 1, "sessionId": "00000000000000AB", "password": "' + b"0" * 32 + b'"}',  # uppercase
    b'{"version": 1, "sessionId": 1, "password": "' + b"0" * 32 + b'"}',  # a number
    b'{"version": 1, "sessionId": "0000000000000001", "password": "' + b"0" * 30 + b'"}',  # 15 bytes
    b'{"version": 1, "sessionId": "0000000000000001"}',  # no password
    b'{"version": 1, "sessionId": "0000000000000001", "password": "' + b"0" * 32 + b'", "x": "' + b"y" * 2000 + b'"}',
    b"[1]", b"", b"\xff",
])
def test_a_session_record_is_read_strictly(data: bytes) -> None:
    with pytest.raises(CorruptDataError) as caught:
        wire.decode_session(data, path="/g/sessions/x")
    assert caught.value.kind == "session" and b"0" * 30 not in str(caught.value).encode()


DECODERS: dict[str, Callable[[bytes], object]] = {
    "barrier": wire.decode_barrier, "state": wire.decode_rebalance, "config": wire.decode_config,
    "assignment": wire.decode_assignment_header,
    "chunk": lambda data: wire.decode_chunk(wire.encode_chunk(("x",))[0], data),
    "chunk-named": lambda data: wire.decode_chunk("c" + hashlib.sha256(data).hexdigest()[:wire.CHUNK_ID_HEX], data),
    "object": lambda data: wire.decode_object(data, kind="owner"),
    "session": wire.decode_session,
}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=12), children, max_size=5),
    max_leaves=30,
)
record_keys = st.sampled_from([
    "phase", "generation", "epoch", "coordinator", "algorithm", "startedAt", "completedAt", "durationMs", "moved",
    "members", "resources", "minIntervalSeconds", "maxIntervalSeconds", "effectiveIntervalSeconds",
    "departureGraceSeconds", "chunks", "count", "names", "resourceGroup", "version", "sessionId", "password",
])
record_like = st.dictionaries(record_keys, json_values, max_size=8)


def _only_corrupt_data(decode: Callable[[bytes], object], data: bytes) -> None:
    try:
        decode(data)
    except CorruptDataError:
        pass


@UNSAFE
@given(st.sampled_from(sorted(DECODERS)), st.binary(max_size=300))
def test_arbitrary_bytes_raise_nothing_but_corrupt_data(decoder: str, data: bytes) -> None:
    _only_corrupt_data(DECODERS[decoder], data)
    _only_corrupt_data(DECODERS[decoder], b"RB1I" + zlib.compress(data))
    _only_corrupt_data(DECODERS[decoder], b"RB1C" + zlib.compress(data))


@UNSAFE
@given(st.sampled_from(sorted(DECODERS)), st.one_of(json_values, record_like), st.booleans())
def test_arbitrary_json_raises_nothing_but_corrupt_data(decoder: str, value: object, compressed: bool) -> None:
    text = json.dumps(value, allow_nan=True).encode()
    _only_corrupt_data(DECODERS[decoder], b"RB1I" + zlib.compress(text) if compressed else text)
    _only_corrupt_data(DECODERS[decoder], b"RB1C" + zlib.compress(text))


@UNSAFE
@given(assignments, st.data())
def test_corrupted_chunks_raise_nothing_but_corrupt_data(assignment: MemberAssignment, data: st.DataObject) -> None:
    blob = wire.encode_assignment(assignment, inline_names=0)
    header = wire.decode_assignment_header(blob.header)
    assert (header.inline is not None) == (not assignment.resources), "only an empty list stays inline"
    stored = {n: data.draw(st.binary(max_size=40)) if data.draw(st.booleans()) else d for n, d in blob.chunks.items()}
    try:
        assert decode_blob(wire.Blob(blob.header, stored)) == chunked(assignment)
    except CorruptDataError:
        assert stored != blob.chunks
