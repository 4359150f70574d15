"""A member runs one effect at a time: while any callback runs, the member's thread (which waits for
it) is inside exactly one effect executor. Its three machines' effects (joining and the session,
following, per-resource work) once ran on three engines that nested on one stack: a start callback
ran inside the resource step, inside the follower's effect, inside the member's join effect.

Evidence: the member thread's own stack, read from the callback thread at each callback, through a
join, a resync after a reset connection, a Global Barrier round's stop, a resource added and one
removed."""

from __future__ import annotations

import sys
import threading
from collections.abc import Mapping, Sequence

import pytest
from kazoo.client import KazooClient
from rebalanser.client import Client
from rebalanser.config import Algorithm
from rebalanser.options import Options

from tests.chaos.proxy import FaultProxy
from tests.integration.conftest import add_resources
from tests.support.recorder import Recorder
from tests.support.workers import wait_for

pytestmark = pytest.mark.zk

EXECUTOR = "_execute"  # the effect dispatcher (here the member loop's; on main also the follower's)


class StackDepths(Recorder):
    """At each callback: how many effect executors are on the member thread's stack."""

    def __init__(self) -> None:
        super().__init__()
        self.member: threading.Thread | None = None
        self.depths: list[tuple[str, int]] = []

    def _depth(self, label: str) -> None:
        member = next(t for t in threading.enumerate() if t.name == "rebalanser-member")
        frame = sys._current_frames().get(member.ident or 0)
        depth = 0
        while frame is not None:
            depth += frame.f_code.co_name == EXECUTOR
            frame = frame.f_back
        with self.lock:
            self.depths.append((label, depth))

    def on_assigned(self, resources: Mapping[str, int]) -> None:
        self._depth(f"on_assigned {sorted(resources)}")
        super().on_assigned(resources)

    def on_revoked(self, resources: Sequence[str]) -> None:
        self._depth(f"on_revoked {sorted(resources)}")
        super().on_revoked(resources)



@pytest.mark.parametrize("algorithm", [Algorithm.RESOURCE_BARRIER, Algorithm.GLOBAL_BARRIER])
def test_no_effect_runs_while_another_is_on_the_member_stack(
    zk: KazooClient, group_path: str, proxy: FaultProxy, algorithm: Algorithm
) -> None:
    add_resources(zk, group_path, ["a", "b"])
    handler = StackDepths()
    client = Client(Options(proxy.hosts, group_path, member_id="m", create_group=True, session_timeout=4,
                            min_interval=0.1, algorithm=algorithm), handler)
    try:
        client.start(timeout=30)
        wait_for(lambda: handler.owned == {"a", "b"}, 30, lambda: f"owned {handler.owned}")
        assert proxy.cut() >= 1
        add_resources(zk, group_path, ["c"])
        wait_for(lambda: handler.owned == {"a", "b", "c"}, 30, lambda: f"owned {handler.owned}")
        zk.delete(f"{group_path}/resources/a")
        wait_for(lambda: handler.owned == {"b", "c"}, 30, lambda: f"owned {handler.owned}")
    finally:
        client.stop(timeout=30)
    assert len(handler.depths) >= 4, handler.depths
    assert {depth for _, depth in handler.depths} == {1}, handler.depths
