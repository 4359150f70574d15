"""bench/cpu.py: the CPU seconds of a process, and which local process serves a port."""

from __future__ import annotations

import os
import socket
import time

from bench.cpu import cpu_bound_s, listener_pid, process_cpu_s, server_pid


def test_the_listening_process_of_a_port_is_found_only_for_a_local_address() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        assert listener_pid(port) is None, "a bound socket that does not listen serves nothing"
        sock.listen()
        assert listener_pid(port) == os.getpid()
        assert server_pid(f"127.0.0.1:{port}") == os.getpid()
        assert server_pid(f"localhost:{port}/chroot") == os.getpid()
        assert server_pid(f"192.0.2.1:{port}") is None, "a server elsewhere is not measured"
    assert listener_pid(port) is None


def test_cpu_seconds_grow_with_work_and_the_bound_divides_by_the_cores() -> None:
    before = process_cpu_s(os.getpid())
    assert before is not None
    deadline = time.process_time() + 0.2
    while time.process_time() < deadline:
        pass
    after = process_cpu_s(os.getpid())
    assert after is not None and after - before >= 0.15, (before, after)
    assert process_cpu_s(None) is None
    assert cpu_bound_s(1.0, None) is None
    assert cpu_bound_s(1.0, 3.0) == round(4.0 / (os.cpu_count() or 1), 2)
