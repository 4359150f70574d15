"""RoleMatcher against a real ZooKeeper server."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient
from rebalanser.recipes import RoleMatcher

from tests.recipes.conftest import Child
from tests.recipes.proxy import ZkProxy
from tests.recipes.util import Recorder, StateLog, expire_session, wait_for

NewClient = Callable[..., KazooClient]


class Monitor:
    """Who holds what, across all workers, as told by their callbacks; flags any overlap."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.holders: dict[str, set[str]] = {}
        self.violations: list[str] = []
        self.timeline: list[tuple[float, str, str, str]] = []

    def acquired(self, worker: str, job: str) -> None:
        with self._lock:
            others = self.holders.setdefault(job, set()) - {worker}
            if others:
                self.violations.append(f"{worker} acquired {job} while {others} held it")
            self.holders[job].add(worker)
            self.timeline.append((time.monotonic(), "acquired", worker, job))

    def lost(self, worker: str, job: str) -> None:
        with self._lock:
            self.holders.setdefault(job, set()).discard(worker)
            self.timeline.append((time.monotonic(), "lost", worker, job))

    def holder(self, job: str) -> set[str]:
        with self._lock:
            return set(self.holders.get(job, set()))


class Worker:
    def __init__(self, client: KazooClient, path: str, identity: str, monitor: Monitor, max_jobs: int) -> None:
        self.events = Recorder()

        def acquired(job: str) -> None:
            monitor.acquired(identity, job)
            self.events(("acquired", job))

        def lost(job: str) -> None:
            monitor.lost(identity, job)
            self.events(("lost", job))

        self.matcher = RoleMatcher(
            client, path, identity=identity, on_job_acquired=acquired, on_job_lost=lost, max_jobs=max_jobs
        )

    def wait_holding(self, *jobs: str, timeout: float = 10.0) -> None:
        wait_for(
            lambda: self.matcher.held_jobs() == set(jobs),
            timeout,
            lambda: f"{self.matcher.identity} holds {set(self.matcher.held_jobs())}, expected {set(jobs)}",
        )

    def delivered(self, timeout: float = 10.0) -> list[Any]:
        """The callbacks' events once every callback queued so far has run. ``held_jobs()`` changes before
        its callback runs: the callbacks are queued (under the lock that changes it) to the matcher's callback
        thread, which runs them in order, so a no-op queued behind them has run only after them."""
        self.matcher._callbacks.submit(lambda: None).result(timeout)
        return self.events.events


@pytest.fixture
def monitor() -> Monitor:
    return Monitor()


@pytest.fixture
def workers(
    group_path: str, new_client: NewClient, monitor: Monitor
) -> Iterator[Callable[..., Worker]]:
    made: list[Worker] = []

    def make(identity: str, client: KazooClient | None = None, max_jobs: int = 1, start: bool = True) -> Worker:
        worker = Worker(client or new_client(), group_path, identity, monitor, max_jobs)
        made.append(worker)
        if start:
            worker.matcher.start()
        return worker

    yield make
    for worker in made:
        worker.matcher.stop()
    assert monitor.violations == []


def wait_applicants(zk: KazooClient, group_path: str, count: int) -> None:
    path = f"{group_path}/applicants"
    wait_for(
        lambda: zk.exists(path) is not None and len(zk.get_children(path)) == count,
        10,
        lambda: f"expected {count} applicants, have {zk.get_children(path) if zk.exists(path) else None}",
    )


def test_posted_job_is_acquired_by_an_applicant(workers: Callable[..., Worker]) -> None:
    w = workers("w1")
    w.matcher.post_job("job-a")
    w.wait_holding("job-a")
    assert w.matcher.assignments() == {"job-a": "w1"}


def test_each_job_gets_exactly_one_holder(
    workers: Callable[..., Worker], zk: KazooClient, group_path: str
) -> None:
    ws = [workers(f"w{i}") for i in range(3)]
    wait_applicants(zk, group_path, 3)
    for job in ("a", "b", "c"):
        ws[0].matcher.post_job(job)
    wait_for(lambda: sum(len(w.matcher.held_jobs()) for w in ws) == 3, 10, "not all jobs held")
    held = sorted(job for w in ws for job in w.matcher.held_jobs())
    assert held == ["a", "b", "c"]
    assert all(len(w.matcher.held_jobs()) == 1 for w in ws)
    assert ws[0].matcher.assignments() == {job: w.matcher.identity for w in ws for job in w.matcher.held_jobs()}


def test_worker_holds_at_most_max_jobs(workers: Callable[..., Worker]) -> None:
    w = workers("w1", max_jobs=2)
    for job in ("a", "b", "c"):
        w.matcher.post_job(job)
    w.wait_holding("a", "b")
    w.matcher.remove_job("a")
    w.wait_holding("b", "c")  # capacity freed: the third job is taken


def test_claimed_jobs_rotate_over_the_applicants(
    workers: Callable[..., Worker], zk: KazooClient, group_path: str
) -> None:
    w1, w2 = workers("w1", max_jobs=2), workers("w2", max_jobs=2)
    wait_applicants(zk, group_path, 2)
    w1.matcher.post_job("a")
    w1.matcher.post_job("b")
    wait_for(lambda: len(w1.matcher.held_jobs()) + len(w2.matcher.held_jobs()) == 2, 10, "jobs not held")
    assert len(w1.matcher.held_jobs()) == len(w2.matcher.held_jobs()) == 1


def test_removed_job_is_reported_lost_and_released(
    workers: Callable[..., Worker], zk: KazooClient, group_path: str
) -> None:
    w = workers("w1")
    w.matcher.post_job("a")
    w.wait_holding("a")
    w.matcher.remove_job("a")
    w.events.wait_for(lambda evs: ("lost", "a") in evs, 10, "removal not reported")
    wait_for(lambda: zk.exists(f"{group_path}/assignments/a") is None, 10, "assignment not released")


def test_stopped_worker_hands_its_job_to_the_next_applicant(workers: Callable[..., Worker]) -> None:
    w1 = workers("w1")
    w1.matcher.post_job("a")
    w1.wait_holding("a")
    w2 = workers("w2")
    w1.matcher.stop()
    assert w1.events.events == [("acquired", "a"), ("lost", "a")]
    w2.wait_holding("a")


def test_job_of_a_killed_worker_process_is_taken_over(
    workers: Callable[..., Worker], spawn_child: Callable[[str, str, str], Child], group_path: str, zk: KazooClient
) -> None:
    child = spawn_child("worker", group_path, "child")
    wait_applicants(zk, group_path, 1)  # the child is first in line
    w = workers("w1")
    w.matcher.post_job("a")
    child.wait_line("ACQUIRED a")
    assert w.matcher.assignments() == {"a": "child"}
    child.kill()
    w.wait_holding("a", timeout=10)
    assert w.matcher.assignments() == {"a": "w1"}


def test_job_of_an_expired_worker_is_reported_lost_and_taken_over(
    workers: Callable[..., Worker], new_client: NewClient, zk_hosts: str
) -> None:
    client = new_client()
    w1 = workers("w1", client)
    w1.matcher.post_job("a")
    w1.wait_holding("a")
    w2 = workers("w2")
    expire_session(client, zk_hosts)
    w1.events.wait_for(lambda evs: ("lost", "a") in evs, 10, "expired holder never reported the loss")
    w2.wait_holding("a")


def test_partitioned_holder_reports_the_loss_before_another_takes_over(
    workers: Callable[..., Worker], new_client: NewClient, proxy: ZkProxy, monitor: Monitor
) -> None:
    w1 = workers("w1", new_client(proxy.hosts))
    w1.matcher.post_job("a")
    w1.wait_holding("a")
    w2 = workers("w2")
    proxy.blackhole()  # no traffic either way: w1 notices by timeout, the server expires its session
    w2.wait_holding("a", timeout=15)
    w1.delivered()
    w2.delivered()
    lost_at = [t for t, kind, who, _ in monitor.timeline if (kind, who) == ("lost", "w1")]
    taken_at = [t for t, kind, who, _ in monitor.timeline if (kind, who) == ("acquired", "w2")]
    assert lost_at and lost_at[0] < taken_at[0], monitor.timeline


def test_claim_whose_reply_is_lost_is_recognised_after_reconnect(
    workers: Callable[..., Worker], new_client: NewClient, proxy: ZkProxy, group_path: str, zk: KazooClient
) -> None:
    w = workers("w1", new_client(proxy.hosts), start=False)
    zk.ensure_path(f"{group_path}/assignments")
    fired = proxy.lose_reply_to_next_create(f"{group_path}/assignments/")
    w.matcher.start()
    w.matcher.post_job("a")
    w.wait_holding("a")
    assert fired.is_set(), "the proxy never dropped the create reply: the test exercised nothing"
    assert w.matcher.assignments() == {"a": "w1"}
    assert w.delivered() == [("acquired", "a")]


def test_holder_gets_its_job_back_after_reconnecting_within_its_session(
    workers: Callable[..., Worker], new_client: NewClient, proxy: ZkProxy, group_path: str, zk: KazooClient
) -> None:
    client = new_client(proxy.hosts)
    states = StateLog(client)
    w = workers("w1", client)
    w.matcher.post_job("a")
    w.wait_holding("a")
    _, before = zk.get(f"{group_path}/assignments/a")
    proxy.cut()
    states.wait("SUSPENDED")
    w.events.wait_for(lambda evs: ("lost", "a") in evs, 10, "suspension not reported as a loss")
    proxy.restore()
    w.events.wait_for(lambda evs: evs.count(("acquired", "a")) == 2, 10, "job not re-acquired")
    assert zk.get(f"{group_path}/assignments/a")[1].czxid == before.czxid


def test_job_removed_while_its_holder_is_disconnected_is_released_after_reconnect(
    workers: Callable[..., Worker], new_client: NewClient, proxy: ZkProxy, group_path: str, zk: KazooClient
) -> None:
    client = new_client(proxy.hosts)
    states = StateLog(client)
    w = workers("w1", client)
    w.matcher.post_job("a")
    w.wait_holding("a")
    proxy.cut()
    states.wait("SUSPENDED")
    zk.delete(f"{group_path}/jobs/a")
    proxy.restore()
    wait_for(lambda: zk.exists(f"{group_path}/assignments/a") is None, 10, "assignment of removed job kept")
    w.wait_holding()
    assert w.delivered()[-1] == ("lost", "a")


def test_callbacks_run_on_the_matcher_callback_thread(workers: Callable[..., Worker]) -> None:
    w = workers("w1")
    w.matcher.post_job("a")
    w.wait_holding("a")
    w.matcher.remove_job("a")
    w.events.wait_count(2)
    assert all(t.startswith("rebalanser-role-match-") and t.endswith("-callbacks") for t in w.events.threads)


def test_many_workers_racing_for_jobs_never_share_one(
    workers: Callable[..., Worker], zk: KazooClient, group_path: str, monitor: Monitor
) -> None:
    ws = [workers(f"w{i}", max_jobs=2) for i in range(4)]
    jobs = [f"job-{n}" for n in range(6)]
    for job in jobs:
        ws[0].matcher.post_job(job)
    wait_for(lambda: all(len(monitor.holder(job)) == 1 for job in jobs), 15, "not every job has one holder")
    held = [job for w in ws for job in w.matcher.held_jobs()]
    assert sorted(held) == jobs
    assert all(len(w.matcher.held_jobs()) <= 2 for w in ws)
