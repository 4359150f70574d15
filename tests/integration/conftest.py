from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from tests.chaos.proxy import FaultProxy
from tests.support.workers import Group


def add_resources(zk: KazooClient, group: str, names: list[str]) -> None:
    for name in names:
        zk.create(f"{group}/resources/{name}", makepath=True)


@pytest.fixture(params=["resource-barrier", "global-barrier"])
def algorithm(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def group(zk_hosts: str, group_path: str, tmp_path: Path, algorithm: str) -> Iterator[Group]:
    g = Group(zk_hosts, group_path, tmp_path, algorithm=algorithm)
    try:
        yield g
    finally:
        g.stop_all()


@pytest.fixture
def proxy(zk_hosts: str) -> Iterator[FaultProxy]:
    """A fault proxy in front of the test server (clients made through it can be cut off)."""
    p = FaultProxy(zk_hosts.split(","))
    try:
        yield p
    finally:
        p.close()
