"""A new user's mistakes, each run as a real ``rebalanser`` process: every one ends with exactly one
line on stderr, saying what is wrong, and the documented exit code (README, "The worker CLI"); no
traceback, no kazoo log lines, and a failure to connect after the stated bounded wait with its reason.

Before: a wrong ``--zk`` printed 9-20 kazoo WARNING lines over 15-60 s and exited 1; a bad port or
separator, and a missing ``--from-file``, gave tracebacks with exit 1; ``--tick 0`` busy-looped; a
mistyped group path made a group of its own (an idle fleet); ``--id ''`` was replaced silently.
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from tests.support.workers import REPO

pytestmark = pytest.mark.zk

CONNECT_TIMEOUT = 2.0


def rebalanser(*argv: str, timeout: float = 60) -> tuple[int, str, str, float]:
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "rebalanser.cli", *argv], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO, stdin=subprocess.DEVNULL, check=False)
    return proc.returncode, proc.stdout, proc.stderr, time.monotonic() - started


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A local port nothing listens on (bound, never listened on, so nothing else takes it meanwhile)."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        yield holder.getsockname()[1]


def _worker(zk: str, group: str, *extra: str) -> list[str]:
    return ["worker", "--zk", zk, "--group", group, "--id", "w1", "--connect-timeout", str(CONNECT_TIMEOUT), *extra]


OFFLINE = [  # (argv, the one stderr line as a regular expression, exit code): nothing needs a server
    (_worker("localhost:99999", "/g"),
     r"rebalanser: connect string 'localhost:99999': the port of 'localhost:99999' must be a number from 1 to 65535",
     2),
    (_worker("localhost:2181;x", "/g"),
     r"rebalanser: connect string 'localhost:2181;x': the port of 'localhost:2181;x' is not a number "
     r"\(hosts are separated by ','\)", 2),
    (_worker("localhost:0", "/g"),
     r"rebalanser: connect string 'localhost:0': the port of 'localhost:0' must be a number from 1 to 65535", 2),
    (_worker("a:2181,,b:2181", "/g"),
     r"rebalanser: connect string 'a:2181,,b:2181': an empty host entry \(two commas, or a comma at an end\)", 2),
    (_worker("zk:2181//apps", "/g"),
     r"rebalanser: connect string 'zk:2181//apps': the chroot //apps has an empty, '\.' or '\.\.' segment", 2),
    (_worker("::1:2181", "/g"),
     r"rebalanser: connect string '::1:2181': '::1' is not a host name or address \(hosts are separated by ',', "
     r"IPv6 addresses go in brackets\)", 2),
    (_worker("[zz]:2181", "/g"), r"rebalanser: connect string '\[zz\]:2181': '\[zz\]:2181' holds no IPv6 address", 2),
    (["status", "--zk", "localhost:99999", "--group", "/g"],
     r"rebalanser: connect string 'localhost:99999': the port of 'localhost:99999' must be a number from 1 to 65535",
     2),
    (["group", "create", "--zk", "localhost:2181;x", "--group", "/g"],
     r"rebalanser: connect string 'localhost:2181;x': the port of 'localhost:2181;x' is not a number "
     r"\(hosts are separated by ','\)", 2),
    (_worker("localhost:2181", "nope"),
     r"rebalanser: group path must be .*", 2),
    (_worker("localhost:2181", "/g", "--tick", "0"),
     r"rebalanser worker: argument --tick: must be a positive number of seconds, got '0' "
     r"\(see rebalanser worker --help\)", 2),
    (_worker("localhost:2181", "/g", "--tick", "-1"),
     r"rebalanser worker: argument --tick: must be a positive number of seconds, got '-1' "
     r"\(see rebalanser worker --help\)", 2),
    (_worker("localhost:2181", "/g", "--tick", "nan"),
     r"rebalanser worker: argument --tick: 'nan' is not a finite number of seconds \(see rebalanser worker --help\)",
     2),
    (_worker("localhost:2181", "/g", "--session-timeout", "0"),
     r"rebalanser worker: argument --session-timeout: must be a positive number of seconds, got '0' "
     r"\(see rebalanser worker --help\)", 2),
    (_worker("localhost:2181", "/g", "--session-timeout", "9999"),
     r"rebalanser: session_timeout must be a number in \[0\.5, 600\], got 9999\.0", 2),
    (_worker("localhost:2181", "/g", "--stop-timeout", "-5"),
     r"rebalanser worker: argument --stop-timeout: must be a positive number of seconds, got '-5' "
     r"\(see rebalanser worker --help\)", 2),
    (_worker("localhost:2181", "/g", "--departure-grace", "-1"),
     r"rebalanser worker: argument --departure-grace: must be 0 or a positive number of seconds, got '-1' "
     r"\(see rebalanser worker --help\)", 2),
    (_worker("localhost:2181", "/g", "--connect-timeout", "0"),
     r"rebalanser worker: argument --connect-timeout: must be a positive number of seconds, got '0' "
     r"\(see rebalanser worker --help\)", 2),
    (_worker("localhost:2181", "/g", "--metrics-port", "99999"),
     r"rebalanser worker: argument --metrics-port: must be a port from 1 to 65535 \(0: none\), got '99999' "
     r"\(see rebalanser worker --help\)", 2),
    (["worker", "--zk", "localhost:2181", "--group", "/g", "--id", ""],
     r"rebalanser worker: argument --id: member id '' must be 1 to 128 letters, digits and _\.:@\+=- "
     r"\(starting with a letter or a digit\) \(see rebalanser worker --help\)", 2),
    (["worker", "--zk", "localhost:2181", "--group", "/g", "--nonsense"],
     r"rebalanser: unrecognized arguments: --nonsense \(see rebalanser --help\)", 2),
    (["group", "resources", "add", "--zk", "localhost:2181", "--group", "/g", "--from-file", "/no/such/file"],
     r"rebalanser: --from-file /no/such/file: No such file or directory", 2),
    (["group", "config", "--zk", "localhost:2181", "--group", "/g", "--min-interval", "-1"],
     r"rebalanser group config: argument --min-interval: must be 0 or a positive number of seconds, got '-1' "
     r"\(see rebalanser group config --help\)", 2),
]


def _case(argv: list[str]) -> str:
    shown = [a for a in argv if a not in ("--id", "w1", "--connect-timeout", str(CONNECT_TIMEOUT))]
    return " ".join(shown)


@pytest.mark.parametrize(("argv", "line", "code"), OFFLINE, ids=[_case(a) for a, _, _ in OFFLINE])
def test_bad_input_is_one_line_and_exit_2(argv: list[str], line: str, code: int) -> None:
    rc, _, err, _ = rebalanser(*argv)
    assert (rc, len(err.splitlines())) == (code, 1), err
    assert re.fullmatch(line, err.strip()), err


@pytest.mark.parametrize("command", [
    ["worker", "--id", "w1"], ["status"], ["group", "create"], ["group", "resources", "list"],
    ["group", "delete"],
])
def test_a_refused_connection_is_one_line_with_the_reason_after_the_stated_wait(
    command: list[str], closed_port: int, group_path: str
) -> None:
    rc, _, err, took = rebalanser(*command, "--zk", f"127.0.0.1:{closed_port}", "--group", group_path,
                                  "--connect-timeout", str(CONNECT_TIMEOUT))
    assert rc == 4, err
    assert err.splitlines() == [f"rebalanser: cannot connect to ZooKeeper at 127.0.0.1:{closed_port} within "
                                f"{CONNECT_TIMEOUT:g} s: Connection refused"], err
    assert CONNECT_TIMEOUT <= took < CONNECT_TIMEOUT + 10, took


def test_an_unknown_host_is_one_line_with_the_resolver_s_reason(group_path: str) -> None:
    rc, _, err, took = rebalanser(*_worker("no-such-host.invalid:2181", group_path))
    assert rc == 4, err
    assert re.fullmatch(rf"rebalanser: cannot connect to ZooKeeper at no-such-host\.invalid:2181 within "
                        rf"{CONNECT_TIMEOUT:g} s: Cannot resolve no-such-host\.invalid: .+", err.strip()), err
    assert len(err.splitlines()) == 1 and took < CONNECT_TIMEOUT + 10


def test_verbose_shows_kazoo_s_own_lines(closed_port: int, group_path: str) -> None:
    rc, _, err, _ = rebalanser(*_worker(f"127.0.0.1:{closed_port}", group_path, "-v"))
    assert rc == 4 and "kazoo.client" in err and "Connection refused" in err
    lines = err.splitlines()
    reason = [i for i, line in enumerate(lines) if line.startswith("rebalanser: cannot connect to ZooKeeper")]
    assert len(reason) == 1, err
    # The reason is the worker's last word. kazoo's client is closed on a thread of its own (its stop waits
    # out a connection attempt's back-off), which may still log its closing after it, and nothing else.
    assert all(" kazoo." in line for line in lines[reason[0] + 1:]), err


@pytest.mark.parametrize(("command", "line"), [
    (["worker", "--id", "w1"], "rebalanser: group {path} does not exist: create it with 'rebalanser group create' "
                               "or a ResourceGroup (or let this member create it: --create-group)"),
    (["worker", "--id", "w1", "--api", "asyncio"],
     "rebalanser: group {path} does not exist: create it with 'rebalanser group create' or a ResourceGroup "
     "(or let this member create it: --create-group)"),
    (["status"], "rebalanser: group {path} does not exist (rebalanser group create makes it)"),
    (["group", "resources", "list"], "rebalanser: group {path} does not exist (rebalanser group create makes it)"),
    (["group", "resources", "add", "r0"], "rebalanser: group {path} does not exist (rebalanser group create makes it)"),
])
def test_a_mistyped_group_path_is_refused_with_exit_5_and_nothing_is_created(
    command: list[str], line: str, zk: KazooClient, zk_hosts: str, group_path: str
) -> None:
    """Before: a worker's first join created the group root and its containers, without a word."""
    rc, _, err, _ = rebalanser(*command, "--zk", zk_hosts, "--group", group_path)
    assert (rc, err.splitlines()) == (5, [line.format(path=group_path)]), err
    assert zk.exists(group_path) is None


def test_create_group_makes_the_group_and_an_empty_one_is_warned_about_once(
    zk: KazooClient, zk_hosts: str, group_path: str, tmp_path: Path
) -> None:
    err_file = tmp_path / "err"
    with err_file.open("w") as err:
        argv = _worker(zk_hosts, group_path, "--create-group", "--json")
        proc = subprocess.Popen([sys.executable, "-m", "rebalanser.cli", *argv], stdout=subprocess.PIPE, stderr=err,
                                text=True, cwd=REPO)
    try:
        assert proc.stdout is not None
        assert '"role"' in proc.stdout.readline() + proc.stdout.readline()  # connected, then its role
        deadline = time.monotonic() + 30
        while "no resources" not in err_file.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert zk.exists(f"{group_path}/resources") is not None
    finally:
        proc.terminate()
        proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert err_file.read_text().splitlines() == [
        f"rebalanser: group {group_path} has no resources yet: nothing is assigned until some are added "
        "(rebalanser group resources add)"]
