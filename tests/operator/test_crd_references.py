"""The reference fields of the CRD (Secret references with key names, workloadRef with apiVersion, a full
label selector, the name-length rule): parsed by the models as the API server admits them, the older
fields meaning the same as a reference with the default keys, and the operator reading the keys named.
(tests/e2e/test_crd_references_e2e.py checks the same fields and the upgrade on a real API server.)"""

from __future__ import annotations

import base64
from typing import Any

import pytest
from rebalanser_operator.kube import CredentialsError, credentials_from, tls_from
from rebalanser_operator.spec import crdgen, models
from rebalanser_operator.spec.models import ResourceGroupSpec, SpecError, WorkloadKind

CONNECT = "zk-0:2181"


def parse(**spec: Any) -> ResourceGroupSpec:
    zookeeper = {"connect": CONNECT, **spec.pop("zookeeper", {})}
    return ResourceGroupSpec.parse({"zookeeper": zookeeper, **spec})


def b64(data: dict[str, bytes]) -> dict[str, str]:
    return {key: base64.b64encode(value).decode() for key, value in data.items()}


def test_credentials_secret_is_a_reference_with_the_default_keys() -> None:
    old = parse(zookeeper={"credentialsSecret": "zk-digest"}).zookeeper
    new = parse(zookeeper={"credentialsSecretRef": {"name": "zk-digest"}}).zookeeper
    assert old.credentials == new.credentials
    assert (new.credentials_secret, new.credentials.username_key, new.credentials.password_key) == (  # type: ignore[union-attr]
        "zk-digest", "username", "password")
    custom = parse(zookeeper={"credentialsSecretRef": {"name": "s", "usernameKey": "user", "passwordKey": "pw"}})
    ref = custom.zookeeper.credentials
    assert ref is not None and (ref.name, ref.username_key, ref.password_key) == ("s", "user", "pw")
    assert parse().zookeeper.credentials is None and parse().zookeeper.credentials_secret is None


def test_tls_secret_is_a_reference_with_the_default_keys() -> None:
    old = parse(zookeeper={"tls": {"secret": "zk-tls"}}).zookeeper.tls
    new = parse(zookeeper={"tls": {"secretRef": {"name": "zk-tls"}, "verifyHostname": True}}).zookeeper.tls
    assert old is not None and new is not None
    assert old.secret == new.secret == "zk-tls" and old.keys == new.keys == ("ca.crt", "tls.crt", "tls.key")
    custom = parse(zookeeper={"tls": {"secretRef": {"name": "t", "caKey": "ca.pem", "certificateKey": "c.pem",
                                                    "privateKeyKey": "k.pem"}}}).zookeeper.tls
    assert custom is not None and custom.keys == ("ca.pem", "c.pem", "k.pem") and custom.secret == "t"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"zookeeper": {"credentialsSecret": "a", "credentialsSecretRef": {"name": "b"}}}, "not both"),
        ({"zookeeper": {"tls": {"secret": "a", "secretRef": {"name": "b"}}}}, "exactly one"),
        ({"zookeeper": {"tls": {"verifyHostname": True}}}, "exactly one"),
        ({"zookeeper": {"credentialsSecretRef": {"name": "s", "usernameKey": "a/b"}}}, "usernameKey"),
        ({"workload": {"kind": "Deployment", "name": "w"},
          "workloadRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "w"}}, "not both"),
        ({"workloadRef": {"kind": "Deployment", "name": "w"}}, "apiVersion"),
        ({"workloadRef": {"apiVersion": "apps/v2", "kind": "Deployment", "name": "w"}}, "apiVersion"),
        ({"podSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}}, "In and NotIn need values"),
        ({"podSelector": {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}},
         "Exists and DoesNotExist take none"),
        ({"podSelector": {"matchExpressions": [{"key": "a", "operator": "Like", "values": ["x"]}]}}, "operator"),
    ],
)
def test_what_the_schema_refuses_the_models_refuse(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        parse(**spec)


def test_workload_is_a_workload_ref_in_apps_v1() -> None:
    old = parse(workload={"kind": "StatefulSet", "name": "w"}).workload
    new = parse(workloadRef={"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "w"}).workload
    assert old == new and new is not None
    assert (new.api_version.value, new.kind, new.name) == ("apps/v1", WorkloadKind.STATEFUL_SET, "w")
    assert parse().workload is None


LABELS = {"app": "orders", "tier": "worker"}


@pytest.mark.parametrize(
    ("selector", "selected"),
    [
        ({}, True),
        ({"matchLabels": {"app": "orders"}}, True),
        ({"matchLabels": {"app": "other"}}, False),
        ({"matchExpressions": [{"key": "app", "operator": "In", "values": ["orders", "x"]}]}, True),
        ({"matchExpressions": [{"key": "app", "operator": "In", "values": ["x"]}]}, False),
        ({"matchExpressions": [{"key": "zone", "operator": "In", "values": ["x"]}]}, False),
        ({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["orders"]}]}, False),
        ({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["x"]}]}, True),
        ({"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["x"]}]}, True),
        ({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}, True),
        ({"matchExpressions": [{"key": "zone", "operator": "Exists"}]}, False),
        ({"matchExpressions": [{"key": "zone", "operator": "DoesNotExist"}]}, True),
        ({"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}, False),
        ({"matchLabels": {"app": "orders"}, "matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]},
         False),
    ],
)
def test_the_pod_selector_is_a_label_selector(selector: dict[str, Any], selected: bool) -> None:
    pods = parse(podSelector=selector).pod_selector
    assert pods is not None and pods.selects(LABELS) is selected


def test_the_name_rule_is_at_the_root_checked_on_create_only() -> None:
    root = crdgen.build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    (rule,) = root["x-kubernetes-validations"]
    assert rule["optionalOldSelf"] is True and rule["rule"].startswith("oldSelf.hasValue() || ")
    assert "has(self.spec.zookeeper.path)" in rule["rule"] and "<= 200" in rule["rule"]
    assert models.DEFAULT_PATH_NAME_MAX == models.RESOURCE_NAME_MAX  # a default path's last segment


def test_the_operator_reads_the_keys_a_reference_names() -> None:
    data = b64({"user": b"alice", "pw": b"secret", "ca.pem": b"CA", "c.pem": b"CERT", "k.pem": b"KEY",
                "username": b"bob", "password": b"other"})
    assert credentials_from(data, "ns/s", username_key="user", password_key="pw").username == "alice"
    assert credentials_from(data, "ns/s").username == "bob"
    with pytest.raises(CredentialsError, match="'login' and 'pw'"):
        credentials_from(data, "ns/s", username_key="login", password_key="pw")
    material = tls_from(data, "ns/s", keys=("ca.pem", "c.pem", "k.pem"))
    assert material.ca == b"CA"


def test_the_user_name_comes_only_from_its_own_key() -> None:
    """The user name is shown in clear in the group's ACL. Before: usernameKey could name the password's
    key (the password then appeared in clear in a world-readable ACL), and a user name equal to the
    password was used."""
    data = b64({"username": b"alice", "password": b"secret", "same": b"alice"})
    with pytest.raises(CredentialsError, match="usernameKey and passwordKey both name 'password'"):
        credentials_from(data, "ns/s", username_key="password", password_key="password")
    with pytest.raises(CredentialsError, match="equals the password"):
        credentials_from(data, "ns/s", username_key="username", password_key="same")
    material = tls_from(data | b64({"ca.pem": b"CA", "c.pem": b"CERT", "k.pem": b"KEY"}), "ns/s",
                        keys=("ca.pem", "c.pem", "k.pem"))
    assert (material.ca, material.certificate, material.key) == (b"CA", b"CERT", b"KEY")
    assert tls_from(data, "ns/s").ca is None
