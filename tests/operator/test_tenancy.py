"""The administrator's tenancy settings: path roots, allowed ensembles, limits (pure functions), and how
the command line and the environment give them."""

from __future__ import annotations

import pytest
from rebalanser_operator.main import parse_args
from rebalanser_operator.tenancy import (
    ENSEMBLE_NOT_ALLOWED,
    LIMIT_EXCEEDED,
    PATH_NOT_ALLOWED,
    AllowedEnsembles,
    Limits,
    PathRoots,
    Placement,
    Refusal,
    SettingError,
    normalise_connect,
    split_connect,
)

ROOTS = PathRoots()  # /rebalanser/{namespace}


def test_connect_strings_are_split_into_servers_and_chroot() -> None:
    assert split_connect("ZK-0.zk:2181,zk-1.zk/apps/x/") == (["zk-0.zk:2181", "zk-1.zk:2181"], "/apps/x")
    assert split_connect("[::1]:2182") == (["[::1]:2182"], "")
    with pytest.raises(SettingError):
        split_connect("/only-a-chroot")
    with pytest.raises(SettingError):
        split_connect("host:99999")


def test_connect_strings_are_normalised_and_a_trailing_dot_is_refused() -> None:
    """Before: ``127.0.0.1.:2181`` (never resolves) was admitted as 127.0.0.1, and ``ZK:2181`` and ``zk``
    were two sessions of the pool."""
    assert normalise_connect("ZK-1.zk,zk-0.ZK:2181,zk-1.zk:2181/apps") == "zk-0.zk:2181,zk-1.zk:2181/apps"
    assert normalise_connect("zk") == normalise_connect("ZK:2181")
    with pytest.raises(SettingError, match=r"ending in '\.'"):
        normalise_connect("zk-0.zk.:2181")
    refusal = AllowedEnsembles.parse(["127.0.0.1:2181"]).check("127.0.0.1.:2181")
    assert refusal is not None and refusal.reason == "EnsembleNotAllowed" and "'.'" in refusal.message, refusal
    with pytest.raises(SettingError):
        AllowedEnsembles.parse(["zk-0.zk.:2181"])


@pytest.mark.parametrize("path", [
    "/rebalanser",  # the parent of every namespace
    "/rebalanser/shop",  # the namespace's root itself
    "/rebalanser/victim/orders",  # another namespace
    "/rebalanser/victim",
    "/brokers",  # another application's tree
    "/rebalanser-shop/orders",  # a look-alike prefix
])
def test_paths_outside_the_namespaces_root_are_refused(path: str) -> None:
    refusal = ROOTS.place("shop", "zk:2181", path)
    assert isinstance(refusal, Refusal) and refusal.reason == PATH_NOT_ALLOWED
    assert "/rebalanser/shop/<name>" in refusal.message


def test_paths_below_the_namespaces_root_are_placed() -> None:
    assert ROOTS.place("shop", "zk:2181", "/rebalanser/shop/orders") == Placement("/rebalanser/shop/orders",
                                                                                   "/rebalanser/shop")
    assert ROOTS.place("shop", "zk:2181", "/rebalanser/shop/a/b") == Placement("/rebalanser/shop/a/b",
                                                                                "/rebalanser/shop")
    assert ROOTS.default_path("shop", "orders") == "/rebalanser/shop/orders"


@pytest.mark.parametrize(("connect", "path", "placed"), [
    ("zk:2181/rebalanser", "/shop/orders", Placement("/shop/orders", "/shop")),
    ("zk:2181/rebalanser/shop", "/orders", Placement("/orders", "")),
    ("zk:2181/", "/rebalanser/shop/orders", Placement("/rebalanser/shop/orders", "/rebalanser/shop")),
])
def test_a_chroot_counts_and_may_name_the_root_or_above(connect: str, path: str, placed: Placement) -> None:
    assert ROOTS.place("shop", connect, path) == placed


@pytest.mark.parametrize(("connect", "path"), [
    ("zk:2181/rebalanser/victim", "/orders"),  # another namespace through a chroot
    ("zk:2181/brokers", "/rebalanser/shop/x"),  # the path looks right, the chroot moves it
    ("zk:2181/rebalanser", "/shop"),  # the namespace's root itself
    ("zk:2181/rebalanser/shop/victim", "/owners"),  # below the root: the nodes above are out of sight
])
def test_a_chroot_cannot_lead_out_of_the_root(connect: str, path: str) -> None:
    refusal = ROOTS.place("shop", connect, path)
    assert isinstance(refusal, Refusal) and refusal.reason == PATH_NOT_ALLOWED


def test_path_root_templates() -> None:
    roots = PathRoots.parse(["/teams/{namespace}/rebalanser", "/rebalanser/{namespace}"])
    assert roots.roots("shop") == ["/teams/shop/rebalanser", "/rebalanser/shop"]
    assert roots.default_path("shop", "g") == "/teams/shop/rebalanser/g"
    assert isinstance(roots.place("shop", "zk", "/rebalanser/shop/g"), Placement)
    assert PathRoots.parse(["/a/{namespace}; /b/{namespace}"]).templates == ("/a/{namespace}", "/b/{namespace}")
    for bad in ["rebalanser/{namespace}", "/x/{namespace}/", "/x/ns-{namespace}", "/zookeeper/{namespace}",
                "/x y/{namespace}"]:
        with pytest.raises(SettingError):
            PathRoots.parse([bad])
    with pytest.raises(SettingError, match="inside another's"):  # namespace "x"'s root would hold "/a/x/ns"
        PathRoots.parse(["/a/{namespace}", "/a/x/{namespace}"])
    with pytest.raises(SettingError):
        PathRoots.parse([""])


def test_allowed_ensembles() -> None:
    allowed = AllowedEnsembles.parse(["zk-0.zk:2181,zk-1.zk:2181", "other:2182; third"])
    assert allowed.check("zk-1.zk:2181,ZK-0.zk/rebalanser") is None
    assert allowed.check("third:2181") is None
    refusal = allowed.check("zk-0.zk:2181,evil.example:2181")
    assert isinstance(refusal, Refusal) and refusal.reason == ENSEMBLE_NOT_ALLOWED
    assert "evil.example:2181" in refusal.message and "Nothing was sent" in refusal.message
    assert allowed.check("zk-0.zk:2182") is not None  # another port is another server
    nothing = AllowedEnsembles.parse([""])
    assert nothing.check("zk:2181") is not None and "not set" in str(nothing.check("zk:2181"))
    assert AllowedEnsembles.parse(["*"]).check("anything:1") is None
    with pytest.raises(SettingError):
        AllowedEnsembles.parse(["zk:2181/chroot"])


def test_limits() -> None:
    assert Limits().check_resources(10**6) is None
    refusal = Limits(resources_per_group=10).check_resources(11)
    assert refusal is not None and refusal.reason == LIMIT_EXCEEDED
    assert Limits(resources_per_group=10).check_resources(10) is None
    assert Limits(groups_per_namespace=2).groups_refusal("shop").reason == LIMIT_EXCEEDED
    assert Limits(sessions_per_namespace=2).sessions_refusal("shop").reason == LIMIT_EXCEEDED


def test_secret_keys_above_the_limit_are_refused_and_the_defaults_apply_at_zero() -> None:
    assert (Limits().workers, Limits().key_bytes, Limits().store_bytes) == (8, 128 << 10, 8 << 20)
    assert Limits().check_secret_keys("shop/tls", [("ca.crt", 128 << 10)]) is None
    refusal = Limits().check_secret_keys("shop/tls", [("tls.crt", 10), ("ca.crt", (128 << 10) + 1)])
    assert refusal is not None and refusal.reason == "SecretKeyTooLarge"
    assert "key ca.crt of Secret shop/tls holds 131073 bytes" in refusal.message
    assert Limits(secret_key_bytes=1 << 20).check_secret_keys("s", [("ca.crt", 700_000)]) is None


def test_the_share_and_store_limits_come_from_flags_else_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REBALANSER_MAX_SESSIONS_PER_NAMESPACE", "6")
    monkeypatch.setenv("REBALANSER_WORKERS_PER_NAMESPACE", "4")
    monkeypatch.setenv("REBALANSER_MAX_SECRET_KEY_BYTES", "1000")
    monkeypatch.setenv("REBALANSER_MAX_TLS_STORE_BYTES", "5000")
    assert parse_args(["-n", "a"]).tenancy.limits == Limits(sessions_per_namespace=6, workers_per_namespace=4,
                                                            secret_key_bytes=1000, tls_store_bytes=5000)
    flags = parse_args(["-n", "a", "--max-sessions-per-namespace", "1", "--workers-per-namespace", "2",
                        "--max-secret-key-bytes", "3", "--max-tls-store-bytes", "4"]).tenancy.limits
    assert flags == Limits(sessions_per_namespace=1, workers_per_namespace=2, secret_key_bytes=3, tls_store_bytes=4)


def test_the_command_line_default_allows_no_ensemble(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("REBALANSER_PATH_ROOT", "REBALANSER_ALLOWED_ENSEMBLES", "REBALANSER_CLUSTER_ID",
                 "REBALANSER_MAX_GROUPS_PER_NAMESPACE", "REBALANSER_MAX_RESOURCES_PER_GROUP",
                 "REBALANSER_MAX_SESSIONS_PER_NAMESPACE", "REBALANSER_WORKERS_PER_NAMESPACE",
                 "REBALANSER_MAX_SECRET_KEY_BYTES", "REBALANSER_MAX_TLS_STORE_BYTES"):
        monkeypatch.delenv(name, raising=False)
    tenancy = parse_args(["-n", "a"]).tenancy
    assert tenancy.path_roots.templates == ("/rebalanser/{namespace}",)
    assert not tenancy.ensembles.any and not tenancy.ensembles.servers
    assert tenancy.cluster_id == "" and tenancy.limits == Limits()


def test_settings_come_from_flags_else_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REBALANSER_PATH_ROOT", "/env/{namespace}")
    monkeypatch.setenv("REBALANSER_ALLOWED_ENSEMBLES", "zk-0:2181,zk-1:2181;zk-2")
    monkeypatch.setenv("REBALANSER_CLUSTER_ID", "from-env")
    monkeypatch.setenv("REBALANSER_MAX_GROUPS_PER_NAMESPACE", "5")
    monkeypatch.setenv("REBALANSER_MAX_RESOURCES_PER_GROUP", "100")
    env = parse_args(["-n", "a"]).tenancy
    assert env.path_roots.templates == ("/env/{namespace}",)
    assert env.ensembles.servers == {"zk-0:2181", "zk-1:2181", "zk-2:2181"}
    assert (env.cluster_id, env.limits) == ("from-env", Limits(5, 100))
    flags = parse_args(["-n", "a", "--path-root", "/f/{namespace}", "--allowed-ensemble", "f:1",
                        "--allowed-ensemble", "g:2", "--cluster-id", "c", "--max-groups-per-namespace", "0",
                        "--max-resources-per-group", "7"]).tenancy
    assert flags.path_roots.templates == ("/f/{namespace}",)
    assert flags.ensembles.servers == {"f:1", "g:2"}
    assert (flags.cluster_id, flags.limits) == ("c", Limits(0, 7))


@pytest.mark.parametrize("argv", [["--path-root", "relative"], ["--allowed-ensemble", "zk/chroot"],
                                  ["--max-groups-per-namespace", "-1"]])
def test_bad_settings_stop_the_operator_at_once(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(["-n", "a", *argv])
