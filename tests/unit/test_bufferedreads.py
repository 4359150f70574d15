"""The buffered reads of a member's ZooKeeper connection (rebalanser.bufferedreads) over a real socket
pair: messages split across receives, many messages in one, a closed socket, a new socket."""

from __future__ import annotations

import socket
import struct

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionDropped
from rebalanser.bufferedreads import CHUNK, BufferedConnection


def _framed(body: bytes) -> bytes:
    return struct.pack("!i", len(body)) + body


@pytest.fixture
def connection() -> BufferedConnection:
    zk = KazooClient(hosts="127.0.0.1:1")  # never started: only its handler is used
    conn = zk._connection
    conn.__class__ = BufferedConnection
    return conn


def _attach(conn: BufferedConnection) -> socket.socket:
    ours, theirs = socket.socketpair()
    conn._socket = ours
    return theirs


def test_many_messages_in_one_receive_are_read_one_by_one(connection: BufferedConnection) -> None:
    peer = _attach(connection)
    peer.sendall(_framed(b"first") + _framed(b"second") + _framed(b"x" * 3))
    assert connection._read(4, 1) == struct.pack("!i", 5)
    assert connection._read(5, 1) == b"first"
    assert connection._complete(), "the second message is already buffered"
    assert connection._read(4, 1) == struct.pack("!i", 6)
    assert connection._read(6, 1) == b"second"
    assert connection._read(4, 1) == struct.pack("!i", 3)
    assert connection._read(3, 1) == b"xxx"
    assert not connection._complete(), "nothing left"


def test_a_message_split_across_receives_is_read_whole(connection: BufferedConnection) -> None:
    peer = _attach(connection)
    body = bytes(range(256)) * (3 * CHUNK // 256)  # longer than one receive
    framed = _framed(body)
    peer.sendall(framed[:10])
    length = struct.unpack("!i", connection._read(4, 1))[0]
    assert not connection._complete()
    peer.sendall(framed[10:])
    assert connection._read(length, 5) == body


def test_a_partial_message_is_not_complete(connection: BufferedConnection) -> None:
    peer = _attach(connection)
    peer.sendall(_framed(b"abc") + _framed(b"defgh")[:6])
    connection._read(4, 1)
    connection._read(3, 1)
    assert not connection._complete()


def test_a_closed_socket_drops_the_connection(connection: BufferedConnection) -> None:
    peer = _attach(connection)
    peer.sendall(b"ab")
    peer.close()
    with pytest.raises(ConnectionDropped):
        connection._read(4, 1)


def test_a_new_socket_starts_with_an_empty_buffer(connection: BufferedConnection) -> None:
    peer = _attach(connection)
    peer.sendall(_framed(b"old") + _framed(b"left over"))
    connection._read(4, 1)
    connection._read(3, 1)
    assert connection._complete()
    fresh = _attach(connection)
    assert not connection._complete(), "what the old socket sent is not the new one's"
    fresh.sendall(_framed(b"new"))
    assert connection._read(4, 1) == struct.pack("!i", 3)
    assert connection._read(3, 1) == b"new"
