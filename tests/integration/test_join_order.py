"""Joining follows the order of the member's session events: a join step queued while the member's
thread was busy never joins a session whose start the member has not processed yet."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence

from kazoo.client import KazooClient
from rebalanser.client import Client
from rebalanser.membership import create_member_node
from rebalanser.options import Options
from rebalanser.paths import GroupPaths

from tests.integration.conftest import add_resources
from tests.integration.test_session import expire_session
from tests.support.recorder import Recorder
from tests.support.workers import wait_for

SESSION_TIMEOUT = 1.0
SAME_ID_PATIENCE = 2 * SESSION_TIMEOUT + 5  # the library's wait for an earlier incarnation's node


class _SlowStop(Recorder):
    """Holds the member's thread in ``on_revoked`` once ``hold`` is set, until ``release`` is."""

    def __init__(self) -> None:
        super().__init__()
        self.hold = threading.Event()
        self.entered = threading.Event()
        self.release = threading.Event()

    def on_revoked(self, resources: Sequence[str]) -> None:
        if self.hold.is_set():
            self.entered.set()
            self.release.wait(60)
        super().on_revoked(resources)


class _Said(logging.Handler):
    """Set once the library logs a message containing ``text``."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text, self.seen = text, threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if self.text in record.getMessage():
            self.seen.set()


def test_a_join_step_queued_before_a_session_expiry_joins_the_new_session_once(
    zk_hosts: str, zk: KazooClient, group_path: str
) -> None:
    """The campaign's liveness failure (seed 7105, expiry-storm): a worker restarted after a kill had
    waited for its earlier incarnation's node to expire, which armed a timer (2T + 5 s) that posts a
    join step. Later its thread was busy in a slow ``on_revoked`` while its session expired and a new
    one was established; the timer's join step was queued ahead of the LOST and CONNECTED events. It
    joined the new session at once (its member state still named the old one), then LOST cleared
    that, and CONNECTED joined again: two member nodes in one session. The coordinator assigns to the
    older one; the member follows the newer one and never works again."""
    add_resources(zk, group_path, ["a", "b"])
    paths = GroupPaths.of(group_path)
    said = _Said("waiting for an earlier incarnation")
    library_log = logging.getLogger("rebalanser.client")
    level = library_log.level
    library_log.setLevel(logging.INFO)
    library_log.addHandler(said)
    handler = _SlowStop()
    client = Client(Options(zk_hosts, group_path, member_id="m", create_group=True, session_timeout=SESSION_TIMEOUT,
                            min_interval=0.1, stop_timeout=60), handler)
    earlier = KazooClient(hosts=zk_hosts, timeout=10)
    earlier.start(timeout=15)
    starter: threading.Thread | None = None
    try:
        create_member_node(earlier, paths, "m", time.monotonic() + 10)  # an earlier incarnation's node
        starter = threading.Thread(target=client.start, daemon=True)
        starter.start()
        assert said.seen.wait(20), "the member never waited for the earlier incarnation's node"
        patience_ends = time.monotonic() + SAME_ID_PATIENCE
        earlier.stop()  # its node goes: the member joins
        wait_for(lambda: handler.owned == {"a", "b"}, 20, lambda: f"never assigned: {handler.owned}")
        old_session = client.zk.client_id

        handler.hold.set()
        zk.delete(f"{group_path}/resources/b")
        assert handler.entered.wait(20), "b was never revoked"
        # The member's thread is busy now. Its timer for the earlier incarnation runs out meanwhile
        # (a fixed deadline the library set when it started waiting, not something to synchronise on).
        time.sleep(max(0.0, patience_ends - time.monotonic()) + 0.5)
        expire_session(zk_hosts, client)
        wait_for(lambda: client.zk.client_id not in (None, old_session), 20, "no new session")
        handler.release.set()

        wait_for(lambda: handler.owned == {"a"} and client.owns("a"), 20,
                 lambda: f"owned {handler.owned}, sessions {handler.sessions}, "
                         f"members {zk.get_children(paths.clients)}")
        members = zk.get_children(paths.clients)
        assert len(members) == 1, f"one member, one member node: {members}"
    finally:
        handler.release.set()
        library_log.removeHandler(said)
        library_log.setLevel(level)
        client.stop(10)
        earlier.stop()
        earlier.close()
        if starter is not None:
            starter.join(10)
