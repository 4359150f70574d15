"""Discovery against a real ZooKeeper server."""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from rebalanser.recipes import (
    Discovery,
    DiscoveryUnavailableError,
    InstanceConflictError,
    ServiceInstance,
    load_config,
)

from tests.recipes.conftest import Child
from tests.recipes.proxy import ZkProxy
from tests.recipes.util import Recorder, StateLog, expire_session, wait_for, wait_new_session

NewClient = Callable[..., KazooClient]


@pytest.fixture
def discoveries(group_path: str, new_client: NewClient) -> Iterator[Callable[..., Discovery]]:
    made: list[Discovery] = []

    def make(client: KazooClient | None = None, **options: object) -> Discovery:
        d = Discovery(client or new_client(), group_path, **options)  # type: ignore[arg-type]
        made.append(d)
        return d

    yield make
    for d in made:
        d.stop()


def ids(instances: list[ServiceInstance]) -> list[str]:
    return [i.instance_id for i in instances]


def test_registered_instance_is_listed_with_its_config(discoveries: Callable[..., Discovery]) -> None:
    d = discoveries()
    d.register("search", "pod-1", {"host": "10.0.0.1", "port": 9200})
    assert d.instances("search") == [ServiceInstance("search", "pod-1", {"host": "10.0.0.1", "port": 9200})]


def test_readers_see_instances_registered_by_other_clients(discoveries: Callable[..., Discovery]) -> None:
    writer, reader = discoveries(), discoveries()
    writer.register("search", "pod-1", {"n": 1})
    writer.register("search", "pod-2", {"n": 2})
    assert ids(reader.instances("search")) == ["pod-1", "pod-2"]


def test_pick_chooses_anew_among_all_instances_on_each_call(discoveries: Callable[..., Discovery]) -> None:
    d = discoveries(rng=random.Random(7))
    for n in range(3):
        d.register("search", f"pod-{n}", {"n": n})
    picked = {d.pick("search").instance_id for _ in range(60)}  # type: ignore[union-attr]
    assert picked == {"pod-0", "pod-1", "pod-2"}


def test_pick_of_a_service_without_instances_is_none(discoveries: Callable[..., Discovery]) -> None:
    assert discoveries().pick("nobody") is None


def test_load_config_reads_yaml_as_plain_data() -> None:
    assert load_config("host: a\nports: [1, 2]\n") == {"host": "a", "ports": [1, 2]}


def test_load_config_refuses_yaml_that_would_build_python_objects() -> None:
    with pytest.raises(ValueError):
        load_config("!!python/object/apply:os.system ['echo pwned']\n")


def test_instance_written_as_yaml_by_another_tool_is_read_safely(
    zk: KazooClient, group_path: str, discoveries: Callable[..., Discovery]
) -> None:
    zk.create(f"{group_path}/search/legacy", b"host: old-box\nport: 80\n", makepath=True)
    zk.create(f"{group_path}/search/evil", b"!!python/object/apply:os.system ['echo pwned']\n")
    assert discoveries().instances("search") == [ServiceInstance("search", "legacy", {"host": "old-box", "port": 80})]


def test_registering_again_updates_the_same_znode_in_place(
    zk: KazooClient, group_path: str, discoveries: Callable[..., Discovery]
) -> None:
    d = discoveries()
    d.register("search", "pod-1", {"v": 1})
    _, before = zk.get(f"{group_path}/search/pod-1")
    d.register("search", "pod-1", {"v": 2})
    data, after = zk.get(f"{group_path}/search/pod-1")
    assert json.loads(data) == {"v": 2}
    assert after.czxid == before.czxid, "the znode was deleted and re-created"
    assert after.version == before.version + 1


def test_registering_an_id_held_by_another_session_raises_conflict(discoveries: Callable[..., Discovery]) -> None:
    first, second = discoveries(), discoveries()
    first.register("search", "pod-1", {"who": "first"})
    with pytest.raises(InstanceConflictError, match="another session"):
        second.register("search", "pod-1", {"who": "second"})
    assert first.instances("search")[0].config == {"who": "first"}


def test_register_with_wait_takes_the_id_once_the_other_session_ends(
    discoveries: Callable[..., Discovery], new_client: NewClient
) -> None:
    other_client = new_client()
    first, second = discoveries(other_client), discoveries()
    first.register("search", "pod-1", {"who": "first"})
    threading.Timer(0.3, other_client.stop).start()  # the old incarnation goes away a bit later
    second.register("search", "pod-1", {"who": "second"}, wait=10)
    assert second.instances("search")[0].config == {"who": "second"}


def test_register_whose_create_reply_is_lost_registers_once(
    zk: KazooClient, group_path: str, proxy: ZkProxy, discoveries: Callable[..., Discovery], new_client: NewClient
) -> None:
    client = new_client(proxy.hosts)
    d = discoveries(client)
    zk.ensure_path(f"{group_path}/search")
    fired = proxy.lose_reply_to_next_create(f"{group_path}/search/")
    d.register("search", "pod-1", {"v": 1})
    assert fired.is_set(), "the proxy never dropped the create reply: the test exercised nothing"
    data, stat = zk.get(f"{group_path}/search/pod-1")
    assert json.loads(data) == {"v": 1}
    assert stat.ephemeralOwner == client.client_id[0]


def test_watch_reports_the_current_list_then_every_change(discoveries: Callable[..., Discovery]) -> None:
    writer, reader = discoveries(), discoveries()
    seen = Recorder()
    reader.watch("search", lambda instances: seen([(i.instance_id, dict(i.config)) for i in instances]))
    seen.wait_count(1)
    writer.register("search", "pod-1", {"v": 1})
    seen.wait_count(2)
    writer.register("search", "pod-1", {"v": 2})
    seen.wait_count(3)
    writer.unregister("search", "pod-1")
    events = seen.wait_count(4)
    assert events == [[], [("pod-1", {"v": 1})], [("pod-1", {"v": 2})], []]


def test_watch_callbacks_run_on_the_discovery_callback_thread(discoveries: Callable[..., Discovery]) -> None:
    d = discoveries()
    seen = Recorder()
    d.watch("search", seen)
    seen.wait_count(1)
    d.register("search", "pod-1", {})
    seen.wait_count(2)
    assert all(t.startswith("rebalanser-discovery-") and t.endswith("-callbacks") for t in seen.threads)


def test_instance_of_a_killed_process_disappears_for_watchers(
    discoveries: Callable[..., Discovery], group_path: str, spawn_child: Callable[[str, str, str], Child]
) -> None:
    seen = Recorder()
    discoveries().watch("search", lambda instances: seen(ids(instances)))
    child = spawn_child("discovery", group_path, "search/child-1")
    seen.wait_for(lambda evs: evs and evs[-1] == ["child-1"], 10, "child's instance never seen")
    child.kill()
    seen.wait_for(lambda evs: evs[-1] == [], 10, "killed child's instance still listed")


def test_instance_is_registered_again_after_its_session_expires(
    zk: KazooClient, zk_hosts: str, group_path: str, discoveries: Callable[..., Discovery], new_client: NewClient
) -> None:
    client = new_client()
    d = discoveries(client)
    d.register("search", "pod-1", {"v": 1})
    old = expire_session(client, zk_hosts)
    wait_new_session(client, old)

    def owner() -> int | None:
        stat = zk.exists(f"{group_path}/search/pod-1")
        return None if stat is None else int(stat.ephemeralOwner)

    wait_for(lambda: owner() == client.client_id[0], 10, "instance not re-registered in the new session")
    assert d.instances("search")[0].config == {"v": 1}


def test_cache_file_is_rewritten_on_every_change(
    tmp_path: Path, discoveries: Callable[..., Discovery]
) -> None:
    cache = tmp_path / "discovery.json"
    writer, reader = discoveries(), discoveries(cache_file=cache)
    seen = Recorder()
    reader.watch("search", seen)
    seen.wait_count(1)
    writer.register("search", "pod-1", {"v": 1})
    seen.wait_count(2)
    assert json.loads(cache.read_text())["services"]["search"]["instances"] == {"pod-1": {"v": 1}}
    writer.register("search", "pod-1", {"v": 2})
    seen.wait_count(3)
    assert json.loads(cache.read_text())["services"]["search"]["instances"] == {"pod-1": {"v": 2}}


def test_instances_come_from_the_cache_file_when_zookeeper_is_unreachable(
    tmp_path: Path, proxy: ZkProxy, discoveries: Callable[..., Discovery], new_client: NewClient
) -> None:
    cache = tmp_path / "discovery.json"
    writer = discoveries(cache_file=cache)
    writer.register("search", "pod-1", {"v": 1})
    assert ids(writer.instances("search")) == ["pod-1"]  # this read fills the cache file
    cut_off = new_client(proxy.hosts)
    states = StateLog(cut_off)
    reader = discoveries(cut_off, cache_file=cache)  # e.g. a process started later, sharing the cache
    proxy.cut()
    states.wait("SUSPENDED")
    assert reader.instances("search") == [ServiceInstance("search", "pod-1", {"v": 1})]


def test_uncached_service_is_reported_unavailable_when_zookeeper_is_unreachable(
    proxy: ZkProxy, discoveries: Callable[..., Discovery], new_client: NewClient
) -> None:
    client = new_client(proxy.hosts)
    states = StateLog(client)
    reader = discoveries(client)
    proxy.cut()
    states.wait("SUSPENDED")
    with pytest.raises(DiscoveryUnavailableError):
        reader.instances("search")


def test_stop_unregisters_our_instances(discoveries: Callable[..., Discovery]) -> None:
    d, reader = discoveries(), discoveries()
    d.register("search", "pod-1", {})
    d.stop()
    assert reader.instances("search") == []
