"""Fixtures for the recipe tests: short-session clients, a cuttable proxy, killable child processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from tests.recipes.proxy import ZkProxy
from tests.recipes.util import SESSION_TIMEOUT, close_client, make_client, wait_for

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def proxy(zk_hosts: str) -> Iterator[ZkProxy]:
    """A proxy in front of the test server (see proxy.py); clients made through it are closed first."""
    p = ZkProxy(zk_hosts)
    yield p
    p.close()


@pytest.fixture
def new_client(zk_hosts: str, proxy: ZkProxy) -> Iterator[Callable[..., KazooClient]]:
    """Makes started clients (2 s sessions, fast reconnect) and closes them after the test.

    It depends on ``proxy`` only so that the proxy outlives the clients: a client whose server went away
    takes kazoo's full close timeout (10 s) to stop.
    """
    made: list[KazooClient] = []

    def make(hosts: str | None = None, timeout: float = SESSION_TIMEOUT) -> KazooClient:
        client = make_client(hosts or zk_hosts, timeout)
        made.append(client)
        return client

    yield make
    proxy.restore()
    for client in made:
        close_client(client)


class Child:
    """A child Python process running ``tests.recipes.child``; its stdout lines are collected."""

    def __init__(self, args: list[str]) -> None:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "worker_lib"), str(REPO)]))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.recipes.child", *args],
            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.strip())

    def wait_line(self, line: str, timeout: float = 20.0) -> None:
        wait_for(lambda: line in self.lines or self.proc.poll() is not None, timeout, f"child never printed {line}")
        assert line in self.lines, f"child exited with {self.proc.returncode} before printing {line}"

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)


@pytest.fixture
def spawn_child(zk_hosts: str) -> Iterator[Callable[[str, str, str], Child]]:
    """Starts ``tests.recipes.child <hosts> kind base arg``; waits for READY; kills leftovers afterwards."""
    children: list[Child] = []

    def spawn(kind: str, base: str, arg: str) -> Child:
        child = Child([zk_hosts, kind, base, arg])
        children.append(child)
        child.wait_line("READY")
        return child

    yield spawn
    for child in children:
        child.kill()
