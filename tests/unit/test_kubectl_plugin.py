"""What the kubectl plugin takes from a ResourceGroup object to reach its group (pure)."""

from __future__ import annotations

import pytest
from rebalanser.errors import InvalidInputError
from rebalanser.kubectl_plugin import GroupAccess, access_from


def test_the_group_lives_where_the_status_says_under_the_spec_or_default_path() -> None:
    rg = {"metadata": {"name": "orders", "namespace": "shop"},
          "spec": {"zookeeper": {"connect": "zk-new:2181"}}, "status": {"zookeeperConnect": "zk-old:2181"}}
    assert access_from(rg) == GroupAccess("zk-old:2181", "/rebalanser/shop/orders")
    rg["spec"]["zookeeper"] = {"connect": "zk:2181", "path": "/apps/orders", "tls": {"secret": "zk-tls",
                                                                                    "verifyHostname": True}}
    rg["status"] = {}
    assert access_from(rg) == GroupAccess("zk:2181", "/apps/orders", "zk-tls", True)


def test_a_resource_group_without_a_connect_string_is_a_clear_error() -> None:
    with pytest.raises(InvalidInputError, match="names no ZooKeeper connect string"):
        access_from({"metadata": {"name": "orders", "namespace": "shop"}, "spec": {}})
