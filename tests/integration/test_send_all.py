"""Requests sent together through kazoo's queue (rebalanser.kazoo_private.send_all, with the member
connection's batched sends, rebalanser.batchedsends), against a real ZooKeeper server: each answer
is its own request's, in order, errors included; a closed client answers each with its error; and
a member's client sends a burst of reads in one turn of its connection's loop."""

from __future__ import annotations

from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionClosedError, NoNodeError
from kazoo.protocol.serialization import GetData
from rebalanser.kazoo_private import full_path, send_all
from rebalanser.options import Options
from rebalanser.session import make_client


def _reads(zk: KazooClient, paths: list[str]) -> list[Any]:
    return [GetData(full_path(zk, p), None) for p in paths]


def _answers(results: list[Any]) -> list[Any]:
    answers: list[Any] = []
    for result in results:
        try:
            answers.append(result.get(timeout=10)[0])
        except NoNodeError:
            answers.append("NoNode")
    return answers


@pytest.fixture
def member(zk_hosts: str) -> Any:
    client = make_client(Options(zk_hosts, "/g", member_id="m"))
    client.start(timeout=15)
    yield client
    client.stop()
    client.close()


def test_each_answer_is_its_own_requests(member: KazooClient, zk: KazooClient, group_path: str) -> None:
    paths = [f"{group_path}/c{i}" for i in range(40)]
    for i, path in enumerate(paths):
        if i % 7:
            zk.create(path, str(i).encode(), makepath=True)
    assert _answers(send_all(member, _reads(member, paths))) == [
        str(i).encode() if i % 7 else "NoNode" for i in range(len(paths))]


def test_a_burst_leaves_in_one_turn_of_the_loop(member: KazooClient, zk: KazooClient, group_path: str) -> None:
    paths = [f"{group_path}/c{i}" for i in range(20)]
    for path in paths:
        zk.create(path, b"x", makepath=True)
    turns: list[int] = []
    connection = member._connection
    original = type(connection).__mro__[1]._send_request  # BatchedSends's, as kazoo's loop calls it

    def counted(read_timeout: float, connect_timeout: float) -> None:
        turns.append(len(member._queue))
        original(connection, read_timeout, connect_timeout)

    connection._send_request = counted
    try:
        assert _answers(send_all(member, _reads(member, paths))) == [b"x"] * 20
    finally:
        del connection._send_request
    assert len(turns) <= 2, f"20 reads queued at once took {len(turns)} turns of the connection's loop"


def test_a_closed_client_answers_each_request_with_its_error(zk_hosts: str) -> None:
    client = make_client(Options(zk_hosts, "/g", member_id="m"))
    client.start(timeout=15)
    client.stop()
    results = send_all(client, _reads(client, ["/a", "/b"]))
    for result in results:
        with pytest.raises(ConnectionClosedError):
            result.get(timeout=5)
