"""CLI parsing, kopf settings and the workload rollout rule."""

from __future__ import annotations

import asyncio
import inspect
from pathlib import Path

import pytest
from rebalanser_operator.handlers import FINALIZER, build_registry, object_ref, operator_settings
from rebalanser_operator.main import parse_args
from rebalanser_operator.replicas import Replicas, ReplicaSettings
from rebalanser_operator.replicaserve import ListKeeper
from rebalanser_operator.runtime import OperatorContext

from tests.operator.support import RecordingKube


def test_namespaces_are_repeatable() -> None:
    args = parse_args(["--namespace", "a", "-n", "b"])
    assert args.namespaces == ["a", "b"] and not args.all_namespaces
    assert args.peering is None and args.metrics_port == 8080


def test_all_namespaces_excludes_namespace(capsys: pytest.CaptureFixture[str]) -> None:
    assert parse_args(["--all-namespaces"]).all_namespaces
    with pytest.raises(SystemExit):
        parse_args(["--all-namespaces", "--namespace", "a"])


def test_a_scope_is_required_unless_pod_namespace_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    with pytest.raises(SystemExit):
        parse_args([])
    monkeypatch.setenv("POD_NAMESPACE", "ops")
    assert parse_args([]).namespaces == ["ops"]


def test_peering_and_standalone_are_exclusive() -> None:
    assert parse_args(["-n", "a", "--peering", "p"]).peering == "p"
    with pytest.raises(SystemExit):
        parse_args(["-n", "a", "--peering", "p", "--standalone"])


def test_version_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    from rebalanser import __version__

    with pytest.raises(SystemExit) as ended:
        parse_args(["--version"])
    assert ended.value.code == 0 and capsys.readouterr().out == f"rebalanser-operator {__version__}\n"


def test_settings_keep_kopf_state_in_the_project_domain_and_bound_watches() -> None:
    settings = operator_settings()
    assert settings.persistence.finalizer == FINALIZER == "rebalanser.io/finalizer"
    assert settings.watching.server_timeout and settings.watching.client_timeout
    assert settings.watching.client_timeout > settings.watching.server_timeout
    assert settings.watching.inactivity_timeout and settings.watching.connect_timeout
    assert settings.posting.reporting_component == "rebalanser-operator"


def test_registry_has_every_handler() -> None:
    ctx = OperatorContext(kube=RecordingKube())
    try:
        registry = build_registry(ctx)
        changing = {h.id for h in registry._changing.get_all_handlers()}
        spawning = {h.id for h in registry._spawning.get_all_handlers()}
        assert changing == {"reconcile", "reconcile/spec", "cleanup-znodes"} and spawning == {"status"}
    finally:
        ctx.close()


def test_the_liveness_probe_runs_on_the_event_loop() -> None:
    """A sync probe would wait for a thread of the executor that slow reconciles may all hold."""
    ctx = OperatorContext(kube=RecordingKube())
    try:
        registry = build_registry(ctx)
        (probe,) = [h for h in registry._activities.get_all_handlers() if h.id == "zookeeperConnections"]
        assert inspect.iscoroutinefunction(probe.fn)
        assert asyncio.run(probe.fn()) == 0
    finally:
        ctx.close()


def test_object_ref_keeps_only_what_events_need() -> None:
    body = {"apiVersion": "v", "kind": "K", "metadata": {"name": "n", "namespace": "s", "uid": "u", "labels": {}},
            "spec": {"big": 1}}
    assert object_ref(body) == {"apiVersion": "v", "kind": "K", "metadata": {"name": "n", "namespace": "s", "uid": "u"}}




def test_the_operators_zookeeper_identity_from_flags_or_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = tmp_path / "password"
    secret.write_text("a-long-random-password\n")
    assert parse_args(["-n", "a"]).identity is None
    identity = parse_args(["-n", "a", "--zk-identity-user", "op", "--zk-identity-password-file", str(secret)]).identity
    assert identity is not None and identity.username == "op" and identity.password == "a-long-random-password"
    assert "a-long-random-password" not in repr(identity)
    monkeypatch.setenv("REBALANSER_ZK_IDENTITY_USER", "op2")
    monkeypatch.setenv("REBALANSER_ZK_IDENTITY_PASSWORD_FILE", str(secret))
    from_env = parse_args(["-n", "a"]).identity
    assert from_env is not None and from_env.username == "op2"
    monkeypatch.setenv("REBALANSER_ZK_IDENTITY_PASSWORD_FILE", str(tmp_path / "missing"))
    with pytest.raises(SystemExit):
        parse_args(["-n", "a"])
    monkeypatch.delenv("REBALANSER_ZK_IDENTITY_PASSWORD_FILE")
    with pytest.raises(SystemExit):
        parse_args(["-n", "a"])  # a user without a password file


def test_the_operators_x509_identity_from_a_tls_directory_and_its_bad_input(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.support.tls import CertificateAuthority

    ca = CertificateAuthority.create(tmp_path / "ca", "ca-op")
    directory = ca.issue("rebalanser-operator").write_directory(tmp_path / "identity", ca)
    identity = parse_args(["-n", "a", "--zk-identity-tls-dir", str(directory)]).identity
    assert identity is not None and identity.acl_id == "x509:CN=rebalanser-operator" and identity.auth is None
    monkeypatch.setenv("REBALANSER_ZK_IDENTITY_TLS_DIR", str(directory))
    from_env = parse_args(["-n", "a"]).identity
    assert from_env is not None and from_env.acl_id == "x509:CN=rebalanser-operator"

    def refused(*argv: str) -> str:
        with pytest.raises(SystemExit):
            parse_args(["-n", "a", *argv])
        return capsys.readouterr().err

    secret = tmp_path / "password"
    secret.write_text("a-long-random-password\n")
    assert "not both" in refused("--zk-identity-user", "op", "--zk-identity-password-file", str(secret))
    monkeypatch.delenv("REBALANSER_ZK_IDENTITY_TLS_DIR")
    assert "is not a directory" in refused("--zk-identity-tls-dir", str(tmp_path / "absent"))
    (directory / "tls.key").unlink()
    assert "needs tls.key" in refused("--zk-identity-tls-dir", str(directory))
    (directory / "tls.key").write_bytes(b"key")
    (directory / "tls.crt").write_bytes(b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
    assert "tls.crt: the certificate does not parse" in refused("--zk-identity-tls-dir", str(directory))
    (directory / "ca.crt").write_bytes(b"")
    assert "ca.crt is empty" in refused("--zk-identity-tls-dir", str(directory))


def test_operator_replicas_are_off_unless_their_ensemble_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REBALANSER_REPLICA_ZK", raising=False)
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    monkeypatch.setenv("POD_NAME", "op-7c9d")
    assert parse_args(["-n", "shop"]).replica is None
    replica = parse_args(["-n", "shop", "--replica-zk", "zk:2181", "--replica-session-timeout", "4"]).replica
    assert (replica.hosts, replica.group, replica.member_id, replica.session_timeout) == \
        ("zk:2181", "/rebalanser-operator/shop", "op-7c9d", 4.0)
    monkeypatch.setenv("REBALANSER_REPLICA_ZK", "zk:2181")
    monkeypatch.setenv("POD_NAMESPACE", "rebalanser")
    assert parse_args(["-n", "shop", "--replica-id", "r1"]).replica.group == "/rebalanser-operator/rebalanser"


@pytest.mark.parametrize("group", ["/rebalanser/ops", "/rebalanser", "/"])
def test_the_operator_group_may_not_lie_in_a_tenant_path_root(group: str) -> None:
    with pytest.raises(SystemExit):
        parse_args(["-n", "shop", "--replica-zk", "zk:2181", "--replica-group", group])


def test_with_replicas_the_change_handlers_act_only_for_owned_groups() -> None:
    """The deletion handler is not filtered (a filtered one would let kopf release the finalizer of a group
    another replica deletes); the list of groups is kept from an index of them."""
    ctx = OperatorContext(kube=RecordingKube())
    try:
        replicas = Replicas(ReplicaSettings(hosts="127.0.0.1:1", group="/rebalanser-operator/t", member_id="r1"))
        registry = build_registry(ctx, replicas=replicas)
        changing = {h.id: h.when for h in registry._changing.get_all_handlers()}
        assert changing.keys() == {"reconcile", "reconcile/spec", "cleanup-znodes"}
        assert changing["cleanup-znodes"] is None
        assert changing["reconcile"] is not None and changing["reconcile/spec"] is not None
        assert not changing["reconcile"](namespace="shop", name="orders")  # not joined: owns nothing
        assert {h.id for h in registry._indexing.get_all_handlers()} >= {"replica_groups"}
        assert "operatorGroup" in {h.id for h in registry._activities.get_all_handlers()}
        single = build_registry(ctx)
        assert "operatorGroup" not in {h.id for h in single._activities.get_all_handlers()}
        assert all(h.when is None for h in single._changing.get_all_handlers())
        assert "replica_groups" not in {h.id for h in single._indexing.get_all_handlers()}
    finally:
        ctx.close()


def test_the_list_keeper_asks_the_api_server_which_groups_live() -> None:
    """ListKeeper._live (every LIST_PRUNE seconds in office): the names per namespace the API server lists;
    a namespace whose list fails is left out (its index entries stay)."""
    kube = RecordingKube()
    kube.groups["shop"] = [{"metadata": {"name": "a"}}, {"metadata": {"name": "b"}}]
    ctx = OperatorContext(kube=kube)
    try:
        keeper = ListKeeper(ctx, Replicas.single())
        assert keeper._live({"shop", "empty"}) == {"shop": {"a", "b"}, "empty": set()}
    finally:
        ctx.close()


@pytest.mark.parametrize("url", ["https://0.0.0.0:8082/readyz", "http://0.0.0.0/readyz", "readyz"])
def test_the_readiness_endpoint_must_be_a_plain_http_url_with_a_port(url: str) -> None:
    with pytest.raises(SystemExit):
        parse_args(["-n", "shop", "--replica-zk", "zk:2181", "--replica-readiness", url])
    assert parse_args(["-n", "shop", "--replica-readiness", "http://0.0.0.0:8082/readyz"]).replica_readiness


def test_the_release_identity_from_the_flag_or_the_environment(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/operator-replicas.md, Two releases: NAMESPACE/NAME (the chart's <release namespace>/<full name>)."""
    monkeypatch.delenv("REBALANSER_RELEASE", raising=False)
    monkeypatch.delenv("REBALANSER_RELEASE_LEASE_SECONDS", raising=False)
    assert parse_args(["-n", "a"]).release is None  # no claim: as before
    args = parse_args(["-n", "a", "--release", "ops/rel-rebalanser-operator"])
    assert str(args.release) == "ops/rel-rebalanser-operator" and args.release_lease_seconds == 60
    monkeypatch.setenv("REBALANSER_RELEASE", "team/op")
    monkeypatch.setenv("REBALANSER_RELEASE_LEASE_SECONDS", "6")
    args = parse_args(["-n", "a"])
    assert str(args.release) == "team/op" and args.release_lease_seconds == 6
    for bad in (["--release", "no-slash"], ["--release", "a/b", "--release-lease-seconds", "1"]):
        with pytest.raises(SystemExit):
            parse_args(["-n", "a", *bad])
    assert "NAMESPACE/NAME" in capsys.readouterr().err
