"""The batched sends of a member's ZooKeeper connection (rebalanser.batchedsends), driven as kazoo's
loop drives it, over a real wake-up pipe: one turn sends every request already queued and woken, in
order; a request queued but not yet woken, one queued after a ``close``, and those beyond the batch's
cap wait for the next turn."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.protocol.serialization import Close, GetData
from rebalanser.batchedsends import MAX_BATCH, BatchedSends


class _Recorded(BatchedSends):
    """Records the requests written instead of writing them to a server."""

    sent: list[Any]
    turns: int

    def _submit(self, request: Any, timeout: float, xid: int | None = None) -> None:
        self.sent.append(request)

    def _send_request(self, read_timeout: float, connect_timeout: float) -> None:
        self.turns += 1  # only kazoo's loop calls this; the batch calls the parent's
        super()._send_request(read_timeout, connect_timeout)


@pytest.fixture
def client() -> Iterator[KazooClient]:
    zk = KazooClient(hosts="127.0.0.1:1")  # never started: its queue and its connection only
    conn = zk._connection
    conn.__class__ = _Recorded
    conn.sent, conn.turns, conn._xid = [], 0, 0
    conn._read_sock, conn._write_sock = socket.socketpair()
    yield zk
    conn._read_sock.close()
    conn._write_sock.close()


def _queue(zk: KazooClient, request: Any, woken: bool = True) -> None:
    """What kazoo's ``_call`` does: the request queued, then (usually at once) the loop woken."""
    zk._queue.append((request, zk.handler.async_result()))
    if woken:
        zk._connection._write_sock.send(b"\0")


def _pipe_holds(zk: KazooClient) -> int:
    try:
        return len(zk._connection._read_sock.recv(1024, socket.MSG_PEEK | socket.MSG_DONTWAIT))
    except BlockingIOError:
        return 0


def _turn(zk: KazooClient) -> None:
    zk._connection._send_request(10.0, 10.0)


def test_one_turn_sends_every_woken_request_in_order(client: KazooClient) -> None:
    requests = [GetData(f"/g/assignment/m/c{i}", None) for i in range(15)]
    for request in requests:
        _queue(client, request)
    _turn(client)
    conn = client._connection
    assert conn.sent == requests and conn.turns == 1, "one turn of the loop, fifteen requests, in queue order"
    assert [r for r, _, _ in client._pending] == requests, "kazoo expects their replies in that order"
    assert not client._queue and _pipe_holds(client) == 0, "a wake-up byte consumed per request sent"


def test_a_request_not_yet_woken_waits_for_its_byte(client: KazooClient) -> None:
    first, late = GetData("/a", None), GetData("/b", None)
    _queue(client, first)
    _queue(client, late, woken=False)  # its caller has not written the byte yet
    _turn(client)  # would block in kazoo's receive of the byte if it were sent
    assert client._connection.sent == [first] and list(client._queue) == [(late, client._queue[0][1])]
    client._connection._write_sock.send(b"\0")
    _turn(client)
    assert client._connection.sent == [first, late]


def test_a_close_ends_the_batch(client: KazooClient) -> None:
    before, after = GetData("/a", None), GetData("/b", None)
    _queue(client, before)
    _queue(client, Close())
    _queue(client, after)
    _turn(client)
    sent = client._connection.sent
    assert sent[0] == before and [r.type for r in sent[1:]] == [Close.type], "nothing is sent after a close"
    assert len(client._queue) == 1 and _pipe_holds(client) == 1


def test_a_turn_sends_at_most_the_cap(client: KazooClient) -> None:
    for i in range(MAX_BATCH + 3):
        _queue(client, GetData(f"/r{i}", None))
    _turn(client)
    assert len(client._connection.sent) == MAX_BATCH and len(client._queue) == 3 and _pipe_holds(client) == 3
