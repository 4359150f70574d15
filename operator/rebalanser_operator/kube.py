"""What the operator needs from Kubernetes besides kopf: status patches, Events, Secrets, workloads.

:class:`KubeGateway` is the narrow interface the reconcile and status code depends on;
:class:`KubernetesGateway` implements it with the official client (blocking: call it from a thread;
every request is bounded by :data:`REQUEST_TIMEOUT`).
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Mapping
from typing import Any, Protocol

import kopf
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from rebalanser.tls import CA_FILE, CERTIFICATE_FILE, KEY_FILE

from rebalanser_operator.identity import DigestCredentials
from rebalanser_operator.spec import models
from rebalanser_operator.status.rollout import rolling_out
from rebalanser_operator.zktls import TlsMaterial

log = logging.getLogger(__name__)

#: (connect, read) seconds for every call: a stalled API server fails the call instead of holding a
#: thread of the shared pool (status loops, reconciles) forever.
REQUEST_TIMEOUT = (5.0, 20.0)


#: The label on every ConfigMap the operator creates; it replaces no other ConfigMap.
MANAGED_BY = ("app.kubernetes.io/managed-by", "rebalanser-operator")
#: The annotations of a workers' ConfigMap that carry its publisher's fence (a serving replica's claim and
#: token), which the replicas' config fence compares.
FENCE_CLAIM = "rebalanser.io/fence-claim"
FENCE_TOKEN = "rebalanser.io/fence-token"


class ForeignConfigMap(RuntimeError):
    """A ConfigMap of the workers' ConfigMap's name exists and was not created by the operator."""


class CredentialsError(RuntimeError):
    """The referenced Secret is missing or lacks what it must hold (``username``/``password``, or
    valid TLS keys)."""


#: The default keys of a TLS Secret: CA, client certificate, its private key.
TLS_KEYS = (CA_FILE, CERTIFICATE_FILE, KEY_FILE)


def credentials_from(data: Mapping[str, str] | None, where: str, *, username_key: str = "username",
                     password_key: str = "password") -> DigestCredentials:
    """Digest credentials from a Secret's ``data`` (base64 values) under the given keys; ``where``
    names it in errors. The user name is public (ZooKeeper shows it in clear in every ACL naming the
    digest): it comes only from ``username_key``, never the password's key, and never equals the password."""
    data = data or {}
    if username_key == password_key:
        raise CredentialsError(f"Secret {where}: usernameKey and passwordKey both name '{password_key}'; the user "
                               "name is shown in clear in the group's ACL, so it must come from a key of its own")
    try:
        username = base64.b64decode(data[username_key]).decode()
        password = base64.b64decode(data[password_key]).decode()
    except (KeyError, ValueError) as exc:
        raise CredentialsError(f"Secret {where} needs keys '{username_key}' and '{password_key}'") from exc
    if not username or ":" in username:
        raise CredentialsError(f"Secret {where}: username must be non-empty without ':'")
    if username == password:
        raise CredentialsError(f"Secret {where}: the user name equals the password; the user name is public (shown "
                               "in clear in the group's ACL), so choose another password")
    return DigestCredentials(username, password)


def tls_from(data: Mapping[str, str] | None, where: str, *, verify_hostname: bool = False,
             keys: tuple[str, str, str] = TLS_KEYS) -> TlsMaterial:
    """TLS material from a Secret's ``data`` under ``keys`` (CA, certificate, private key; by default
    ``ca.crt``, ``tls.crt``, ``tls.key``): PEM, each optional, the last two together."""
    data = data or {}
    try:
        ca, certificate, key = (base64.b64decode(data[name]) if data.get(name) else None for name in keys)
        return TlsMaterial(ca, certificate, key, verify_hostname)
    except ValueError as exc:
        raise CredentialsError(f"Secret {where}: {exc}") from exc


class KubeGateway(Protocol):
    def patch_status(self, namespace: str, name: str, patch: Mapping[str, Any]) -> bool:
        """Merge-patches ``status``; returns False when the object no longer exists."""

    def post_event(self, body: Mapping[str, Any], type: str, reason: str, message: str) -> None:
        """Posts a core/v1 Event about the object ``body`` (never raises)."""

    def read_credentials(self, namespace: str, secret: str, *, username_key: str = "username",
                         password_key: str = "password") -> DigestCredentials:
        """Reads the user name and password from a Secret; raises :class:`CredentialsError`."""

    def read_tls(self, namespace: str, secret: str, *, verify_hostname: bool = False,
                 keys: tuple[str, str, str] = TLS_KEYS) -> TlsMaterial:
        """Reads the CA, certificate and key (``keys``) from a Secret; raises :class:`CredentialsError`."""

    def secret_data(self, namespace: str, secret: str) -> dict[str, str] | None:
        """A Secret's ``data`` (base64 values) read by name; None when it cannot be read."""

    def publish_config(
        self, namespace: str, name: str, data: Mapping[str, str], owner: Mapping[str, Any] | None,
        stamp: tuple[int, int] | None = None,
    ) -> None:
        """Creates or replaces the ConfigMap ``name`` holding ``data``, owned by ``owner`` (an object
        reference) when given; raises on failure. A ConfigMap of that name the operator did not
        create (without its ``managed-by`` label) is never replaced: :class:`ForeignConfigMap`.
        ``stamp``: a serving replica's fence (claim, token), written as the ConfigMap's
        :data:`FENCE_CLAIM` and :data:`FENCE_TOKEN` annotations (the replicas' config fence refuses a
        smaller one: :func:`rebalanser_operator.replicafence.config_manifests`)."""

    def workload_rolling_out(self, namespace: str, kind: str, name: str) -> bool | None:
        """True while the Deployment/StatefulSet rolls out; None when it cannot be read."""

    def namespace_terminating(self, namespace: str) -> bool:
        """True when the namespace is being deleted (or already gone)."""

    def list_groups(self, namespace: str) -> list[Mapping[str, Any]]:
        """The ResourceGroups of a namespace, as bodies."""

    def get_group(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        """One ResourceGroup's body; None when it does not exist (a step about one group reads that one:
        listing the namespace for each of its groups costs the square of their number)."""

    def list_pods(self, namespace: str) -> list[Mapping[str, Any]]:
        """The pods of a namespace, as bodies (an operator replica that gains a group catches up on the
        ended instances reported while nobody served it)."""

    def remove_finalizer(self, namespace: str, name: str, finalizer: str) -> bool:
        """Removes ``finalizer`` from the object's metadata; False when the object is gone."""


class KubernetesGateway:
    """:class:`KubeGateway` over the official client; Events go through kopf's poster."""

    def __init__(self, api_client: k8s.ApiClient) -> None:
        self._custom = k8s.CustomObjectsApi(api_client)
        self._core = k8s.CoreV1Api(api_client)
        self._apps = k8s.AppsV1Api(api_client)

    def patch_status(self, namespace: str, name: str, patch: Mapping[str, Any]) -> bool:
        try:
            self._custom.patch_namespaced_custom_object_status(
                models.GROUP, models.VERSION, namespace, models.PLURAL, name, {"status": dict(patch)},
                _content_type="application/merge-patch+json", _request_timeout=REQUEST_TIMEOUT,
            )
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def post_event(self, body: Mapping[str, Any], type: str, reason: str, message: str) -> None:
        try:
            kopf.event(body, type=type, reason=reason, message=message[:1024])  # type: ignore[arg-type]
        except LookupError:  # outside a running operator (no event queue): log only
            log.info("event %s %s: %s", type, reason, message)

    def read_credentials(self, namespace: str, secret: str, *, username_key: str = "username",
                         password_key: str = "password") -> DigestCredentials:
        return credentials_from(self._secret_data(namespace, secret), f"{namespace}/{secret}",
                                username_key=username_key, password_key=password_key)

    def read_tls(self, namespace: str, secret: str, *, verify_hostname: bool = False,
                 keys: tuple[str, str, str] = TLS_KEYS) -> TlsMaterial:
        return tls_from(self._secret_data(namespace, secret), f"{namespace}/{secret}", verify_hostname=verify_hostname,
                        keys=keys)

    def secret_data(self, namespace: str, secret: str) -> dict[str, str] | None:
        try:
            return self._secret_data(namespace, secret)
        except CredentialsError as exc:
            log.debug("%s", exc)
            return None

    def _secret_data(self, namespace: str, secret: str) -> dict[str, str]:
        try:
            obj = self._core.read_namespaced_secret(secret, namespace, _request_timeout=REQUEST_TIMEOUT)
        except ApiException as exc:
            raise CredentialsError(f"cannot read Secret {namespace}/{secret}: {exc.status} {exc.reason}") from exc
        return {key: str(value) for key, value in (obj.data or {}).items()}

    def publish_config(
        self, namespace: str, name: str, data: Mapping[str, str], owner: Mapping[str, Any] | None,
        stamp: tuple[int, int] | None = None,
    ) -> None:
        meta = owner.get("metadata", {}) if owner else {}
        references = [k8s.V1OwnerReference(
            api_version=str(owner.get("apiVersion")), kind=str(owner.get("kind")), name=str(meta.get("name")),
            uid=str(meta.get("uid")), controller=True,
        )] if owner and meta.get("uid") else None
        body = k8s.V1ConfigMap(
            metadata=k8s.V1ObjectMeta(
                name=name, namespace=namespace, owner_references=references,
                labels=dict([MANAGED_BY]),
                annotations={FENCE_CLAIM: str(stamp[0]), FENCE_TOKEN: str(stamp[1])} if stamp is not None else None,
            ),
            data=dict(data),
        )
        try:
            self._core.create_namespaced_config_map(namespace, body, _request_timeout=REQUEST_TIMEOUT)
        except ApiException as exc:
            if exc.status != 409:
                raise
            existing: Any = self._core.read_namespaced_config_map(name, namespace, _request_timeout=REQUEST_TIMEOUT)
            labels = (existing.metadata.labels or {}) if existing.metadata is not None else {}
            if labels.get(MANAGED_BY[0]) != MANAGED_BY[1]:
                raise ForeignConfigMap(
                    f"ConfigMap {namespace}/{name} exists and was not created by the operator "
                    f"(no label {MANAGED_BY[0]}={MANAGED_BY[1]}); it is left alone") from exc
            # Replaced only as read: a concurrent change fails with 409 and the caller retries.
            body.metadata.resource_version = existing.metadata.resource_version  # type: ignore[union-attr]
            self._core.replace_namespaced_config_map(name, namespace, body, _request_timeout=REQUEST_TIMEOUT)

    def workload_rolling_out(self, namespace: str, kind: str, name: str) -> bool | None:
        try:
            if kind == models.WorkloadKind.STATEFUL_SET.value:
                obj: Any = self._apps.read_namespaced_stateful_set(name, namespace, _request_timeout=REQUEST_TIMEOUT)
            else:
                obj = self._apps.read_namespaced_deployment(name, namespace, _request_timeout=REQUEST_TIMEOUT)
        except ApiException as exc:
            log.debug("workload %s %s/%s unreadable: %s", kind, namespace, name, exc.status)
            return None
        return rolling_out(kind, self._apps.api_client.sanitize_for_serialization(obj))


    def namespace_terminating(self, namespace: str) -> bool:
        try:
            obj: Any = self._core.read_namespace(namespace, _request_timeout=REQUEST_TIMEOUT)
        except ApiException as exc:
            if exc.status == 404:
                return True
            raise
        deleted = obj.metadata is not None and obj.metadata.deletion_timestamp is not None
        return bool(deleted or (obj.status is not None and obj.status.phase == "Terminating"))

    def list_groups(self, namespace: str) -> list[Mapping[str, Any]]:
        result: Any = self._custom.list_namespaced_custom_object(
            models.GROUP, models.VERSION, namespace, models.PLURAL, _request_timeout=REQUEST_TIMEOUT)
        return list(result.get("items", []))

    def get_group(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        return read_group(self._custom, namespace, name)

    def list_pods(self, namespace: str) -> list[Mapping[str, Any]]:
        result: Any = self._core.list_namespaced_pod(namespace, _request_timeout=REQUEST_TIMEOUT)
        return list(self._core.api_client.sanitize_for_serialization(result).get("items", []))

    def remove_finalizer(self, namespace: str, name: str, finalizer: str) -> bool:
        for _ in range(5):  # optimistic concurrency: the list is patched against the version read
            try:
                obj: Any = self._custom.get_namespaced_custom_object(
                    models.GROUP, models.VERSION, namespace, models.PLURAL, name, _request_timeout=REQUEST_TIMEOUT)
            except ApiException as exc:
                if exc.status == 404:
                    return False
                raise
            finalizers = list(obj["metadata"].get("finalizers", []))
            if finalizer not in finalizers:
                return True
            patch = {"metadata": {"finalizers": [f for f in finalizers if f != finalizer],
                                  "resourceVersion": obj["metadata"]["resourceVersion"]}}
            try:
                self._custom.patch_namespaced_custom_object(
                    models.GROUP, models.VERSION, namespace, models.PLURAL, name, patch,
                    _content_type="application/merge-patch+json", _request_timeout=REQUEST_TIMEOUT)
                return True
            except ApiException as exc:
                if exc.status == 404:
                    return False
                if exc.status != 409:
                    raise
        return False


def read_group(custom: k8s.CustomObjectsApi, namespace: str, name: str) -> Mapping[str, Any] | None:
    """One ResourceGroup's body, None when it does not exist."""
    try:
        body: Any = custom.get_namespaced_custom_object(
            models.GROUP, models.VERSION, namespace, models.PLURAL, name, _request_timeout=REQUEST_TIMEOUT)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return dict(body)
