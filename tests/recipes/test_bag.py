"""DistributedBag against a real ZooKeeper server."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from kazoo.client import KazooClient
from rebalanser.recipes import DistributedBag, ItemExistsError

from tests.recipes.conftest import Child
from tests.recipes.proxy import ZkProxy
from tests.recipes.util import Recorder, StateLog, expire_session, wait_new_session

NewClient = Callable[..., KazooClient]


@pytest.fixture
def bag(zk: KazooClient, group_path: str) -> Iterator[DistributedBag]:
    b = DistributedBag(zk, group_path)
    b.start()
    yield b
    b.stop()


def record_deltas(bag: DistributedBag) -> Recorder:
    rec = Recorder()
    bag.add_listener(
        on_added=lambda item: rec(("added", item.id, item.data)),
        on_removed=lambda item: rec(("removed", item.id, item.data)),
    )
    return rec


Delta = tuple[str, str, bytes]


def settle(bag: DistributedBag, rec: Recorder) -> list[Delta]:
    """Adds a sentinel and waits for it: every delta before it has then been delivered (in order)."""
    bag.add(b"", item_id="zz-sentinel")
    events = rec.wait_for(lambda evs: ("added", "zz-sentinel", b"") in evs, 10, "sentinel never reported")
    return [e for e in events if e != ("added", "zz-sentinel", b"")]


def test_added_item_can_be_read_back_by_id(bag: DistributedBag) -> None:
    item_id = bag.add(b"payload")
    assert bag.get(item_id) == b"payload"


def test_items_lists_every_item_with_its_data(bag: DistributedBag) -> None:
    bag.add(b"1", item_id="a")
    bag.add(b"2", item_id="b")
    assert bag.items() == {"a": b"1", "b": b"2"}


def test_removed_item_is_gone_and_a_second_remove_reports_absence(bag: DistributedBag) -> None:
    item_id = bag.add(b"x")
    assert bag.remove(item_id) is True
    assert bag.get(item_id) is None
    assert bag.remove(item_id) is False


def test_adding_a_taken_id_raises_item_exists(bag: DistributedBag) -> None:
    bag.add(b"first", item_id="dup")
    with pytest.raises(ItemExistsError):
        bag.add(b"second", item_id="dup")
    assert bag.get("dup") == b"first"


def test_add_whose_reply_is_lost_creates_exactly_one_item(
    zk: KazooClient, group_path: str, proxy: ZkProxy, new_client: NewClient
) -> None:
    bag = DistributedBag(new_client(proxy.hosts), group_path)
    bag.start()
    fired = proxy.lose_reply_to_next_create(group_path + "/")
    item_id = bag.add(b"once", ephemeral=True)
    assert fired.is_set(), "the proxy never dropped the create reply: the test exercised nothing"
    assert zk.get_children(group_path) == [item_id]
    assert zk.get(f"{group_path}/{item_id}")[0] == b"once"
    bag.stop()


def test_listener_sees_each_addition_and_removal_once_in_order(bag: DistributedBag) -> None:
    rec = record_deltas(bag)
    bag.add(b"1", item_id="a")
    rec.wait_count(1)
    bag.add(b"2", item_id="b")
    rec.wait_count(2)
    bag.remove("a")
    events = settle(bag, rec)
    assert events == [("added", "a", b"1"), ("added", "b", b"2"), ("removed", "a", b"1")]


def test_burst_of_changes_is_reported_as_a_consistent_history(bag: DistributedBag) -> None:
    rec = record_deltas(bag)
    for i in range(20):
        bag.add(str(i).encode(), item_id=f"i{i:02d}")
        if i % 3 == 0:
            bag.remove(f"i{i:02d}")
    events = settle(bag, rec)
    state: dict[str, bytes] = {}
    for kind, item_id, data in events:
        if kind == "added":
            assert item_id not in state, f"{item_id} reported added twice"
            state[item_id] = data
        else:
            assert state.pop(item_id) == data, f"{item_id} removed without being added"
    assert state == {k: v for k, v in bag.items().items() if k != "zz-sentinel"}


def test_late_listener_first_gets_current_items_as_additions(bag: DistributedBag) -> None:
    bag.add(b"1", item_id="a")
    bag.add(b"2", item_id="b")
    early = record_deltas(bag)
    early.wait_count(2)
    late = record_deltas(bag)
    bag.remove("b")
    events = settle(bag, late)
    assert events == [("added", "a", b"1"), ("added", "b", b"2"), ("removed", "b", b"2")]


def test_removed_listener_gets_no_further_callbacks(bag: DistributedBag) -> None:
    dropped = Recorder()
    listener = bag.add_listener(on_added=dropped)
    kept = record_deltas(bag)
    bag.remove_listener(listener)
    bag.add(b"x", item_id="after-removal")
    settle(bag, kept)
    assert dropped.events == []


def test_listener_callbacks_run_on_the_bag_callback_thread(bag: DistributedBag) -> None:
    rec = record_deltas(bag)
    bag.add(b"x")
    rec.wait_count(1)
    assert all(name.startswith("rebalanser-bag-") and name.endswith("-callbacks") for name in rec.threads)


def test_deltas_missed_while_disconnected_are_delivered_once_after_reconnect(
    zk: KazooClient, group_path: str, proxy: ZkProxy, new_client: NewClient
) -> None:
    client = new_client(proxy.hosts)
    states = StateLog(client)
    bag = DistributedBag(client, group_path)
    rec = record_deltas(bag)
    bag.start()
    bag.add(b"1", item_id="a")
    bag.add(b"2", item_id="b")
    rec.wait_count(2)
    proxy.cut()
    states.wait("SUSPENDED")
    zk.delete(f"{group_path}/a")
    zk.create(f"{group_path}/c", b"3")
    proxy.restore()
    events = settle(bag, rec)
    bag.stop()
    assert events == [("added", "a", b"1"), ("added", "b", b"2"), ("removed", "a", b"1"), ("added", "c", b"3")]


def test_deltas_missed_across_a_session_expiry_are_delivered_once(
    zk: KazooClient, zk_hosts: str, group_path: str, proxy: ZkProxy, new_client: NewClient
) -> None:
    client = new_client(proxy.hosts)
    states = StateLog(client)
    bag = DistributedBag(client, group_path)
    rec = record_deltas(bag)
    bag.start()
    bag.add(b"1", item_id="persistent")
    bag.add(b"2", item_id="mine", ephemeral=True)
    rec.wait_count(2)
    proxy.cut()
    states.wait("SUSPENDED")
    old = expire_session(client, zk_hosts)
    zk.create(f"{group_path}/while-away", b"3")
    proxy.restore()
    wait_new_session(client, old)
    events = settle(bag, rec)
    bag.stop()
    assert events == [
        ("added", "persistent", b"1"),
        ("added", "mine", b"2"),
        ("removed", "mine", b"2"),
        ("added", "while-away", b"3"),
    ]


def test_ephemeral_item_of_a_killed_process_is_reported_removed(
    bag: DistributedBag, group_path: str, spawn_child: Callable[[str, str, str], Child]
) -> None:
    rec = record_deltas(bag)
    child = spawn_child("bag", group_path, "child-item")
    rec.wait_for(lambda evs: ("added", "child-item", b"child") in evs, 10, "child's item never reported")
    child.kill()
    rec.wait_for(
        lambda evs: ("removed", "child-item", b"child") in evs, 10, "killed child's item never reported removed"
    )


def test_known_items_reflect_what_listeners_were_told(bag: DistributedBag) -> None:
    rec = record_deltas(bag)
    bag.add(b"1", item_id="a")
    rec.wait_count(1)
    assert bag.known_items() == {"a": b"1"}


@pytest.mark.parametrize("existing", [0, 40])
def test_each_delta_costs_the_same_number_of_requests_however_big_the_bag(
    zk: KazooClient, group_path: str, proxy: ZkProxy, new_client: NewClient, existing: int
) -> None:
    for n in range(existing + 1):  # at least one, so that the initial read can be awaited
        zk.create(f"{group_path}/old-{n:03d}", b"x", makepath=True)
    bag = DistributedBag(new_client(proxy.hosts), group_path)
    rec = record_deltas(bag)
    bag.start()
    rec.wait_count(existing + 1)
    before = proxy.request_count()
    zk.create(f"{group_path}/new", b"y", makepath=True)
    rec.wait_for(lambda evs: ("added", "new", b"y") in evs, 10, "addition not reported")
    after_add = proxy.request_count()
    zk.delete(f"{group_path}/new")
    rec.wait_for(lambda evs: ("removed", "new", b"y") in evs, 10, "removal not reported")
    after_remove = proxy.request_count()
    bag.stop()
    assert after_add - before == 2, "an addition should cost one children read and one data read"
    assert after_remove - after_add == 1, "a removal should cost one children read"
