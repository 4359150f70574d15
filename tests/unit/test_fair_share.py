"""The operator's threads shared out among namespaces (controller/share.py): one namespace's blocked
steps hold at most its share, and another namespace's steps run meanwhile."""

from __future__ import annotations

import threading
from concurrent.futures import CancelledError, ThreadPoolExecutor

import pytest
from rebalanser_operator.controller.share import FairShare
from rebalanser_operator.controller.strand import Strand

WAIT = 10.0


def test_a_namespace_holds_at_most_its_share_and_another_runs_meanwhile() -> None:
    executor = ThreadPoolExecutor(max_workers=4)
    shares = FairShare(executor, per_lane=2)
    release = threading.Event()
    started = threading.Semaphore(0)

    def slow() -> str:
        started.release()
        release.wait(WAIT)
        return "slow"

    try:
        slow_ones = [Strand(shares.lane("noisy")).submit(slow) for _ in range(20)]
        for _ in range(2):
            assert started.acquire(timeout=WAIT)
        assert not started.acquire(timeout=0.2), "a third step of the namespace started: more than its share"
        assert shares.running("noisy") == 2
        quiet = Strand(shares.lane("quiet")).submit(lambda: "quiet")
        assert quiet.result(timeout=WAIT) == "quiet", "the other namespace waited for the noisy one"
        release.set()
        assert [f.result(timeout=WAIT) for f in slow_ones] == ["slow"] * 20, "queued steps run in the end"
        assert shares.running("noisy") == 0
    finally:
        release.set()
        executor.shutdown(wait=True)


def test_queued_steps_fail_when_the_pool_shuts_down() -> None:
    executor = ThreadPoolExecutor(max_workers=1)
    lane = FairShare(executor, per_lane=1).lane("a")
    release = threading.Event()
    running = lane.submit(lambda: release.wait(WAIT))
    queued = lane.submit(lambda: "never")
    executor.shutdown(wait=False, cancel_futures=True)
    release.set()
    assert running.result(timeout=WAIT) is True
    with pytest.raises(CancelledError):
        queued.result(timeout=WAIT)
    with pytest.raises(CancelledError):
        lane.submit(lambda: "after").result(timeout=WAIT)
