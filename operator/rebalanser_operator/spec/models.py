"""The ResourceGroup custom resource: spec and status as pydantic models.

These models are the single source of truth for the CRD. ``python -m rebalanser_operator.spec.crdgen``
turns them into the structural OpenAPI schema (``crds/resourcegroups.rebalanser.io.yaml``); the
operator parses every spec it handles with :meth:`ResourceGroupSpec.parse` and builds every status
from :class:`ResourceGroupStatus`. Kubernetes-only schema details (list types, CEL rules) travel in
``json_schema_extra`` next to the field they constrain.

Guarantees: a spec accepted by the API server under the generated schema is accepted by
:meth:`ResourceGroupSpec.parse` unless it is invalid in ways a schema cannot express (the expanded
resource count, reserved paths) or in ways the API server checks on create only (the interval order,
see :class:`RebalanceSpec`); those raise :class:`SpecError` with a message for the user.
"""

from __future__ import annotations

import math
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    model_validator,
)
from rebalanser.config import Algorithm, GroupConfig
from rebalanser.errors import InvalidInputError
from rebalanser.paths import is_valid_resource_name, validate_group_path
from rebalanser.tls import CA_FILE, CERTIFICATE_FILE, KEY_FILE

GROUP = "rebalanser.io"
VERSION = "v1alpha1"
KIND = "ResourceGroup"
PLURAL = "resourcegroups"
FINALIZER = "rebalanser.io/finalizer"
SINGULAR = "resourcegroup"
SHORT_NAMES = ("rg",)
API_VERSION = f"{GROUP}/{VERSION}"
CRD_NAME = f"{PLURAL}.{GROUP}"

#: The worker library's resource-name rule (``^[A-Za-z0-9_.:@+=-]{1,200}$``, not ``.``/``..``)
#: written without look-arounds, so RE2 (the API server) and pydantic enforce exactly the same set.
_NAME_CHAR = r"A-Za-z0-9_.:@+=-"
_NON_DOT = r"A-Za-z0-9_:@+=-"
_SEGMENT = rf"(?:\.{{1,2}}[{_NON_DOT}]|[{_NON_DOT}]|\.{{3}})[{_NAME_CHAR}]*"
RESOURCE_NAME_PATTERN = rf"^{_SEGMENT}$"
GROUP_PATH_PATTERN = rf"^(?:/{_SEGMENT})+$"
#: A prefix of a generated name: any name characters (the generated names are checked after expansion).
PREFIX_PATTERN = rf"^[{_NAME_CHAR}]*$"
RESOURCE_NAME_MAX = 200
GROUP_PATH_MAX = 1000

#: Explicit names: the spec must fit the API server's limits with room to spare. kubectl's client-side
#: apply keeps a copy of the object in an annotation, and all annotations together are limited to
#: 256 KiB; so up to FULL_LENGTH_NAMES_MAX names may use the full name length, and a longer list (up to
#: MAX_EXPLICIT_RESOURCES) only names of at most LONG_LIST_NAME_MAX characters. Either way the largest
#: spec stays under SPEC_BYTES_BUDGET (the tests build it). Bigger sets belong in resourceSets.
MAX_EXPLICIT_RESOURCES = 4000
FULL_LENGTH_NAMES_MAX = 900
LONG_LIST_NAME_MAX = 40
SPEC_BYTES_BUDGET = 240 * 1024
#: Longest connect string (five hosts with 200-character names and a chroot fit).
CONNECT_MAX = 1024
#: A label key: an optional DNS-subdomain prefix (253), "/", a name (63).
LABEL_KEY_MAX = 317
RESOURCES_SIZE_MESSAGE = (
    f"spec.resources: a list of more than {FULL_LENGTH_NAMES_MAX} names may only hold names of at most "
    f"{LONG_LIST_NAME_MAX} characters (at most {MAX_EXPLICIT_RESOURCES} names), so the object fits the API "
    f"server's size limits; generate large sets with spec.resourceSets"
)
MAX_RESOURCE_SETS = 64
MAX_SET_COUNT = 100_000
#: Upper bound of the expanded resource set (explicit names plus every resource set).
MAX_TOTAL_RESOURCES = 100_000
MAX_INTERVAL_SECONDS = 3600
#: DNS-1123 subdomain (a Secret's or a workload's name).
K8S_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
#: A key of a Secret's data.
SECRET_KEY_PATTERN = r"^[-._a-zA-Z0-9]+$"
SECRET_KEY_MAX = 253
#: podSelector.matchExpressions: how many requirements, and values per requirement (the largest spec
#: stays within SPEC_BYTES_BUDGET).
MAX_SELECTOR_EXPRESSIONS = 8
MAX_SELECTOR_VALUES = 16
#: The longest ResourceGroup name without spec.zookeeper.path: the name is the last segment of the
#: default group path, and a segment is at most RESOURCE_NAME_MAX characters.
DEFAULT_PATH_NAME_MAX = RESOURCE_NAME_MAX
NAME_LENGTH_MESSAGE = (
    f"a ResourceGroup without spec.zookeeper.path has a name of at most {DEFAULT_PATH_NAME_MAX} characters "
    "(the name is the last segment of its default znode path); choose a shorter name or set spec.zookeeper.path"
)
#: CEL rules on the whole object (``openAPIV3Schema`` root; ``self.metadata`` holds only name and
#: generateName there). The name rule is checked when an object is created, never on an update
#: (``optionalOldSelf``: ``oldSelf`` is empty only on create), so an object stored before it existed can
#: still be changed, have its finalizer removed and be deleted.
OBJECT_VALIDATIONS: tuple[dict[str, Any], ...] = (
    {
        "rule": f"oldSelf.hasValue() || has(self.spec.zookeeper.path) "
        f"|| size(self.metadata.name) <= {DEFAULT_PATH_NAME_MAX}",
        "optionalOldSelf": True,
        "message": NAME_LENGTH_MESSAGE,
    },
)
#: metav1.Condition reason: CamelCase.
REASON_PATTERN = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"

ResourceName = Annotated[
    str,
    StringConstraints(min_length=1, max_length=RESOURCE_NAME_MAX, pattern=RESOURCE_NAME_PATTERN),
]
K8sName = Annotated[str, StringConstraints(min_length=1, max_length=253, pattern=K8S_NAME_PATTERN)]
SecretKey = Annotated[str, StringConstraints(min_length=1, max_length=SECRET_KEY_MAX, pattern=SECRET_KEY_PATTERN)]


def whole_seconds(value: Any) -> Any:
    """A stored fraction of a second (these fields were numbers before they were integers) is read
    rounded up: a longer timeout, interval or grace, never a shorter one. :func:`spec_notices` names
    every value read this way, for the ResourceGroup's owner to write the whole number."""
    if isinstance(value, float) and math.isfinite(value) and not value.is_integer():
        return math.ceil(value)
    return value


#: What the whole-seconds fields say about a fraction stored before they were integers.
FRACTION_NOTE = "A fraction stored by an earlier CRD is read rounded up (see the SpecCurrent condition)."
#: Whole seconds (``type: integer``); a stored fraction is read rounded up (:func:`whole_seconds`).
Seconds = Annotated[int, BeforeValidator(whole_seconds)]


class SpecError(ValueError):
    """A spec that can never be reconciled; the message is meant for the ResourceGroup's owner."""


def default_group_path(namespace: str, name: str) -> str:
    return f"/rebalanser/{namespace}/{name}"


class _Model(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True)


class TlsSecretRef(_Model):
    """A Secret with TLS material, and the keys that hold each file."""

    name: K8sName = Field(description="The Secret's name (same namespace).")
    ca_key: SecretKey = Field(
        default=CA_FILE, alias="caKey",
        description="Key of the CA certificate that verifies the servers (PEM); when the Secret lacks "
        "it, the system's trust store is used.",
    )
    certificate_key: SecretKey = Field(
        default=CERTIFICATE_FILE, alias="certificateKey",
        description="Key of the client certificate for mutual TLS (PEM); with privateKeyKey, both or neither present.",
    )
    private_key_key: SecretKey = Field(
        default=KEY_FILE, alias="privateKeyKey",
        description="Key of the client certificate's private key (PEM).",
    )


class ZooKeeperTls(_Model):
    """TLS to ZooKeeper, with the certificates of a Secret (secret or secretRef, one of them)."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {"rule": "has(self.secret) || has(self.secretRef)",
                 "message": "zookeeper.tls needs secret or secretRef"},
                {"rule": "!has(self.secretRef) || !has(self.secret)",
                 "message": "zookeeper.tls: set secret or secretRef, not both"},
            ]
        }
    )

    secret_name: K8sName | None = Field(
        default=None, alias="secret",
        description="Deprecated: write secretRef {name: ...} (still read, with the same meaning). "
        "Secret (same namespace) with PEM files under the keys ca.crt, tls.crt and tls.key.",
    )
    secret_ref: TlsSecretRef | None = Field(
        default=None, alias="secretRef",
        description="Secret (same namespace) with the TLS material under the keys it names (default: ca.crt, "
        "the CA that verifies the servers, the system's trust store without it; tls.crt and tls.key, a client "
        "certificate and its key for mutual TLS, both or neither: the keys of a kubernetes.io/tls Secret). "
        "Workers mount the same Secret, each key at its default file name; a change to it reaches the "
        "operator's connection without a restart.",
    )
    verify_hostname: bool = Field(
        default=False, alias="verifyHostname",
        description="Also require the servers' certificates to name the hosts of the connect string "
        "(otherwise any certificate the CA signed is accepted).",
    )

    @model_validator(mode="after")
    def _one_secret(self) -> ZooKeeperTls:
        if (self.secret_name is None) == (self.secret_ref is None):
            raise ValueError("zookeeper.tls: set exactly one of secret and secretRef")
        return self

    @property
    def secret_keys(self) -> TlsSecretRef:
        """The Secret and its key names, whichever field names it."""
        if self.secret_ref is not None:
            return self.secret_ref
        return TlsSecretRef.model_validate({"name": self.secret_name})

    @property
    def secret(self) -> str:
        """The Secret's name."""
        return self.secret_keys.name

    @property
    def keys(self) -> tuple[str, str, str]:
        """The Secret's keys of the CA, the client certificate and its private key."""
        ref = self.secret_keys
        return ref.ca_key, ref.certificate_key, ref.private_key_key


class CredentialsSecretRef(_Model):
    """A Secret with digest credentials, and the keys that hold them."""

    name: K8sName = Field(description="The Secret's name (same namespace).")
    username_key: SecretKey = Field(default="username", alias="usernameKey", description="Key of the user name.")
    password_key: SecretKey = Field(default="password", alias="passwordKey", description="Key of the password.")


class ZooKeeperSpec(_Model):
    """Where the group lives."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "has(self.path) == has(oldSelf.path)",
                    "message": "zookeeper.path is immutable: it cannot be added or removed after creation",
                },
                {
                    "rule": "!has(self.credentialsSecretRef) || !has(self.credentialsSecret)",
                    "message": "zookeeper: set credentialsSecret or credentialsSecretRef, not both",
                },
            ]
        }
    )

    connect: str = Field(
        min_length=1,
        max_length=CONNECT_MAX,
        pattern=r"^\S+$",
        description="ZooKeeper connect string: host:port[,host:port...][/chroot].",
    )
    path: str | None = Field(
        default=None,
        min_length=2,
        max_length=GROUP_PATH_MAX,
        pattern=GROUP_PATH_PATTERN,
        description="Group znode path (default /rebalanser/<namespace>/<name>). Immutable.",
        json_schema_extra={
            "x-kubernetes-validations": [
                {"rule": "self == oldSelf", "message": "zookeeper.path is immutable"},
                {
                    "rule": "self != '/zookeeper' && !self.startsWith('/zookeeper/')",
                    "message": "zookeeper.path must not be under /zookeeper (reserved by ZooKeeper)",
                },
            ]
        },
    )
    session_timeout_seconds: Seconds = Field(
        default=10,
        alias="sessionTimeoutSeconds",
        ge=1,
        le=600,
        description="Session timeout of the operator's own ZooKeeper connection for this connect string, "
        f"in whole seconds. {FRACTION_NOTE}",
    )
    credentials_secret_name: K8sName | None = Field(
        default=None,
        alias="credentialsSecret",
        description="Deprecated: write credentialsSecretRef {name: ...} (still read, with the same meaning). "
        "Secret (same namespace) with keys username and password.",
    )
    credentials_secret_ref: CredentialsSecretRef | None = Field(
        default=None,
        alias="credentialsSecretRef",
        description="Secret (same namespace) with digest credentials under the keys it names (default: "
        "username, password): group znodes get digest ACLs so only holders of these credentials can write "
        "(everyone can read). A change to the Secret is applied without a restart (the group's znodes get "
        "the new credentials' ACL).",
    )
    tls: ZooKeeperTls | None = Field(
        default=None,
        description="Connect over TLS (the connect string names the servers' secureClientPort), with the "
        "certificates of a Secret.",
    )

    @model_validator(mode="after")
    def _one_credentials_secret(self) -> ZooKeeperSpec:
        if self.credentials_secret_name is not None and self.credentials_secret_ref is not None:
            raise ValueError("zookeeper: set credentialsSecret or credentialsSecretRef, not both")
        return self

    @property
    def credentials(self) -> CredentialsSecretRef | None:
        """The credentials Secret and its key names, whichever field names it (None: no credentials)."""
        if self.credentials_secret_ref is not None:
            return self.credentials_secret_ref
        if self.credentials_secret_name is not None:
            return CredentialsSecretRef.model_validate({"name": self.credentials_secret_name})
        return None

    @property
    def credentials_secret(self) -> str | None:
        """The credentials Secret's name, if any."""
        credentials = self.credentials
        return credentials.name if credentials is not None else None


class ResourceSet(_Model):
    """Generated resource names: prefix followed by 0, 1, … count-1."""

    prefix: str = Field(
        max_length=RESOURCE_NAME_MAX - 6, pattern=PREFIX_PATTERN,
        description="Start of every generated name (may be empty: plain numbers).",
    )
    count: int = Field(ge=0, le=MAX_SET_COUNT, description="How many names: prefix0 … prefix<count-1>.")

    def names(self) -> list[str]:
        return [f"{self.prefix}{i}" for i in range(self.count)]


class RebalanceSpec(_Model):
    """How often the coordinator may rebalance, and how the operator tunes it."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                # Checked on create only (updates: the operator's parse): on an object stored while these
                # fields were numbers, a fraction makes the rule fail to evaluate ("expected int, got
                # float64"), which validation ratcheting does not excuse, and every update (a finalizer's
                # removal included) would be refused. Create-only rules never evaluate on updates.
                {
                    "rule": "oldSelf.hasValue() || !has(self.minIntervalSeconds) || !has(self.maxIntervalSeconds) "
                    "|| self.minIntervalSeconds <= self.maxIntervalSeconds",
                    "optionalOldSelf": True,
                    "message": "rebalance.minIntervalSeconds must not exceed rebalance.maxIntervalSeconds",
                }
            ]
        }
    )

    min_interval_seconds: Seconds = Field(
        default=2, alias="minIntervalSeconds", ge=0, le=MAX_INTERVAL_SECONDS,
        description=f"Shortest time between two rebalances, in whole seconds. {FRACTION_NOTE}",
    )
    max_interval_seconds: Seconds = Field(
        default=30, alias="maxIntervalSeconds", ge=0, le=MAX_INTERVAL_SECONDS,
        description=f"Longest effective interval the adaptive policy may choose, in whole seconds. {FRACTION_NOTE}",
    )
    adaptive: bool = Field(
        default=True, description="Raise the effective interval under churn and rollouts; false pins it to the minimum."
    )
    departure_grace_seconds: Seconds = Field(
        default=0, alias="departureGraceSeconds", ge=0, le=MAX_INTERVAL_SECONDS,
        description=f"Wait this long before moving a departed stable member's resources, in whole seconds. "
        f"{FRACTION_NOTE}",
    )

    @model_validator(mode="after")
    def _ordered(self) -> RebalanceSpec:
        if self.min_interval_seconds > self.max_interval_seconds:
            raise ValueError("rebalance.minIntervalSeconds must not exceed rebalance.maxIntervalSeconds")
        return self


class WorkloadKind(StrEnum):
    DEPLOYMENT = "Deployment"
    STATEFUL_SET = "StatefulSet"


class WorkloadApiVersion(StrEnum):
    APPS_V1 = "apps/v1"


class Workload(_Model):
    """The workers' workload by kind and name (``spec.workload``; ``spec.workloadRef`` adds apiVersion)."""

    kind: WorkloadKind = Field(description="Deployment or StatefulSet.")
    name: K8sName = Field(description="Its name, in the ResourceGroup's namespace.")


class WorkloadRef(_Model):
    """The workers' workload: while it rolls out, the operator lengthens the rebalance interval."""

    api_version: WorkloadApiVersion = Field(alias="apiVersion", description="apps/v1.")
    kind: WorkloadKind = Field(description="Deployment or StatefulSet.")
    name: K8sName = Field(description="Its name, in the ResourceGroup's namespace.")


class FailoverMode(StrEnum):
    """How a crashed member's resources are freed (docs/protocol.md, "Confirmed-death failover")."""

    SESSION_EXPIRY = "SessionExpiry"  # when ZooKeeper expires the member's session (T after the crash)
    KUBELET_CONFIRMED = "KubeletConfirmed"  # as soon as the kubelet reports the container instance ended


LabelValue = Annotated[str, StringConstraints(max_length=63)]
LabelKey = Annotated[str, StringConstraints(min_length=1, max_length=LABEL_KEY_MAX)]


SELECTOR_VALUES_MESSAGE = "podSelector.matchExpressions: In and NotIn need values, Exists and DoesNotExist take none"


class SelectorOperator(StrEnum):
    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"


class SelectorRequirement(_Model):
    """One requirement of a label selector: a key, an operator and values."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {"rule": "(self.operator in ['In', 'NotIn']) == (size(self.values) > 0)",
                 "message": SELECTOR_VALUES_MESSAGE},
            ]
        }
    )

    key: LabelKey = Field(description="The label key.")
    operator: SelectorOperator = Field(description="In, NotIn, Exists or DoesNotExist.")
    values: list[LabelValue] = Field(
        default_factory=list, max_length=MAX_SELECTOR_VALUES,
        description="For In and NotIn: the values (at least one); empty for Exists and DoesNotExist.",
        json_schema_extra={"x-kubernetes-list-type": "atomic", "default": []},
    )

    @model_validator(mode="after")
    def _values_fit_operator(self) -> SelectorRequirement:
        if (self.operator in (SelectorOperator.IN, SelectorOperator.NOT_IN)) != bool(self.values):
            raise ValueError(SELECTOR_VALUES_MESSAGE)
        return self

    def matches(self, labels: dict[str, str]) -> bool:
        present = self.key in labels
        if self.operator is SelectorOperator.EXISTS:
            return present
        if self.operator is SelectorOperator.DOES_NOT_EXIST:
            return not present
        inside = present and labels[self.key] in self.values
        return inside if self.operator is SelectorOperator.IN else not inside


class PodSelector(_Model):
    """The group's worker pods: a label selector (matchLabels and matchExpressions, all must match;
    an empty selector selects every pod)."""

    match_labels: dict[str, LabelValue] = Field(
        default_factory=dict, alias="matchLabels", max_length=64,
        description="Labels every worker pod of the group carries (all must match).",
        json_schema_extra={"x-kubernetes-validations": [
            {"rule": f"self.all(k, size(k) <= {LABEL_KEY_MAX})",
             "message": f"podSelector.matchLabels: label keys are at most {LABEL_KEY_MAX} characters"},
        ]},
    )
    match_expressions: list[SelectorRequirement] = Field(
        default_factory=list, alias="matchExpressions", max_length=MAX_SELECTOR_EXPRESSIONS,
        description="Requirements on the pods' labels (all must match).",
        json_schema_extra={"x-kubernetes-list-type": "atomic"},
    )

    @model_validator(mode="after")
    def _bounded_keys(self) -> PodSelector:
        if any(len(key) > LABEL_KEY_MAX for key in self.match_labels):
            raise ValueError(f"podSelector.matchLabels: label keys are at most {LABEL_KEY_MAX} characters")
        return self

    def selects(self, labels: Any) -> bool:
        have = {str(key): str(value) for key, value in dict(labels or {}).items()}
        return all(have.get(key) == value for key, value in self.match_labels.items()) and all(
            requirement.matches(have) for requirement in self.match_expressions
        )


class ResourceGroupSpec(_Model):
    """Desired state of a ResourceGroup."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {"rule": "!has(self.workloadRef) || !has(self.workload)",
                 "message": "set workload or workloadRef, not both"},
            ]
        }
    )

    zookeeper: ZooKeeperSpec
    resources: list[ResourceName] = Field(
        default_factory=list,
        max_length=MAX_EXPLICIT_RESOURCES,
        description=(
            f"Explicit resource names (a set): up to {FULL_LENGTH_NAMES_MAX} names of up to {RESOURCE_NAME_MAX} "
            f"characters, or up to {MAX_EXPLICIT_RESOURCES} names of up to {LONG_LIST_NAME_MAX} characters. "
            "Larger sets: resourceSets."
        ),
        json_schema_extra={
            "x-kubernetes-list-type": "set",
            "default": [],
            "x-kubernetes-validations": [
                {
                    "rule": f"size(self) <= {FULL_LENGTH_NAMES_MAX} || self.all(x, size(x) <= {LONG_LIST_NAME_MAX})",
                    "message": RESOURCES_SIZE_MESSAGE,
                }
            ],
        },
    )
    resource_sets: list[ResourceSet] = Field(
        default_factory=list,
        alias="resourceSets",
        max_length=MAX_RESOURCE_SETS,
        description="Generated resource names: prefix0 … prefix<count-1>.",
        json_schema_extra={"x-kubernetes-list-type": "atomic", "default": []},
    )
    algorithm: Algorithm = Field(
        default=Algorithm.RESOURCE_BARRIER, description="Rebalancing algorithm of the workers."
    )
    rebalance: RebalanceSpec = Field(
        default=RebalanceSpec.model_validate({}), json_schema_extra={"default": {}}
    )
    workload_by_kind: Workload | None = Field(
        default=None, alias="workload",
        description="Deprecated: write workloadRef {apiVersion: apps/v1, kind: ..., name: ...} (still read, "
        "with the same meaning).",
    )
    workload_ref: WorkloadRef | None = Field(
        default=None, alias="workloadRef",
        description="Optional: the workers' Deployment or StatefulSet, as apiVersion, kind and name; while "
        "it rolls out, the operator lengthens the rebalance interval.",
    )
    failover: FailoverMode = Field(
        default=FailoverMode.SESSION_EXPIRY,
        description="SessionExpiry: a crashed member's resources move when its ZooKeeper session expires. "
        "KubeletConfirmed: as soon as the kubelet reports the member's container instance terminated "
        "(workers started with --termination-log); anything less certain falls back to session expiry.",
    )
    pod_selector: PodSelector | None = Field(
        default=None, alias="podSelector",
        description="Optional: the worker pods whose container terminations KubeletConfirmed failover "
        "acts on (default: every pod of the namespace; the member's recorded pod name and instance "
        "nonce must match in any case).",
    )

    @model_validator(mode="after")
    def _one_workload(self) -> ResourceGroupSpec:
        if self.workload_by_kind is not None and self.workload_ref is not None:
            raise ValueError("set workload or workloadRef, not both")
        return self

    @property
    def workload(self) -> WorkloadRef | None:
        """The workers' workload, whichever field names it."""
        if self.workload_ref is not None or self.workload_by_kind is None:
            return self.workload_ref
        return WorkloadRef.model_validate({**self.workload_by_kind.model_dump(by_alias=True),
                                           "apiVersion": WorkloadApiVersion.APPS_V1})

    @staticmethod
    def parse(spec: Any) -> ResourceGroupSpec:
        """Parses a raw spec; raises :class:`SpecError` with a readable message when it is invalid."""
        try:
            parsed = ResourceGroupSpec.model_validate(dict(spec or {}))
        except ValidationError as exc:
            raise SpecError(_describe(exc)) from exc
        if len(parsed.resources) > FULL_LENGTH_NAMES_MAX and any(
            len(name) > LONG_LIST_NAME_MAX for name in parsed.resources
        ):
            raise SpecError(RESOURCES_SIZE_MESSAGE)
        parsed.desired_resources()  # bounds and names of the expansion
        if parsed.zookeeper.path is not None:
            try:
                validate_group_path(parsed.zookeeper.path)
            except InvalidInputError as exc:
                raise SpecError(str(exc)) from exc
        return parsed

    def group_path(self, namespace: str, name: str, default: str | None = None) -> str:
        """``spec.zookeeper.path``, else ``default`` (the operator's first path root), else
        ``/rebalanser/<namespace>/<name>``."""
        path = self.zookeeper.path or default or default_group_path(namespace, name)
        try:
            return validate_group_path(path)
        except InvalidInputError as exc:
            raise SpecError(str(exc)) from exc

    def desired_resources(self) -> frozenset[str]:
        """Explicit names plus every resource set, validated against the library's name rule."""
        total = len(self.resources) + sum(s.count for s in self.resource_sets)
        if total > MAX_TOTAL_RESOURCES:
            raise SpecError(
                f"the spec names {total} resources (explicit plus resourceSets); "
                f"at most {MAX_TOTAL_RESOURCES} are supported"
            )
        names = set(self.resources)
        for resource_set in self.resource_sets:
            generated = resource_set.names()
            for candidate in (generated[:1] + generated[-1:]) if generated else []:
                if not is_valid_resource_name(candidate) or len(candidate) > RESOURCE_NAME_MAX:
                    raise SpecError(f"resourceSets prefix {resource_set.prefix!r} generates invalid name {candidate!r}")
            names.update(generated)
        bad = sorted(n for n in self.resources if not is_valid_resource_name(n))
        if bad:
            raise SpecError(f"invalid resource names: {bad[:5]}")
        return frozenset(names)

    def group_config(self, effective_interval: float) -> GroupConfig:
        """The ``G/config`` the workers read."""
        return GroupConfig.from_json(
            {
                "algorithm": self.algorithm,
                "minIntervalSeconds": self.rebalance.min_interval_seconds,
                "maxIntervalSeconds": self.rebalance.max_interval_seconds,
                "effectiveIntervalSeconds": effective_interval,
                "departureGraceSeconds": self.rebalance.departure_grace_seconds,
            }
        )


def _describe(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors()[:5]:
        where = ".".join(str(p) for p in error["loc"]) or "spec"
        parts.append(f"spec.{where}: {error['msg']}")
    more = exc.error_count() - len(parts)
    return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")


# ---------------------------------------------------------------------------------------------- status


class Phase(StrEnum):
    PENDING = "Pending"
    REBALANCING = "Rebalancing"
    STABLE = "Stable"
    DEGRADED = "Degraded"
    ERROR = "Error"


class ConditionType(StrEnum):
    READY = "Ready"
    ZOOKEEPER_CONNECTED = "ZooKeeperConnected"
    RESOURCES_SYNCED = "ResourcesSynced"
    BALANCED = "Balanced"
    SPEC_CURRENT = "SpecCurrent"  # once a spec is adopted: False while it uses an older form (spec.notices)
    FAILOVER_READY = "FailoverReady"  # with spec.failover KubeletConfirmed: whether a crash can be confirmed


ConditionStatus = Literal["True", "False", "Unknown"]


class Condition(_Model):
    """A metav1.Condition."""

    type: str = Field(
        max_length=316,
        description="Ready, ZooKeeperConnected, ResourcesSynced, Balanced; SpecCurrent once a spec is adopted; "
        "FailoverReady with spec.failover KubeletConfirmed.",
    )
    status: ConditionStatus = Field(description="True, False or Unknown.")
    reason: str = Field(
        min_length=1, max_length=1024, pattern=REASON_PATTERN, description="Why, in one CamelCase word."
    )
    message: str = Field(default="", max_length=32768, description="Why, for people.")
    last_transition_time: str = Field(
        alias="lastTransitionTime", json_schema_extra={"format": "date-time"},
        description="When status last changed (kept while it stays the same).",
    )
    observed_generation: int = Field(
        default=0, alias="observedGeneration", ge=0, description="metadata.generation this condition is about."
    )


class LastRebalance(_Model):
    """The coordinator's summary of the last completed rebalance (from the group's state znode)."""

    started_at: str | None = Field(
        default=None, alias="startedAt", json_schema_extra={"format": "date-time"},
        description="When the rebalance began (RFC 3339).",
    )
    completed_at: str | None = Field(
        default=None, alias="completedAt", json_schema_extra={"format": "date-time"},
        description="When every resource was assigned under it (RFC 3339).",
    )
    duration_ms: float | None = Field(
        default=None, alias="durationMs", ge=0, description="completedAt - startedAt, in milliseconds."
    )
    moved: int | None = Field(default=None, ge=0, description="Resources that changed owner.")
    generation: int | None = Field(default=None, ge=0, description="Generation of the assignment it produced.")


class ServedBy(_Model):
    """Which operator replica serves the group, with the fencing token of its claim (docs/operator-replicas.md)."""

    replica: str = Field(max_length=253, description="The operator replica (its member id: its pod's name).")
    token: int = Field(
        ge=0, description="The fencing token of the replica's claim on the group: it grows with every new owner, "
        "and a status write carrying a smaller one is refused by the chart's admission policy.",
    )
    release: str | None = Field(
        default=None, max_length=317,
        description="The operator release (NAMESPACE/NAME) whose claim the group is under: another release serving "
        "the same namespace leaves the group alone while this one is live.",
    )
    claim: int | None = Field(
        default=None, ge=0,
        description="The number of the release's claim: it grows each time the group passes to another release, and "
        "a status write carrying an older one is refused by the chart's admission policy.",
    )


class RefusedRelease(_Model):
    """Why an operator release does not serve the group (docs/operator-replicas.md, "Two releases")."""

    reason: str = Field(max_length=128, description="ServedByAnotherRelease.")
    served_by: str = Field(alias="servedBy", max_length=317, description="The release that serves the group.")
    message: str = Field(max_length=4096, description="Why, for people.")
    since: str | None = Field(default=None, description="When the release first said so.",
                              json_schema_extra={"format": "date-time"})


class ResourceGroupStatus(_Model):
    """Observed state of a ResourceGroup, mirrored live from ZooKeeper by the operator."""

    observed_generation: int | None = Field(
        default=None, alias="observedGeneration", ge=0, description="metadata.generation last reconciled."
    )
    phase: Phase | None = Field(default=None, description="Pending, Rebalancing, Stable, Degraded or Error.")
    message: str | None = Field(default=None, max_length=32768, description="The Ready condition's message.")
    zookeeper_path: str | None = Field(default=None, alias="zookeeperPath", description="The group's znode path.")
    zookeeper_connect: str | None = Field(
        default=None, alias="zookeeperConnect", max_length=4096,
        description="The ZooKeeper connect string the group lives on (a change to one without the group is refused).",
    )
    coordinator: str | None = Field(default=None, description="Member id of the current coordinator.")
    epoch: int | None = Field(default=None, ge=0, description="Coordinator epoch (a new coordinator raises it).")
    generation: int | None = Field(default=None, ge=0, description="Generation of the current assignment.")
    members: int | None = Field(default=None, ge=0, description="Live members.")
    resources: int | None = Field(default=None, ge=0, description="Resources in ZooKeeper.")
    assigned: int | None = Field(default=None, ge=0, description="Resources assigned to a live member.")
    assignments: dict[str, list[str]] | None = Field(
        default=None, description="Member id -> sorted resources (size-capped; see assignmentsTruncated)."
    )
    assignments_truncated: bool | None = Field(
        default=None, alias="assignmentsTruncated",
        description="Some assignment lists were cut; `rebalanser status --resource` answers in full.",
    )
    pods: dict[str, str] | None = Field(
        default=None,
        description="Member id -> the pod it runs in, as the member recorded it (workers with POD_NAME set).",
    )
    unassigned: list[str] | None = Field(default=None, description="Resources nobody owns (size-capped).")
    unassigned_truncated: bool | None = Field(
        default=None, alias="unassignedTruncated", description="The unassigned list was cut."
    )
    effective_interval_seconds: float | None = Field(
        default=None, alias="effectiveIntervalSeconds", ge=0,
        description="The rebalance interval the operator chose within [min, max].",
    )
    last_rebalance: LastRebalance | None = Field(
        default=None, alias="lastRebalance", description="The last completed rebalance."
    )
    conditions: list[Condition] | None = Field(
        default=None, description="Ready, ZooKeeperConnected, ResourcesSynced, Balanced.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    served_by: ServedBy | None = Field(
        default=None, alias="servedBy",
        description="With several operator replicas: the one serving the group, and its claim's fencing token.",
    )
    refused_releases: dict[str, RefusedRelease] | None = Field(
        default=None, alias="refusedReleases",
        description="Operator releases (NAMESPACE/NAME) that serve this namespace too and leave the group to the one "
        "in servedBy, each with its reason.",
    )


class ResourceGroup(_Model):
    """The whole object (only the parts the CRD schema describes)."""

    spec: ResourceGroupSpec
    status: ResourceGroupStatus | None = None


#: Printer columns of ``kubectl get resourcegroups``.
PRINTER_COLUMNS: tuple[dict[str, Any], ...] = (
    {"name": "Algorithm", "type": "string", "jsonPath": ".spec.algorithm"},
    {"name": "Resources", "type": "integer", "jsonPath": ".status.resources"},
    {"name": "Members", "type": "integer", "jsonPath": ".status.members"},
    {"name": "Assigned", "type": "integer", "jsonPath": ".status.assigned"},
    {"name": "Coordinator", "type": "string", "jsonPath": ".status.coordinator"},
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status',
     "description": "The Ready condition's status"},
    {"name": "Interval", "type": "number", "jsonPath": ".status.effectiveIntervalSeconds", "priority": 1},
    {"name": "Served-By", "type": "string", "jsonPath": ".status.servedBy.replica", "priority": 1,
     "description": "The operator replica serving the group"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
)
