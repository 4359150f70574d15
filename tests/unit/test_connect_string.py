"""The connect string is checked before any client is made: what kazoo would reject later (with a
traceback, or only once it tries to connect) is refused at once, naming the part that is wrong."""

from __future__ import annotations

import re

import pytest
from rebalanser import InvalidInputError, Options
from rebalanser.connect_string import ConnectString, parse_connect_string


@pytest.mark.parametrize(("text", "parsed"), [
    ("localhost:2181", ConnectString((("localhost", 2181),))),
    ("localhost", ConnectString((("localhost", 2181),))),
    ("zk-0.zk.svc:2181,zk-1:2182", ConnectString((("zk-0.zk.svc", 2181), ("zk-1", 2182)))),
    ("127.0.0.1:2181/apps/orders", ConnectString((("127.0.0.1", 2181),), "/apps/orders")),
    ("127.0.0.1:2181/apps/", ConnectString((("127.0.0.1", 2181),), "/apps")),
    ("h:2181/", ConnectString((("h", 2181),))),
    ("[::1]:2181,[fe80::1]", ConnectString((("::1", 2181), ("fe80::1", 2181)))),
    (" a:1 , b:2 ", ConnectString((("a", 1), ("b", 2)))),
])
def test_the_connect_string_forms_kazoo_takes_are_taken(text: str, parsed: ConnectString) -> None:
    assert parse_connect_string(text) == parsed


@pytest.mark.parametrize(("text", "fragment"), [
    ("", "empty"),
    ("   ", "empty"),
    ("localhost:99999", "from 1 to 65535"),
    ("localhost:0", "from 1 to 65535"),
    ("localhost:2181;x", "separated by ','"),
    ("localhost:2181 other:2181", "separated by ','"),
    ("a:1,,b:2", "empty host entry"),
    ("a:1,", "empty host entry"),
    (":2181", "not a host name"),
    ("::1:2181", "brackets"),
    ("[::1", "[IPv6 address]:port"),
    ("[zz]:2181", "no IPv6 address"),
    ("h:2181//x", "chroot"),
    ("h:2181/a/../b", "chroot"),
    ("h:abc", "not a number"),
])
def test_what_kazoo_would_reject_is_refused_with_the_reason(text: str, fragment: str) -> None:
    with pytest.raises(InvalidInputError, match=re.escape(fragment)):
        parse_connect_string(text)


def test_options_refuse_a_connect_string_kazoo_would_reject() -> None:
    """Before: ``Options(hosts="localhost:99999")`` was accepted; kazoo failed only in ``start``."""
    with pytest.raises(InvalidInputError, match="65535"):
        Options(hosts="localhost:99999", group="/g")
    with pytest.raises(InvalidInputError, match="separated"):
        Options(hosts="localhost:2181;x", group="/g")
    assert Options(hosts="a:1,b:2/chroot", group="/g").hosts == "a:1,b:2/chroot"
