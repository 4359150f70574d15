"""The wire formats of a group's records, and the one bounded decoder every value read from ZooKeeper
goes through.

Records (each has one encoder and one decoder here, used by the library and the operator alike):

* :class:`BarrierRecord` in ``G/barrier``: the Global Barrier phase, generation and epoch.
* :class:`RebalanceRecord` in ``G/state``: the coordinator's summary of the last rebalance.
* :class:`MemberAssignment` in ``G/assignment/<member node>``: behind an :class:`AssignmentHeader`
  (``RB1I`` + zlib-compressed JSON inline, or ``RB1C`` + zlib-compressed JSON naming the
  content-addressed chunk children that hold the names, each ``RB1K`` + zlib-compressed JSON).
* :class:`~rebalanser.config.GroupConfig` in ``G/config``.
* :class:`SessionRecord` in ``G/sessions/<guid>-<id>``: a member's session id and password.
* the generation directories ``G/stopped/g<generation>``, and any other JSON object the operator
  keeps under ``G`` (:func:`decode_object`).

Every decoder accepts arbitrary bytes and either returns a typed value or raises
:class:`~rebalanser.errors.CorruptDataError` (never anything else), within these bounds: the input's
size (:data:`MAX_RECORD_BYTES`, :data:`MAX_HEADER_BYTES`, :data:`MAX_PART_BYTES`), its nesting depth
(:data:`MAX_DEPTH`, and at most :data:`MAX_CONTAINERS` arrays and objects), its number of values
(:data:`MAX_VALUES`), the range of its numbers (integers within ±:data:`MAX_INT`, floats finite) and
the size of what a compressed value inflates to (:data:`MAX_INFLATED_BYTES`). So no value, however
made, costs a reader more than a bounded amount of memory and time, or raises what a caller does not
expect.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import re
import time
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import TypeAlias, cast

from rebalanser.config import Algorithm, GroupConfig
from rebalanser.errors import CorruptDataError
from rebalanser.paths import are_valid_resource_names, is_valid_resource_name

Json: TypeAlias = "bool | int | float | str | list[Json] | dict[str, Json] | None"

MAX_RECORD_BYTES = 64 * 1024  # G/barrier, G/state, G/config, the group root: a few hundred bytes as written
MAX_HEADER_BYTES = 1 << 20  # an assignment header (as written: at most INLINE_NAMES names, or the chunk names)
MAX_PART_BYTES = 1 << 20  # an assignment chunk (as written: a few KiB)
MAX_CHUNKS = 16384
MAX_CHUNK_INFLATED = 512 * 210  # {"names": CHUNK_MAX names of the longest kind (200 characters), quoted}
MAX_INFLATED_BYTES = 64 << 20  # ~330,000 resource names of the longest kind (200 characters)
MAX_VALUES = 1 << 20  # elements of every array and object together
MAX_DEPTH = 8  # records nest at most 2 deep as written
MAX_CONTAINERS = 256  # '[' and '{' bytes in one record (as written: at most 3)
MAX_INT = 2**63 - 1
MAX_GENERATION = MAX_INT - 2**32
_MAX_INT_DIGITS = len(str(MAX_INT))
_MAX_TEXT = 1024  # coordinator ids, algorithm names, timestamps
_LATEST_SECONDS = 253402300799  # 9999-12-31T23:59:59Z

MAGIC = b"RB1"
CHUNK_MAGIC = b"RB1K"
INLINE_NAMES = 256  # an assignment of at most this many names is inline in its header
CHUNK_NAMES, CHUNK_MIN, CHUNK_MAX = 128, 32, 512  # names per chunk: on average, at least, at most
CHUNK_ID_HEX = 16
_CHUNK_ID = re.compile(r"c[0-9a-f]{16}")
_GENERATION_DIR = re.compile(r"g([0-9]{12,19})")


# -- the bounded decoder -------------------------------------------------------------------------


def decode_object(data: bytes, *, kind: str, path: str = "", max_bytes: int = MAX_RECORD_BYTES) -> dict[str, Json]:
    """A JSON object, within every bound; CorruptDataError otherwise."""
    value = decode_json(data, kind=kind, path=path, max_bytes=max_bytes)
    if not isinstance(value, dict):
        raise CorruptDataError(f"not a JSON object but {type(value).__name__}", path=path, kind=kind)
    return value


def decode_owner(data: bytes) -> dict[str, Json] | None:
    """The ``resourceGroup`` object of the owner marker an operator keeps in a group root's data; None
    for no marker, or for anything else (foreign or corrupt data)."""
    try:
        owner = decode_object(data, kind="owner").get("resourceGroup") if data else None
    except CorruptDataError:
        return None
    return owner if isinstance(owner, dict) else None


#: The group root's data while ``rebalanser group delete`` deletes the group: members that read it leave
#: the group and end, and none creates anything more in it (:mod:`rebalanser.containers`).
DELETION_MARK = b'{"deleting": true}'


def marks_deletion(data: bytes) -> bool:
    """Whether a group root's data is the deletion mark (:data:`DELETION_MARK`); anything else is not."""
    try:
        return bool(data) and decode_object(data, kind="root").get("deleting") is True
    except CorruptDataError:
        return False


def decode_json(data: bytes, *, kind: str, path: str = "", max_bytes: int = MAX_RECORD_BYTES) -> Json:
    """Any JSON value, within every bound; CorruptDataError otherwise."""

    def bad(reason: str) -> CorruptDataError:
        return CorruptDataError(reason, path=path, kind=kind)

    if len(data) > max_bytes:
        raise bad(f"{len(data)} bytes, more than the {max_bytes} a {kind} record may hold")
    containers = data.count(b"[") + data.count(b"{")
    if containers > MAX_CONTAINERS:
        raise bad(f"{containers} arrays or objects, more than {MAX_CONTAINERS}")
    if data.count(b",") >= MAX_VALUES:
        raise bad(f"more than {MAX_VALUES} values")
    try:
        text = data.decode("utf-8")
        value: Json = json.loads(
            text, parse_int=_parse_int, parse_float=_parse_float, parse_constant=_parse_constant
        )
    except _NumberOutOfRange as exc:
        raise bad(str(exc)) from None
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise bad(f"not JSON: {_short(exc)}") from None
    if containers > MAX_DEPTH and _depth(value) > MAX_DEPTH:
        raise bad(f"nested deeper than {MAX_DEPTH}")
    return value


def inflate(data: bytes, *, kind: str, path: str = "", limit: int = MAX_INFLATED_BYTES) -> bytes:
    """zlib-decompresses at most ``limit`` bytes; a longer, truncated or trailing-garbage stream is corrupt."""
    inflater = zlib.decompressobj()
    try:
        out = inflater.decompress(data, limit + 1)
    except zlib.error as exc:
        raise CorruptDataError(f"not a zlib stream: {exc}", path=path, kind=kind) from None
    if len(out) > limit or inflater.unconsumed_tail:
        raise CorruptDataError(f"inflates to more than {limit} bytes", path=path, kind=kind)
    if not inflater.eof or inflater.unused_data:
        raise CorruptDataError("truncated zlib stream, or data after its end", path=path, kind=kind)
    return out


class _NumberOutOfRange(Exception):
    pass


def _parse_int(text: str) -> int:
    if len(text.lstrip("-")) > _MAX_INT_DIGITS or abs(value := int(text)) > MAX_INT:
        raise _NumberOutOfRange(f"integer {text[:24]}… is out of range (±{MAX_INT})")
    return value


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NumberOutOfRange(f"number {text[:24]} is out of range (not a finite float)")
    return value


def _parse_constant(text: str) -> float:
    raise _NumberOutOfRange(f"{text} is not a number a record may hold")


def _depth(value: Json) -> int:
    deepest = 0
    stack: list[tuple[Json, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            item = list(item.values())
        if isinstance(item, list):
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in item if isinstance(child, list | dict))
    return deepest


def _short(exc: BaseException) -> str:
    text = str(exc).replace("\n", " ")
    return text if len(text) <= 200 else text[:200] + "…"


class _Fields:
    """Typed access to a decoded object's fields; every mistake is a CorruptDataError."""

    def __init__(self, value: Mapping[str, Json], kind: str, path: str) -> None:
        self.value, self.kind, self.path = value, kind, path

    def bad(self, reason: str) -> CorruptDataError:
        return CorruptDataError(reason, path=self.path, kind=self.kind)

    def integer(self, key: str, default: int | None = None) -> int:
        value = self.value.get(key, default)
        if value is None:
            raise self.bad(f"no {key!r}")
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise self.bad(f"{key!r} is not a non-negative integer: {_show(value)}")
        return value

    def optional_integer(self, key: str) -> int | None:
        return None if self.value.get(key) is None else self.integer(key)

    def text(self, key: str, default: str | None = None) -> str:
        value = self.value.get(key, default)
        if not isinstance(value, str) or len(value) > _MAX_TEXT:
            raise self.bad(f"{key!r} is not a string of at most {_MAX_TEXT} characters: {_show(value)}")
        return value

    def optional_number(self, key: str) -> float | None:
        value = self.value.get(key)
        if value is None:
            return None
        if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
            raise self.bad(f"{key!r} is not a non-negative number: {_show(value)}")
        return value

    def optional_text(self, key: str) -> str | None:
        return None if self.value.get(key) is None else self.text(key)

    def timestamp(self, key: str) -> str | None:
        """RFC 3339 text as written; numbers of seconds or milliseconds since the epoch are accepted too."""
        value = self.value.get(key)
        if value is None:
            return None
        if isinstance(value, str) and value:
            return self.text(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
            seconds = value / 1000.0 if value > 1e11 else float(value)
            if seconds <= _LATEST_SECONDS:
                return rfc3339(seconds)
        raise self.bad(f"{key!r} is not a timestamp: {_show(value)}")


def _show(value: Json) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:60] + "…"


def rfc3339(seconds: float) -> str:
    moment = datetime.fromtimestamp(seconds, tz=UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _dumps(value: Mapping[str, Json]) -> bytes:
    return json.dumps(value).encode()


def continuable(generation: int, *, path: str = "", kind: str = "") -> int:
    """A generation a coordinator may go on from: one it can count up from for ever (2^32 rebalances)
    without writing a record that the decoders here would refuse."""
    if generation > MAX_GENERATION:
        raise CorruptDataError(f"generation {generation} leaves no room to count up (limit {MAX_GENERATION})",
                               path=path, kind=kind)
    return generation


# -- G/barrier -------------------------------------------------------------------------------------


class Phase(StrEnum):
    STOP = "stop"
    ASSIGNED = "assigned"


@dataclass(frozen=True)
class BarrierRecord:
    """``G/barrier``: ``stop`` (every member stops and marks ``G/stopped/g<generation>``) or
    ``assigned`` (the assignments of ``generation`` are written), by the coordinator of ``epoch``."""

    phase: Phase
    generation: int
    epoch: int = 0


def encode_barrier(record: BarrierRecord) -> bytes:
    return _dumps({"phase": record.phase.value, "generation": record.generation, "epoch": record.epoch})


def decode_barrier(data: bytes, *, path: str = "") -> BarrierRecord:
    fields = _Fields(decode_object(data, kind="barrier", path=path), "barrier", path)
    phase = fields.text("phase", "")
    if phase not in (Phase.STOP.value, Phase.ASSIGNED.value):
        raise fields.bad(f"unknown phase {_show(phase)}")
    return BarrierRecord(Phase(phase), fields.integer("generation"), fields.integer("epoch", 0))


# -- G/state ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RebalanceRecord:
    """``G/state``: the last completed rebalance. Only ``generation`` is required to read one."""

    generation: int
    epoch: int | None = None
    coordinator: str | None = None
    algorithm: str | None = None
    started_at: str | None = None  # RFC 3339
    completed_at: str | None = None
    duration_ms: float | None = None
    moved: int | None = None
    members: int | None = None
    resources: int | None = None

    def to_dict(self) -> dict[str, Json]:
        """The record as written (camelCase keys), absent fields left out."""
        values: dict[str, Json] = {
            "generation": self.generation, "epoch": self.epoch, "coordinator": self.coordinator,
            "algorithm": self.algorithm, "startedAt": self.started_at, "completedAt": self.completed_at,
            "durationMs": self.duration_ms, "moved": self.moved, "members": self.members,
            "resources": self.resources,
        }
        return {k: v for k, v in values.items() if v is not None}


def encode_rebalance(record: RebalanceRecord) -> bytes:
    return _dumps(record.to_dict())


def decode_rebalance(data: bytes, *, path: str = "") -> RebalanceRecord:
    fields = _Fields(decode_object(data, kind="state", path=path), "state", path)
    return RebalanceRecord(
        generation=fields.integer("generation"), epoch=fields.optional_integer("epoch"),
        coordinator=fields.optional_text("coordinator"), algorithm=fields.optional_text("algorithm"),
        started_at=fields.timestamp("startedAt"), completed_at=fields.timestamp("completedAt"),
        duration_ms=fields.optional_number("durationMs"),
        moved=fields.optional_integer("moved"), members=fields.optional_integer("members"),
        resources=fields.optional_integer("resources"),
    )


def iso_time(ts: float) -> str:
    """A wall-clock time as the RFC 3339 text the coordinator writes."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + f".{int(ts % 1 * 1000):03d}Z"


# -- G/config --------------------------------------------------------------------------------------


def encode_config(config: GroupConfig) -> bytes:
    return json.dumps(config.to_json(), sort_keys=True).encode()


def decode_config(data: bytes, *, path: str = "") -> GroupConfig:
    value = decode_object(data, kind="config", path=path)
    try:
        return GroupConfig.from_json(value)
    except ValueError as exc:
        raise CorruptDataError(f"rejected group config: {_short(exc)}", path=path, kind="config") from None


# -- G/stopped/g<generation> -----------------------------------------------------------------------


def decode_generation_dir(name: str, *, path: str = "") -> int:
    """The generation in a name that :meth:`GroupPaths.stopped_generation` built (``g`` and 12 to 19 digits)."""
    match = _GENERATION_DIR.fullmatch(name)
    if match is None or int(match.group(1)) > MAX_INT:
        raise CorruptDataError(f"not a generation directory: {name[:40]!r}", path=path, kind="stopped")
    return int(match.group(1))


# -- G/assignment/<member node> --------------------------------------------------------------------


@dataclass(frozen=True)
class MemberAssignment:
    """What the coordinator of ``epoch`` proposes that one member works on, as of ``generation``;
    ``member`` is the member node it was written for (empty in records written before it was).
    ``stop`` is False for a Global Barrier generation that stopped nobody: members apply it at once
    instead of waiting for ``G/barrier`` to say ``assigned`` (docs/protocol.md)."""

    epoch: int
    generation: int
    resources: tuple[str, ...]
    algorithm: str = Algorithm.RESOURCE_BARRIER.value
    member: str = ""
    stop: bool = True

    def payload(self) -> dict[str, Json]:
        value: dict[str, Json] = {
            "epoch": self.epoch, "generation": self.generation, "algorithm": self.algorithm,
            "resources": list(self.resources),
        }
        if self.member:
            value["member"] = self.member
        if not self.stop:
            value["stop"] = False
        return value


@dataclass(frozen=True)
class Blob:
    """An encoded assignment: the header znode's data, and its chunk children (name -> data; none
    when the value is inline)."""

    header: bytes
    chunks: dict[str, bytes]


@dataclass(frozen=True)
class AssignmentHeader:
    """A decoded header: the value itself (``inline``), or the assignment's fields and the chunk
    children that hold its resource names, in order."""

    inline: MemberAssignment | None
    shell: MemberAssignment | None = None  # chunked: every field but the resources
    chunks: tuple[str, ...] = ()
    count: int = 0  # chunked: how many names the chunks hold together


def _chunk_bounds(names: tuple[str, ...]) -> list[tuple[str, ...]]:
    """Cuts sorted names into chunks whose boundaries the names themselves decide (content-defined):
    a chunk ends after a name whose CRC-32 is 0 modulo :data:`CHUNK_NAMES`, once it holds
    :data:`CHUNK_MIN` names, and always at :data:`CHUNK_MAX`. Adding or removing a name changes the
    chunk it falls in (rarely its neighbour too), never the others: so a rebalance rewrites chunks in
    proportion to the resources it moves, not to the member's whole list."""
    chunks: list[tuple[str, ...]] = []
    start = 0
    for i, name in enumerate(names):
        size = i + 1 - start
        if size >= CHUNK_MAX or (size >= CHUNK_MIN and zlib.crc32(name.encode()) % CHUNK_NAMES == 0):
            chunks.append(names[start : i + 1])
            start = i + 1
    if start < len(names):
        chunks.append(names[start:])
    return chunks


def encode_chunk(names: tuple[str, ...]) -> tuple[str, bytes]:
    """A chunk child's name and data: the name is a digest of the data, so an unchanged chunk keeps
    its node from one generation to the next."""
    data = CHUNK_MAGIC + zlib.compress(_compact({"names": list(names)}), 6)
    return "c" + hashlib.sha256(data).hexdigest()[:CHUNK_ID_HEX], data


def encode_assignment(assignment: MemberAssignment, inline_names: int = INLINE_NAMES) -> Blob:
    """Compact JSON, zlib-compressed, inline in the header up to ``inline_names`` names; a longer
    list goes in content-addressed chunk children (sorted names, see :func:`_chunk_bounds`) that the
    header names in order."""
    if len(assignment.resources) <= inline_names or not assignment.resources:
        return Blob(MAGIC + b"I" + zlib.compress(_compact(assignment.payload()), 6), {})
    names = tuple(sorted(set(assignment.resources)))
    chunks = dict(encode_chunk(c) for c in _chunk_bounds(names))
    shell = assignment.payload()
    shell.pop("resources")
    shell.update(chunks=list(chunks), count=len(names))
    return Blob(MAGIC + b"C" + zlib.compress(_compact(shell), 6), chunks)


def _compact(value: Mapping[str, Json]) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def decode_assignment_header(data: bytes, *, path: str = "") -> AssignmentHeader:
    def bad(reason: str) -> CorruptDataError:
        return CorruptDataError(reason, path=path, kind="assignment")

    if len(data) > MAX_HEADER_BYTES:
        raise bad(f"{len(data)} bytes, more than the {MAX_HEADER_BYTES} an assignment header may hold")
    if not data.startswith(MAGIC) or len(data) < 4:
        raise bad("not a Rebalanser assignment (foreign or garbage data)")
    kind, body = data[3:4], data[4:]
    if kind == b"I":
        return AssignmentHeader(_assignment(inflate(body, kind="assignment", path=path), path))
    if kind == b"C":
        value = decode_object(inflate(body, kind="assignment", path=path), kind="assignment", path=path,
                              max_bytes=MAX_HEADER_BYTES)
        fields = _Fields(value, "assignment", path)
        chunks = value.get("chunks")
        if not isinstance(chunks, list) or not 1 <= len(chunks) <= MAX_CHUNKS:
            raise bad(f"no list of 1 to {MAX_CHUNKS} chunks")
        if not all(isinstance(c, str) and _CHUNK_ID.fullmatch(c) for c in chunks):
            raise bad("a chunk name is not a chunk digest")
        shell = _assignment(_compact({**value, "resources": []}), path)
        return AssignmentHeader(None, shell, tuple(cast(list[str], chunks)), fields.integer("count"))
    raise bad(f"unknown header kind {kind!r} (RB1P, the part layout of earlier versions, is no longer read)")


def decode_chunk(name: str, data: bytes, *, path: str = "") -> tuple[str, ...]:
    """A chunk child's names; its data must be what its name is the digest of."""
    def bad(reason: str) -> CorruptDataError:
        return CorruptDataError(reason, path=path, kind="assignment")

    if len(data) > MAX_PART_BYTES or not data.startswith(CHUNK_MAGIC):
        raise bad("not a Rebalanser assignment chunk")
    if "c" + hashlib.sha256(data).hexdigest()[:CHUNK_ID_HEX] != name:
        raise bad("a chunk's data does not match its name (partial or foreign write)")
    raw = inflate(data[len(CHUNK_MAGIC) :], kind="assignment", path=path, limit=MAX_CHUNK_INFLATED)
    names = decode_object(raw, kind="assignment", path=path, max_bytes=MAX_CHUNK_INFLATED).get("names")
    if not isinstance(names, list) or not are_valid_resource_names(names):
        raise bad("a chunk is not a list of resource names")
    return tuple(cast(list[str], names))


def join_chunks(header: AssignmentHeader, chunks: Mapping[str, tuple[str, ...]], *, path: str = "") -> MemberAssignment:
    """The assignment a chunked header names, from its chunks' names (``chunks``: every one it names)."""
    assert header.shell is not None
    names = [n for c in header.chunks for n in chunks[c]]
    if len(names) != header.count or any(a >= b for a, b in itertools.pairwise(names)):
        raise CorruptDataError("chunks do not add up to their header (partial or foreign write)", path=path,
                               kind="assignment")
    shell = header.shell
    return MemberAssignment(shell.epoch, shell.generation, tuple(names), shell.algorithm, shell.member, shell.stop)


def _assignment(payload: bytes, path: str) -> MemberAssignment:
    value = decode_object(payload, kind="assignment", path=path, max_bytes=MAX_INFLATED_BYTES)
    fields = _Fields(value, "assignment", path)
    resources = value.get("resources")
    if not isinstance(resources, list):
        raise fields.bad("no list of resource names")
    if not are_valid_resource_names(resources):
        name = next(n for n in resources if not (isinstance(n, str) and is_valid_resource_name(n)))
        raise fields.bad(f"{_show(name)} is not a resource name")
    names = tuple(cast(list[str], resources))
    algorithm = fields.text("algorithm", Algorithm.RESOURCE_BARRIER.value)
    if algorithm not in {a.value for a in Algorithm}:
        raise fields.bad(f"unknown algorithm {_show(algorithm)}")
    member = fields.optional_text("member") or ""
    stop = value.get("stop", True)
    if not isinstance(stop, bool):
        raise fields.bad(f"'stop' is {_show(stop)}, not true or false")
    return MemberAssignment(fields.integer("epoch"), fields.integer("generation"), names, algorithm, member, stop)


# -- G/clients/<member node> -----------------------------------------------------------------------


@dataclass(frozen=True)
class MemberRecord:
    """A member node's data, written once when the node is created. ``instance_digest`` (the SHA-256 of
    the container instance's nonce, :mod:`rebalanser.instance`) is None for a worker started without a
    termination-message file; ``pod_namespace``, ``pod``, ``pod_uid`` and ``container`` name the worker's
    container when known (docs/protocol.md, "Confirmed-death failover"). ``instance`` is the nonce in
    clear that member nodes written before the digest carried; it is read, never written."""

    member_id: str
    joined: float
    instance: str | None = None
    pod: str | None = None
    pod_uid: str | None = None
    instance_digest: str | None = None
    pod_namespace: str | None = None
    container: str | None = None


_MEMBER_TEXT = (("instance", "instance"), ("instanceDigest", "instance_digest"), ("pod", "pod"),
                ("podUid", "pod_uid"), ("podNamespace", "pod_namespace"), ("container", "container"))


def encode_member(record: MemberRecord) -> bytes:
    value: dict[str, Json] = {"id": record.member_id, "joined": record.joined}
    for key, attribute in _MEMBER_TEXT:
        if getattr(record, attribute) is not None:
            value[key] = getattr(record, attribute)
    return _dumps(value)


def decode_member(data: bytes, *, path: str = "") -> MemberRecord:
    fields = _Fields(decode_object(data, kind="member", path=path), "member", path)
    return MemberRecord(
        member_id=fields.text("id"),
        joined=fields.optional_number("joined") or 0.0,
        **{attribute: fields.optional_text(key) for key, attribute in _MEMBER_TEXT},
    )


# -- G/sessions/<guid>-<id> ------------------------------------------------------------------------

SESSION_RECORD_VERSION = 1
MAX_SESSION_RECORD_BYTES = 1024  # as written: about 100 bytes
_SESSION_ID = re.compile(r"[0-9a-f]{16}")
_SESSION_PASSWORD = re.compile(r"[0-9a-f]{32}")


@dataclass(frozen=True)
class SessionRecord:
    """The session a member joined in, written by that session in the ``multi`` that creates its member
    node: its id (as ZooKeeper gives it: a signed 64-bit number, like a ``Stat``'s ``ephemeralOwner``) and
    password (16 bytes). With both, the operator's confirmed-death failover attaches to the session and
    closes it (docs/protocol.md, "Confirmed-death failover"). ``repr`` never shows the password."""

    session_id: int
    password: bytes = field(repr=False)


def encode_session(record: SessionRecord) -> bytes:
    return _dumps({"version": SESSION_RECORD_VERSION, "sessionId": f"{record.session_id & 0xFFFFFFFFFFFFFFFF:016x}",
                   "password": record.password.hex()})


def decode_session(data: bytes, *, path: str = "") -> SessionRecord:
    """Only version 1 is read; the id is 16 and the password 32 lowercase hex digits, nothing else."""
    fields = _Fields(decode_object(data, kind="session", path=path, max_bytes=MAX_SESSION_RECORD_BYTES),
                     "session", path)
    version = fields.integer("version")
    if version != SESSION_RECORD_VERSION:
        raise fields.bad(f"session record version {version}, not {SESSION_RECORD_VERSION}")
    session, password = fields.text("sessionId"), fields.text("password")
    if not _SESSION_ID.fullmatch(session):
        raise fields.bad(f"'sessionId' is not 16 hex digits: {_show(session)}")
    if not _SESSION_PASSWORD.fullmatch(password):
        raise fields.bad("'password' is not 32 hex digits")
    unsigned = int(session, 16)
    return SessionRecord(unsigned - (1 << 64) if unsigned >= 1 << 63 else unsigned, bytes.fromhex(password))
