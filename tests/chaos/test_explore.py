"""The bounded subset of the every-request explorer (:mod:`tests.chaos.explore`) that runs in
``make test``: the fault points that find issue 19's findings A, B and F, and a clean join and failover
point. The whole product (every scenario, every request, every fault) is ``make chaos``.

Points are chosen by what the request is (``nth_request``), not by a fixed index, so that a change in the
number of reads before it does not move the point off its target.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.chaos.explore import Explorer, Point, describe, nth_request
from tests.support.zk import ZkCluster


@pytest.fixture(scope="module")
def explorer(chaos_single: ZkCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Explorer]:
    yield Explorer(chaos_single, Path(tmp_path_factory.mktemp("explore")))


def _run(explorer: Explorer, scenario: str, pick: int, fault: str, operation: str) -> Point:
    from tests.chaos.explore import SCENARIOS

    recording = explorer.recording(scenario)
    assert not recording.violations, f"the fault-free {scenario} run itself: {recording.violations}"
    point = explorer.point(SCENARIOS[scenario], recording, pick, fault)
    assert point.operation == operation, describe(point)
    assert point.fired, f"the fault was never injected: {describe(point)}"
    return point


def test_standby_release_lost(explorer: Explorer) -> None:
    """B: the member steps aside; its one-multi release of every claim is lost with the connection.
    Its claims must not stay with its live session while nobody works on them."""
    recording = explorer.recording("standby")
    point = _run(explorer, "standby", nth_request(recording, "w1", "multi", 2), "drop", "multi")
    assert not point.violations, describe(point)


def test_standby_member_node_delete_flapping(explorer: Explorer) -> None:
    """A: on standby, deleting the member node fails, and keeps failing until the stuck callback has
    returned. The member must not rejoin beside its old node (two member nodes in one session)."""
    recording = explorer.recording("standby")
    point = _run(explorer, "standby", nth_request(recording, "w1", "delete", 2), "flap", "delete")
    assert not point.violations, describe(point)


def test_token_read_lost_after_claim(explorer: Explorer) -> None:
    """F: the claim multi succeeds, the token read after it is lost, and the plan takes the resource
    back before the member reconnects. The claim must not stay held by a session that does not work on it."""
    recording = explorer.recording("claim-race")
    claim = nth_request(recording, "w1", "multi")
    point = _run(explorer, "claim-race", nth_request(recording, "w1", "exists", after=claim), "flap", "exists")
    assert not point.violations, describe(point)


def test_join_member_node_reply_lost(explorer: Explorer) -> None:
    """A joiner's member node (with its session record, in one multi) is created but the reply is lost:
    still exactly one member node."""
    recording = explorer.recording("join")
    point = _run(explorer, "join", nth_request(recording, "w2", "multi"), "lose-reply", "multi")
    assert not point.violations, describe(point)


def test_failover_session_close_reply_lost(explorer: Explorer) -> None:
    """The failover's close of the dead member's session is applied but its reply lost; the next pass
    finds the session ended (issue 28: the failover closes the session, it deletes no claim)."""
    recording = explorer.recording("failover")
    point = _run(explorer, "failover", nth_request(recording, "failover", "closeSession"), "lose-reply",
                 "closeSession")
    assert not point.violations, describe(point)
