"""The connection thread's wait (:mod:`rebalanser.pollselect`): the same answers as kazoo's own
``selector_select`` on real sockets, read, write, hang-up, time-out and a closed descriptor."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest
from kazoo.handlers.utils import selector_select
from rebalanser.pollselect import PollingHandler, poll_select


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    a, b = socket.socketpair()
    try:
        yield a, b
    finally:
        a.close()
        b.close()


def both(rlist: list[object], wlist: list[object], timeout: float) -> tuple[object, object]:
    return poll_select(rlist, wlist, [], timeout), selector_select(rlist, wlist, [], timeout)


def test_nothing_to_read_times_out_after_the_timeout(pair: tuple[socket.socket, socket.socket]) -> None:
    a, _ = pair
    started = time.monotonic()
    assert poll_select([a], [], [], 0.05) == ([], [], [])
    assert time.monotonic() - started >= 0.045
    assert both([a], [], 0) == (([], [], []), ([], [], []))


def test_a_socket_with_data_is_readable_and_a_socket_with_room_writable(
    pair: tuple[socket.socket, socket.socket]
) -> None:
    a, b = pair
    b.send(b"x")
    assert both([a], [], 1.0) == (([a], [], []), ([a], [], []))
    assert both([], [b], 1.0) == (([], [b], []), ([], [b], []))
    assert PollingHandler().select([a, b], [], [], 1.0) == ([a], [], [])


def test_a_peer_gone_is_readable(pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    b.close()
    assert both([a], [], 1.0) == (([a], [], []), ([a], [], []))


def test_a_closed_socket_is_refused_as_kazoos_is(pair: tuple[socket.socket, socket.socket]) -> None:
    a, _ = pair
    a.close()
    with pytest.raises(TypeError):
        selector_select([a], [], [], 0)
    with pytest.raises(TypeError):
        poll_select([a], [], [], 0)


def test_a_negative_timeout_is_refused() -> None:
    with pytest.raises(ValueError):
        poll_select([], [], [], -1)
