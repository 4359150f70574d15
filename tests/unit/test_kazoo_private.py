"""The contract with kazoo's private surface (rebalanser.kazoo_private): every private name the library
relies on exists, with the signature it assumes. A kazoo upgrade that changes one fails here."""

from __future__ import annotations

import inspect
from collections import defaultdict, deque

from kazoo.client import KazooClient
from kazoo.protocol import connection, paths
from kazoo.protocol.states import Callback, KeeperState
from rebalanser import kazoo_private
from rebalanser.batchedsends import BatchedSends
from rebalanser.bufferedreads import BufferedConnection
from rebalanser.options import Options
from rebalanser.session import make_client


def parameters(function: object) -> list[str]:
    return list(inspect.signature(function).parameters)  # type: ignore[arg-type]


def test_the_private_methods_have_the_signatures_the_library_assumes() -> None:
    assert parameters(KazooClient._call) == ["self", "request", "async_object"]
    assert parameters(KazooClient._session_callback) == ["self", "state"]
    assert parameters(paths._prefix_root) == ["root", "path", "trailing"]
    handler = connection.ConnectionHandler
    assert parameters(handler._invoke) == ["self", "timeout", "request", "xid"]
    assert inspect.signature(handler._invoke).parameters["xid"].default is None
    assert parameters(handler._read) == ["self", "length", "timeout"]
    assert parameters(handler._read_socket) == ["self", "read_timeout"]
    assert parameters(handler._send_request) == ["self", "read_timeout", "connect_timeout"]
    assert callable(handler._socket_error_handling)
    assert connection.CLOSE_RESPONSE is kazoo_private.CLOSE_RESPONSE
    assert Callback._fields == ("type", "func", "args")  # claimcheck queues a marker behind the watches


def test_a_client_has_the_private_state_the_library_uses() -> None:
    zk = KazooClient(hosts="127.0.0.1:1", timeout=7)
    assert isinstance(zk._data_watchers, defaultdict) and zk._data_watchers["/x"] == set()
    assert kazoo_private.requested_timeout(zk) == 7.0
    assert isinstance(zk._connection, connection.ConnectionHandler)
    assert zk._connection._socket is None and zk._connection.handler is zk.handler
    assert zk._connection._read_sock is None and isinstance(zk._queue, deque)  # batchedsends, send_all
    assert zk._connection._write_sock is None and zk._state == KeeperState.CLOSED  # send_all


def test_the_helpers_do_what_the_library_needs() -> None:
    zk = KazooClient(hosts="127.0.0.1:1/base")
    assert kazoo_private.full_path(zk, "/g/owners/a") == "/base/g/owners/a"
    assert kazoo_private.full_path(zk, "/g/owners/", trailing=True) == "/base/g/owners/"

    def watcher(_event: object) -> None:
        pass

    kazoo_private.add_data_watcher(zk, "/base/x", watcher)
    assert zk._data_watchers["/base/x"] == {watcher}
    kazoo_private.discard_data_watcher(zk, "/base/x", watcher)
    assert "/base/x" not in zk._data_watchers
    kazoo_private.discard_data_watcher(zk, "/base/y", watcher)  # nothing there: nothing happens


def test_the_member_connection_is_kazoos_with_buffered_reads_and_the_handshake_recorded() -> None:
    zk = make_client(Options("127.0.0.1:1", "/g", member_id="m"))
    assert isinstance(zk._connection, BufferedConnection) and isinstance(zk._connection, BatchedSends)
    assert isinstance(zk._connection, connection.ConnectionHandler)
    assert type(zk._connection).__name__ == "_RecordingConnection"


def test_a_state_observing_client_sees_every_session_state_first() -> None:
    seen: list[KeeperState] = []

    class Observer(kazoo_private.StateObservingClient):
        def on_state(self, state: KeeperState) -> None:
            seen.append(state)

    zk = Observer(hosts="127.0.0.1:1")
    zk._session_callback(KeeperState.EXPIRED_SESSION)
    assert seen == [KeeperState.EXPIRED_SESSION]
