"""The shared ZooKeeper layer against a real server, and the one lifecycle of the recipes."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError
from rebalanser import State, zk
from rebalanser.lifecycle import Lifecycle
from rebalanser.recipes import Discovery, DistributedBag, LeaderQueue, RoleMatcher

from tests.recipes.proxy import ZkProxy

NewClient = Callable[..., KazooClient]


def test_protected_create_whose_reply_is_lost_makes_one_node(
    new_client: NewClient, proxy: ZkProxy, group_path: str
) -> None:
    client = new_client(proxy.hosts)
    client.ensure_path(group_path)
    prefix = f"{zk.new_guid()}-m-"
    fired = proxy.lose_reply_to_next_create(group_path + "/")
    name = zk.create_protected(client, group_path, prefix, b"x", deadline=time.monotonic() + 20)
    assert fired.is_set(), "the proxy never dropped the create reply: the test exercised nothing"
    assert client.get_children(group_path) == [name]
    assert name.startswith(prefix)
    assert zk.owned_by_session(client.exists(zk.join(group_path, name)), client)


def test_protected_create_asks_before_making_a_missing_parent(new_client: NewClient, group_path: str) -> None:
    client = new_client()
    client.ensure_path(group_path)
    parent = zk.join(group_path, "members")
    with pytest.raises(NoNodeError):
        zk.create_protected(client, parent, "p-", b"", deadline=time.monotonic() + 10, on_no_parent=lambda: False)
    asked: list[bool] = []

    def make_parent() -> bool:
        asked.append(True)
        client.create(parent)
        return True

    name = zk.create_protected(client, parent, "p-", b"", deadline=time.monotonic() + 10, on_no_parent=make_parent)
    assert asked == [True]
    assert client.get_children(parent) == [name]


def test_create_once_whose_reply_is_lost_succeeds_once(new_client: NewClient, proxy: ZkProxy, group_path: str) -> None:
    client = new_client(proxy.hosts)
    client.ensure_path(group_path)
    bounded = zk.BoundedZk(client, 5.0)
    path = zk.join(group_path, "item")
    fired = proxy.lose_reply_to_next_create(path)
    zk.create_once(bounded, path, b"data", ephemeral=True, timeout=20)
    assert fired.is_set(), "the proxy never dropped the create reply: the test exercised nothing"
    assert client.get(path)[0] == b"data"
    with pytest.raises(NodeExistsError):
        zk.create_once(bounded, path, b"data", ephemeral=True, timeout=20)  # a first attempt that finds it


def test_every_recipe_has_the_same_lifecycle(new_client: NewClient, group_path: str) -> None:
    client = new_client()
    recipes = [
        Discovery(client, group_path + "/discovery"),
        DistributedBag(client, group_path + "/bag"),
        LeaderQueue(client, group_path + "/queue", identity="a"),
        RoleMatcher(client, group_path + "/roles", identity="a"),
    ]
    for recipe in recipes:
        assert recipe.state == Lifecycle.NOT_STARTED, type(recipe).__name__
        with recipe:
            assert recipe.state == Lifecycle.STARTED, type(recipe).__name__
        assert recipe.state == Lifecycle.STOPPED, type(recipe).__name__
        recipe.stop()  # idempotent
        assert recipe.state == Lifecycle.STOPPED
    assert {State.NOT_STARTED.value, State.STOPPED.value} <= {s.value for s in Lifecycle}  # the client's names


def test_close_is_a_deprecated_name_of_stop(new_client: NewClient, group_path: str) -> None:
    client = new_client()
    queue = LeaderQueue(client, group_path + "/queue", identity="a")
    queue.start()
    assert queue.position() == 0
    with pytest.deprecated_call():
        queue.close()
    assert queue.state == Lifecycle.STOPPED
    assert queue.size() == 0
    discovery = Discovery(client, group_path + "/discovery")
    discovery.register("svc", "one", {})
    with pytest.deprecated_call():
        discovery.close()
    assert discovery.state == Lifecycle.STOPPED
    assert client.get_children(group_path + "/discovery/svc") == []
