"""Every Kubernetes call of the operator is bounded: against an API server that accepts connections and
never answers, each :class:`KubernetesGateway` call ends (with an error) instead of holding its thread."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import kubernetes.client as k8s
import pytest
from rebalanser_operator import kube
from rebalanser_operator.kube import KubernetesGateway

BOUND = 0.2, 0.4  # connect, read (seconds): this test's REQUEST_TIMEOUT
WITHIN = 20.0  # urllib3 retries a read timeout a few times: generous


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A loopback port whose connections are accepted and never answered."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join(5)
        for conn in held:
            conn.close()
        server.close()


CALLS: dict[str, Callable[[KubernetesGateway], Any]] = {
    "patch_status": lambda g: g.patch_status("ns", "rg", {"status": {"phase": "Stable"}}),
    "read_credentials": lambda g: g.read_credentials("ns", "secret"),
    "publish_config": lambda g: g.publish_config("ns", "rg-rebalanser", {"REBALANSER_ZK": "zk:2181"}, None),
    "workload_rolling_out": lambda g: g.workload_rolling_out("ns", "Deployment", "workers"),
    "namespace_terminating": lambda g: g.namespace_terminating("ns"),
    "list_groups": lambda g: g.list_groups("ns"),
    "get_group": lambda g: g.get_group("ns", "rg"),
    "remove_finalizer": lambda g: g.remove_finalizer("ns", "rg", "rebalanser.io/znodes"),
}


@pytest.mark.parametrize("call", sorted(CALLS))
def test_a_call_to_a_silent_api_server_ends(call: str, silent_server: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kube, "REQUEST_TIMEOUT", BOUND)
    config = k8s.Configuration(host=f"http://127.0.0.1:{silent_server}")
    gateway = KubernetesGateway(k8s.ApiClient(config))
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(CALLS[call](gateway))
        except Exception as exc:  # the timeout surfaces as an error: what matters is that it ends
            outcome.append(exc)

    started = time.monotonic()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(WITHIN)
    assert not thread.is_alive(), f"{call} still waiting for the API server after {WITHIN:.0f}s"
    assert outcome, f"{call} ended without an outcome"
    print(f"{call}: ended after {time.monotonic() - started:.1f}s with {outcome[0]!r:.120}")
