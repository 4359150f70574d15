"""Every znode path of a group is built here, and nowhere else.

Layout under the group path ``G`` (the public parts are stated in the README and docs/operator.md; the
rest is documented in ``docs/protocol.md``)::

    G/resources/<name>        persistent   one child per resource
    G/clients/<guid>-<id>-<seq> ephemeral-sequential, one per live member
    G/sessions/<guid>-<id>    ephemeral    the member's session id and password (read by the failover only)
    G/epoch                   persistent   coordinator epoch = its version
    G/config                  persistent   JSON written by the operator
    G/owners/<name>           ephemeral    exclusive claim on a resource by its owner's session
    G/assignment/<member>     persistent   the coordinator's proposal for one member (+ part children)
    G/barrier                 persistent   Global Barrier phase and generation
    G/stopped/<gen>/<id>      ephemeral    Global Barrier stop markers, per generation
    G/state                   persistent   JSON summary of the last completed rebalance
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

from rebalanser.errors import InvalidInputError
from rebalanser.zk import validate_path

_SEGMENT = re.compile(r"^[A-Za-z0-9_.:@+=-]{1,200}$")
_MEMBER_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:@+=-]{0,127}$")
_NAMES = re.compile(r"[A-Za-z0-9_.:@+=-]{1,200}(?:\n[A-Za-z0-9_.:@+=-]{1,200})*")  # _SEGMENT, one per line
_GUID_LEN = 32
_SEQ_LEN = 10


def validate_group_path(path: str) -> str:
    """Returns the normalised group path or raises :class:`InvalidInputError`."""
    if not isinstance(path, str) or not path.startswith("/") or path == "/":
        raise InvalidInputError(f"group path must be an absolute znode path other than '/', got {path!r}")
    try:
        trimmed = validate_path(path.rstrip("/"), "group path")  # ZooKeeper's rules, then ours
    except InvalidInputError as exc:
        raise InvalidInputError(f"group path {path!r} has an invalid segment: {exc}") from None
    for segment in trimmed.split("/")[1:]:
        if not _SEGMENT.fullmatch(segment):
            raise InvalidInputError(
                f"group path {path!r}: segment {segment!r} must match {_SEGMENT.pattern}"
            )
    return trimmed


def validate_resource_name(name: str) -> str:
    if not isinstance(name, str) or name in (".", "..") or not _SEGMENT.fullmatch(name):
        raise InvalidInputError(f"resource name {name!r} must match {_SEGMENT.pattern} and not be '.' or '..'")
    return name


def is_valid_resource_name(name: str) -> bool:
    return name not in (".", "..") and bool(_SEGMENT.fullmatch(name))


def are_valid_resource_names(names: Sequence[object]) -> bool:
    """:func:`is_valid_resource_name` of every element, in one pass (an assignment may list 100,000)."""
    try:
        text = "\n".join(cast(Sequence[str], names))  # in C; TypeError: an element is not a string
    except TypeError:
        return False
    # One name per line: a name holding a newline would otherwise read as two valid ones.
    return not names or (text.count("\n") == len(names) - 1 and _NAMES.fullmatch(text) is not None
                         and "." not in names and ".." not in names)


def validate_member_id(member_id: str) -> str:
    if not isinstance(member_id, str) or not _MEMBER_ID.fullmatch(member_id):
        raise InvalidInputError(f"member id {member_id!r} must be 1 to 128 letters, digits and _.:@+=- "
                                "(starting with a letter or a digit)")
    return member_id


@dataclass(frozen=True, order=True)
class MemberNode:
    """A parsed ``G/clients`` child: ordered by sequence number (the election order)."""

    seq: int
    member_id: str
    guid: str
    name: str

    @staticmethod
    def parse(name: str) -> MemberNode | None:
        """Parses a member znode name; returns None for foreign children (never crashes on garbage)."""
        if len(name) < _GUID_LEN + _SEQ_LEN + 3:
            return None
        guid, seq = name[:_GUID_LEN], name[-_SEQ_LEN:]
        member_id = name[_GUID_LEN + 1 : -_SEQ_LEN - 1]
        if name[_GUID_LEN] != "-" or name[-_SEQ_LEN - 1] != "-" or not seq.isdigit():
            return None
        if not all(c in "0123456789abcdef" for c in guid) or not _MEMBER_ID.fullmatch(member_id):
            return None
        return MemberNode(int(seq), member_id, guid, name)


def member_prefix(guid: str, member_id: str) -> str:
    return f"{guid}-{member_id}-"


@dataclass(frozen=True)
class GroupPaths:
    root: str

    @staticmethod
    def of(path: str) -> GroupPaths:
        return GroupPaths(validate_group_path(path))

    @property
    def resources(self) -> str:
        return f"{self.root}/resources"

    @property
    def clients(self) -> str:
        return f"{self.root}/clients"

    @property
    def sessions(self) -> str:
        return f"{self.root}/sessions"

    @property
    def epoch(self) -> str:
        return f"{self.root}/epoch"

    @property
    def config(self) -> str:
        return f"{self.root}/config"

    @property
    def owners(self) -> str:
        return f"{self.root}/owners"

    @property
    def assignment(self) -> str:
        return f"{self.root}/assignment"

    @property
    def barrier(self) -> str:
        return f"{self.root}/barrier"

    @property
    def stopped(self) -> str:
        return f"{self.root}/stopped"

    @property
    def state(self) -> str:
        return f"{self.root}/state"

    def resource(self, name: str) -> str:
        return f"{self.resources}/{name}"

    def owner(self, resource: str) -> str:
        return f"{self.owners}/{resource}"

    def client(self, node: str) -> str:
        return f"{self.clients}/{node}"

    def session_record(self, member_node: str) -> str:
        """The session record created with ``member_node`` in one ``multi``: named by the member node's name
        without its sequence number (``<guid>-<id>``), which the ``multi`` cannot know before it runs
        (``member_node`` may also be the node's prefix, ``<guid>-<id>-``)."""
        return f"{self.sessions}/{member_node.rsplit('-', 1)[0]}"

    def member_assignment(self, member_node: str) -> str:
        return f"{self.assignment}/{member_node}"

    def assignment_part(self, member_node: str, part: str) -> str:
        return f"{self.assignment}/{member_node}/{part}"

    def stopped_generation(self, generation: int) -> str:
        return f"{self.stopped}/g{generation:012d}"

    def stop_marker(self, generation: int, member_node: str) -> str:
        return f"{self.stopped_generation(generation)}/{member_node}"

    def containers(self) -> tuple[str, ...]:
        """Persistent znodes every participant may create when missing."""
        return (self.root, self.resources, self.clients, self.owners, self.assignment, self.stopped, self.sessions)
