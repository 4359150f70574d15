"""No start callback runs for a claim that is not verified on the current connection.

The scene: a member wins its claim on r; between that claim round and ``on_assigned`` its loop is held
(the injected metrics object, told of the new owned count on the member's thread, blocks), and
meanwhile its connection is reset, the claim deleted from outside, and the member reconnects in its
session. The claim was verified on the old connection only, and it is gone: ``on_assigned`` must never
be called with its token. The member claims r again (a new token) and starts that.

Evidence: the tokens ``on_assigned`` was called with, and the claim's creation zxid read by the test
before it deleted the claim."""

from __future__ import annotations

import threading
from collections.abc import Mapping

import pytest
from kazoo.client import KazooClient
from rebalanser.client import Client
from rebalanser.metrics import NoMetrics
from rebalanser.options import Options
from rebalanser.paths import GroupPaths

from tests.chaos.proxy import FaultProxy
from tests.integration.conftest import add_resources
from tests.support.recorder import Recorder
from tests.support.workers import wait_for

pytestmark = pytest.mark.zk


class Starts(Recorder):
    """Every ``on_assigned`` call's resources and tokens, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.starts: list[dict[str, int]] = []

    def on_assigned(self, resources: Mapping[str, int]) -> None:
        with self.lock:
            self.starts.append(dict(resources))
        super().on_assigned(resources)


class HoldAtFirstOwned(NoMetrics):
    """Blocks the member's thread the first time it owns something, until :meth:`release`."""

    def __init__(self) -> None:
        self.held = threading.Event()
        self._go = threading.Event()

    def owned(self, count: int) -> None:
        if count and not self.held.is_set():
            self.held.set()
            self._go.wait(60)

    def release(self) -> None:
        self._go.set()



def test_no_start_callback_for_a_claim_deleted_while_away_and_not_verified_since(
    zk: KazooClient, group_path: str, proxy: FaultProxy
) -> None:
    add_resources(zk, group_path, ["r"])
    paths = GroupPaths.of(group_path)
    hold, handler = HoldAtFirstOwned(), Starts()
    client = Client(Options(proxy.hosts, group_path, member_id="a", create_group=True, session_timeout=6,
                            min_interval=0.1, metrics=hold), handler)
    try:
        client.start(timeout=30)
        wait_for(hold.held.is_set, 30, "the member never won its claim on r")
        token = zk.exists(paths.owner("r")).czxid
        before = len(proxy.handshakes_ns)
        proxy.blackhole()
        proxy.cut()
        zk.delete(paths.owner("r"))
        proxy.restore()
        wait_for(lambda: len(proxy.handshakes_ns) > before, 20, "the member never reconnected")
        hold.release()
        wait_for(lambda: any(s.get("r", token) != token for s in handler.starts), 30,
                 lambda: f"r was never started under a new claim: starts {handler.starts}")
        stale = [s for s in handler.starts if s.get("r") == token]
        assert not stale, f"on_assigned ran with the deleted claim's token {token}: {handler.starts}"
        assert zk.exists(paths.owner("r")).czxid > token
    finally:
        hold.release()
        client.stop(timeout=30)
