"""What the kubectl plugin takes from a ResourceGroup object to reach its group (pure)."""

from __future__ import annotations

from pathlib import Path

import pytest
from rebalanser.cli import parser
from rebalanser.errors import InvalidInputError
from rebalanser.kubectl_plugin import GroupAccess, _credential_argv, _overrides, _parser, access_from


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


def test_the_credentials_secret_becomes_the_status_commands_user_and_password_file(tmp_path: Path) -> None:
    rg = {"metadata": {"name": "orders", "namespace": "shop"},
          "spec": {"zookeeper": {"connect": "zk:2181", "credentialsSecret": "zk-digest"}}}
    assert access_from(rg).credentials_secret == "zk-digest"
    argv = _credential_argv({"username": b"orders", "password": b"s3cret"}, "zk-digest", tmp_path)
    assert argv[:2] == ["--zk-user", "orders"] and argv[2] == "--zk-password-file"
    assert Path(argv[3]).read_bytes() == b"s3cret" and Path(argv[3]).stat().st_mode & 0o077 == 0
    with pytest.raises(InvalidInputError, match="username and password"):
        _credential_argv({"password": b"x"}, "zk-digest", tmp_path)


def test_credential_and_tls_options_pass_through_to_status() -> None:
    args = _parser().parse_args(["status", "--rg", "orders", "--zk-user", "orders", "--zk-password-file", "/p",
                                 "--zk-tls-dir", "/tls", "--zk-tls-verify-hostname"])
    assert _overrides(args) == ["--zk-user", "orders", "--zk-password-file", "/p", "--zk-tls-dir", "/tls",
                                "--zk-tls-verify-hostname"]
    assert parser().parse_args(["status", "--zk", "h", "--group", "/g", *_overrides(args)]).zk_user == "orders"


def test_secret_references_name_the_keys_the_plugin_reads(tmp_path: Path) -> None:
    rg = {"metadata": {"name": "orders", "namespace": "shop"},
          "spec": {"zookeeper": {"connect": "zk:2181",
                                 "credentialsSecretRef": {"name": "zk-digest", "usernameKey": "user",
                                                          "passwordKey": "pw"},
                                 "tls": {"secretRef": {"name": "zk-tls", "caKey": "ca.pem",
                                                       "certificateKey": "c.pem", "privateKeyKey": "k.pem"}}}}}
    access = access_from(rg)
    assert (access.credentials_secret, access.credential_keys) == ("zk-digest", ("user", "pw"))
    assert (access.tls_secret, access.tls_keys) == ("zk-tls", ("ca.pem", "c.pem", "k.pem"))
    argv = _credential_argv({"user": b"orders", "pw": b"s3cret"}, "zk-digest", tmp_path, access.credential_keys)
    assert argv[:2] == ["--zk-user", "orders"] and Path(argv[3]).read_bytes() == b"s3cret"
    with pytest.raises(InvalidInputError, match="user and pw"):
        _credential_argv({"username": b"orders", "password": b"x"}, "zk-digest", tmp_path, access.credential_keys)
    plain = access_from({**rg, "spec": {"zookeeper": {"connect": "zk:2181", "credentialsSecret": "zk-digest",
                                                      "tls": {"secret": "zk-tls"}}}})
    assert plain.credential_keys == ("username", "password") and plain.tls_keys == ("ca.crt", "tls.crt", "tls.key")


FAKE_KUBECTL = """#!{python}
import json, sys
with open({log!r}, "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\\n")
print(json.dumps({{"metadata": {{"name": "orders", "namespace": "shop"}},
                  "spec": {{"zookeeper": {{"connect": "zk-0.zk.zookeeper.svc:2181"}}}}}}))
"""


def test_zk_and_context_reach_a_port_forwarded_ensemble_through_another_context(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: no ``--zk`` (the in-cluster connect string only) and no ``--context``."""
    import json
    import socket
    import sys

    from rebalanser.kubectl_plugin import main

    calls = tmp_path / "calls"
    kubectl = tmp_path / "kubectl"
    kubectl.write_text(FAKE_KUBECTL.format(python=sys.executable, log=str(calls)))
    kubectl.chmod(0o755)
    monkeypatch.setenv("KUBECTL", str(kubectl))
    with socket.socket() as closed:  # bound, never listening: nothing answers there
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
        code = main(["status", "--rg", "orders", "-n", "shop", "--context", "kind-rebalanser",
                     "--zk", f"127.0.0.1:{port}", "--connect-timeout", "1"])
    assert code == 4
    assert f"cannot connect to ZooKeeper at 127.0.0.1:{port} within 1 s" in capsys.readouterr().err
    argv = json.loads(calls.read_text().splitlines()[0])
    assert argv[:4] == ["--context", "kind-rebalanser", "-n", "shop"] and "resourcegroups.rebalanser.io" in argv


@pytest.mark.parametrize("argv", [["rebalanser", "--version"], ["kubectl-rebalanser", "--version"]])
def test_both_commands_print_their_version(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    from rebalanser import __version__
    from rebalanser.kubectl_plugin import _parser as plugin_parser

    with pytest.raises(SystemExit) as ended:
        (parser() if argv[0] == "rebalanser" else plugin_parser()).parse_args(argv[1:])
    assert ended.value.code == 0
    assert capsys.readouterr().out == f"{argv[0]} {__version__}\n"
