"""LeaderQueue against a real ZooKeeper server."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from kazoo.client import KazooClient
from rebalanser.recipes import LeaderQueue

from tests.recipes.conftest import Child
from tests.recipes.proxy import ZkProxy
from tests.recipes.util import Recorder, StateLog, expire_session, wait_for, wait_new_session
from tests.support.zk import ZkCluster, four_letter

NewClient = Callable[..., KazooClient]


class Candidate:
    """A LeaderQueue plus a recorder of its callbacks."""

    def __init__(self, client: KazooClient, path: str, identity: str, **options: bool) -> None:
        self.events = Recorder()
        self.queue = LeaderQueue(
            client, path, identity=identity,
            on_elected=self.events.bind("elected"), on_lost=self.events.bind("lost"), **options,
        )

    def wait_elected(self, times: int = 1, timeout: float = 10.0) -> None:
        self.events.wait_for(
            lambda evs: evs.count(("elected",)) >= times, timeout, f"{self.queue.identity} not elected"
        )

    def wait_lost(self, times: int = 1, timeout: float = 10.0) -> None:
        self.events.wait_for(lambda evs: evs.count(("lost",)) >= times, timeout, f"{self.queue.identity} not lost")


@pytest.fixture
def candidates(group_path: str, new_client: NewClient) -> Iterator[Callable[..., Candidate]]:
    made: list[Candidate] = []

    def make(identity: str, client: KazooClient | None = None, **options: bool) -> Candidate:
        candidate = Candidate(client or new_client(), group_path, identity, **options)
        made.append(candidate)
        return candidate

    yield make
    for candidate in made:
        candidate.queue.stop()


def test_first_candidate_to_join_is_elected(candidates: Callable[..., Candidate]) -> None:
    a = candidates("a")
    a.queue.join()
    a.wait_elected()
    assert a.queue.is_leader
    assert a.queue.position() == 0


def test_later_candidate_waits_behind_the_leader(candidates: Callable[..., Candidate]) -> None:
    a, b = candidates("a"), candidates("b")
    a.queue.join()
    a.wait_elected()
    b.queue.join()
    assert b.queue.position() == 1
    assert not b.queue.is_leader
    assert b.events.events == []


def test_next_candidate_is_elected_when_the_leader_leaves(candidates: Callable[..., Candidate]) -> None:
    a, b = candidates("a"), candidates("b")
    a.queue.join()
    a.wait_elected()
    b.queue.join()
    a.queue.leave()
    b.wait_elected()
    a.wait_lost()  # a's callback runs on a's own callback thread, not before b's election is seen
    assert a.events.events == [("elected",), ("lost",)]
    assert a.queue.position() is None


def test_queue_reports_size_and_spare_capacity(candidates: Callable[..., Candidate]) -> None:
    queues = [candidates(name).queue for name in ("a", "b", "c")]
    for queue in queues:
        queue.join()
    assert [q.position() for q in queues] == [0, 1, 2]
    assert queues[0].size() == 3
    assert queues[2].spare_capacity() == 2


def test_identities_lists_candidates_leader_first(candidates: Callable[..., Candidate]) -> None:
    queues = [candidates(name).queue for name in ("x", "y", "z")]
    for queue in queues:
        queue.join()
    queues[0].leave()
    assert queues[1].identities() == ["y", "z"]


def watchers_by_path(server: ZkCluster, prefix: str) -> dict[str, set[str]]:
    """``wchp``: which sessions watch which znodes (under ``prefix``)."""
    found: dict[str, set[str]] = {}
    path = None
    for line in four_letter(server.servers[0].client_port, "wchp").splitlines():
        if line.startswith("/"):
            path = line.strip()
        elif path is not None and path.startswith(prefix) and line.strip():
            found.setdefault(path, set()).add(line.strip())
    return found


def test_each_candidate_watches_only_its_predecessor(
    candidates: Callable[..., Candidate], zk_server: ZkCluster, group_path: str
) -> None:
    queued = [candidates(f"c{i}") for i in range(4)]
    for candidate in queued:
        candidate.queue.join()
    nodes = [c.queue.node or "" for c in queued]
    sessions = [f"0x{c.queue._client.client_id[0]:x}" for c in queued]
    expected = {nodes[0]: {sessions[0], sessions[1]}, nodes[1]: {sessions[2]}, nodes[2]: {sessions[3]}}
    wait_for(
        lambda: watchers_by_path(zk_server, group_path) == expected,
        10,
        lambda: f"watches are {watchers_by_path(zk_server, group_path)}, expected {expected}",
    )


def test_callbacks_run_on_the_queue_callback_thread(candidates: Callable[..., Candidate]) -> None:
    a = candidates("a")
    a.queue.join()
    a.wait_elected()
    a.queue.leave()
    a.wait_lost()
    assert all(t.startswith("rebalanser-leader-queue-") and t.endswith("-callbacks") for t in a.events.threads)


def test_join_whose_create_reply_is_lost_leaves_no_ghost_candidate(
    candidates: Callable[..., Candidate], new_client: NewClient, proxy: ZkProxy, group_path: str
) -> None:
    a = candidates("a", new_client(proxy.hosts))
    fired = proxy.lose_reply_to_next_create(group_path + "/")
    a.queue.join()
    assert fired.is_set(), "the proxy never dropped the create reply: the test exercised nothing"
    a.wait_elected()
    assert a.queue.size() == 1
    assert a.queue.position() == 0


def test_killed_leader_process_is_replaced_by_the_next_candidate(
    candidates: Callable[..., Candidate], spawn_child: Callable[[str, str, str], Child], group_path: str
) -> None:
    child = spawn_child("leader", group_path, "child")
    child.wait_line("ELECTED")
    b = candidates("b")
    b.queue.join()
    assert b.queue.position() == 1
    child.kill()
    b.wait_elected(timeout=10)
    assert b.queue.identities() == ["b"]


def test_on_lost_fires_when_the_leaders_session_expires(
    candidates: Callable[..., Candidate], new_client: NewClient, zk_hosts: str
) -> None:
    client = new_client()
    a = candidates("a", client, requeue_on_session_loss=False)
    a.queue.join()
    a.wait_elected()
    expire_session(client, zk_hosts)
    a.wait_lost()
    assert not a.queue.is_leader


def test_candidate_requeues_at_the_back_after_its_session_expires(
    candidates: Callable[..., Candidate], new_client: NewClient, zk_hosts: str
) -> None:
    client = new_client()
    a, b = candidates("a", client), candidates("b")
    a.queue.join()
    a.wait_elected()
    b.queue.join()
    old = expire_session(client, zk_hosts)
    b.wait_elected()
    wait_new_session(client, old)
    wait_for(lambda: b.queue.identities() == ["b", "a"], 10, lambda: f"queue is {b.queue.identities()}")
    assert a.queue.position() == 1


def test_candidate_without_requeue_stays_out_after_its_session_expires(
    candidates: Callable[..., Candidate], new_client: NewClient, zk_hosts: str
) -> None:
    client = new_client()
    a, b = candidates("a", client, requeue_on_session_loss=False), candidates("b")
    a.queue.join()
    b.queue.join()
    old = expire_session(client, zk_hosts)
    b.wait_elected()
    wait_new_session(client, old)
    # A marker candidate queued after the reconnect: once it is in, "a" has had its chance to requeue.
    c = candidates("c", client)
    c.queue.join()
    assert b.queue.identities() == ["b", "c"]
    assert a.queue.position() is None


def test_on_lost_fires_as_soon_as_the_connection_is_suspended(
    candidates: Callable[..., Candidate], new_client: NewClient, proxy: ZkProxy
) -> None:
    client = new_client(proxy.hosts)
    states = StateLog(client)
    a = candidates("a", client)
    a.queue.join()
    a.wait_elected()
    proxy.cut()
    states.wait("SUSPENDED")
    a.wait_lost()
    assert "LOST" not in states.states


def test_leader_is_elected_again_when_it_reconnects_within_its_session(
    candidates: Callable[..., Candidate], new_client: NewClient, proxy: ZkProxy
) -> None:
    client = new_client(proxy.hosts)
    a = candidates("a", client)
    a.queue.join()
    a.wait_elected()
    node = a.queue.node
    proxy.cut()
    a.wait_lost()
    proxy.restore()
    a.wait_elected(times=2)
    assert a.queue.node == node
    assert a.events.events == [("elected",), ("lost",), ("elected",)]


def test_candidate_that_ignores_suspension_keeps_leading_through_a_short_disconnect(
    candidates: Callable[..., Candidate], new_client: NewClient, proxy: ZkProxy
) -> None:
    client = new_client(proxy.hosts)
    states = StateLog(client)
    a = candidates("a", client, lost_on_suspend=False)
    a.queue.join()
    a.wait_elected()
    proxy.cut()
    states.wait("SUSPENDED")
    proxy.restore()
    wait_for(lambda: states.states[-1:] == ["CONNECTED"], 10, lambda: f"no reconnect; states {states.states}")
    assert a.queue.is_leader
    a.queue.leave()  # callbacks are ordered: a spurious one from the disconnect would come before this
    a.wait_lost()
    assert a.events.events == [("elected",), ("lost",)]
