"""``rebalanser-operator``: runs the kopf operator for ResourceGroups.

    rebalanser-operator [--namespace NS]... | --all-namespaces
                        [--metrics-port N] [--liveness URL] [--peering NAME | --standalone]
                        [--log-format json|plain|full] [--verbose | --debug]
                        [--path-root TEMPLATE]... [--allowed-ensemble HOSTS]... [--cluster-id ID]
                        [--max-groups-per-namespace N] [--max-resources-per-group N]
                        [--zk-identity-user NAME --zk-identity-password-file FILE | --zk-identity-tls-dir DIR]
                        [--replica-zk HOSTS [--replica-group PATH] [--replica-id ID] [--replica-session-timeout S]
                         [--replica-pod-selector SELECTOR] [--replica-termination-log FILE]
                         [--replica-readiness URL]]
                        [--release NAMESPACE/NAME [--release-lease-seconds S]]

Each tenancy setting may also come from the environment (used when the flag is not given):
REBALANSER_PATH_ROOT (templates separated by ',' or ';'), REBALANSER_ALLOWED_ENSEMBLES (servers or
connect strings separated by ',' ';' or white space, '*' for any), REBALANSER_CLUSTER_ID,
REBALANSER_MAX_GROUPS_PER_NAMESPACE, REBALANSER_MAX_RESOURCES_PER_GROUP. The operator's own ZooKeeper
identity (:mod:`rebalanser_operator.identity`) likewise: REBALANSER_ZK_IDENTITY_USER and
REBALANSER_ZK_IDENTITY_PASSWORD_FILE (the chart mounts them from ``zookeeperIdentity.secretName``), or
the x509 identity of a TLS client certificate, REBALANSER_ZK_IDENTITY_TLS_DIR (a directory holding
``ca.crt``, ``tls.crt`` and ``tls.key``: the chart mounts ``zookeeperIdentity.tls.secretName``). See
:mod:`rebalanser_operator.tenancy` and docs/operator.md ("Security model").

Kubernetes credentials come from the in-cluster service account or ``$KUBECONFIG``. Standalone (no
kopf peering) is the default. The Helm chart runs one replica with the Recreate strategy, or, with
``--replica-zk`` (its ``replicaGroup.zookeeper``), several that share the ResourceGroups through a
Rebalanser group of their own, rolled out one at a time (:mod:`rebalanser_operator.replicas`,
docs/operator-replicas.md). With ``--release`` (REBALANSER_RELEASE; the chart sets it) each ResourceGroup
is claimed by one release, and another release serving the same namespace leaves it alone while the
first is live (:mod:`rebalanser_operator.releaseclaim`).
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
import threading
from collections.abc import Mapping
from dataclasses import replace

import kopf
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from rebalanser import __version__
from rebalanser.tls import CA_FILE, CERTIFICATE_FILE, KEY_FILE

from rebalanser_operator.apply.secretpoll import DEFAULT_INTERVAL as DEFAULT_SECRET_POLL
from rebalanser_operator.clusterid import ClusterIdUnavailable, resolve_cluster_id
from rebalanser_operator.handlers import build_registry, handled_here, operator_settings
from rebalanser_operator.identity import OperatorIdentity
from rebalanser_operator.kube import KubernetesGateway
from rebalanser_operator.metrics import Metrics
from rebalanser_operator.readiness import address as readiness_address
from rebalanser_operator.releaseclaim import (
    DEFAULT_LEASE_SECONDS,
    Release,
    ReleaseApi,
    ReleaseClaims,
    ReleaseSettingError,
)
from rebalanser_operator.replicadeath import DeathWatch
from rebalanser_operator.replicas import DEFAULT_GROUP_TEMPLATE, Replicas, ReplicaSettings
from rebalanser_operator.runtime import DEFAULT_CREDENTIALS_GRACE, EXECUTOR_THREADS, LoopOptions, OperatorContext
from rebalanser_operator.tenancy import (
    DEFAULT_PATH_ROOT,
    DEFAULT_SECRET_KEY_BYTES,
    DEFAULT_TLS_STORE_BYTES,
    DEFAULT_WORKERS_PER_NAMESPACE,
    AllowedEnsembles,
    Limits,
    PathRoots,
    SettingError,
    Tenancy,
)
from rebalanser_operator.zktls import TlsMaterial

log = logging.getLogger("rebalanser_operator")

DEFAULT_METRICS_PORT = 8080
#: The operator's container in the chart's Deployment, and its termination-message file.
DEFAULT_CONTAINER = "operator"
DEFAULT_TERMINATION_LOG = "/dev/termination-log"
DEFAULT_LIVENESS = "http://0.0.0.0:8081/healthz"
LOG_FORMATS = {"json": kopf.LogFormat.JSON, "plain": kopf.LogFormat.PLAIN, "full": kopf.LogFormat.FULL}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="rebalanser-operator", description="Reconciles ResourceGroups.")
    parser.add_argument("--version", action="version", version=f"rebalanser-operator {__version__}")
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument("-n", "--namespace", action="append", dest="namespaces", metavar="NS",
                       help="serve this namespace (repeatable; globs like 'team-*' allowed)")
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="serve the whole cluster")
    parser.add_argument("--metrics-port", type=int, default=DEFAULT_METRICS_PORT,
                        help=f"Prometheus /metrics port, 0 disables (default {DEFAULT_METRICS_PORT})")
    parser.add_argument("--liveness", default=DEFAULT_LIVENESS, metavar="URL",
                        help=f"liveness endpoint, '' disables (default {DEFAULT_LIVENESS})")
    peering = parser.add_mutually_exclusive_group()
    peering.add_argument("--peering", metavar="NAME", help="use kopf peering NAME (needs the kopf.dev CRDs)")
    peering.add_argument("--standalone", action="store_true", help="no peering (the default)")
    parser.add_argument("--log-format", choices=sorted(LOG_FORMATS), default="json")
    parser.add_argument("--credentials-grace", type=float, default=DEFAULT_CREDENTIALS_GRACE, metavar="SECONDS",
                        help="after a credentials Secret changes, the group's ACLs keep the previous password "
                             f"this long before the new one alone may write (default {DEFAULT_CREDENTIALS_GRACE:g})")
    tenancy = parser.add_argument_group("tenancy (what a ResourceGroup may name)")
    tenancy.add_argument("--path-root", action="append", dest="path_roots", metavar="TEMPLATE",
                         help=f"a root for groups' znodes, {{namespace}} replaced by the group's namespace "
                              f"(repeatable; the first gives the default path; default {DEFAULT_PATH_ROOT})")
    tenancy.add_argument("--allowed-ensemble", action="append", dest="allowed_ensembles", metavar="HOSTS",
                         help="ZooKeeper servers ResourceGroups may name (a connect string; repeatable; '*' for "
                              "any). Default: none, every ResourceGroup is refused until this is set")
    tenancy.add_argument("--cluster-id", metavar="ID",
                         help="this cluster's id in the groups' owner markers (default: the UID of namespace "
                              "kube-system, else an id kept in a ConfigMap of the operator's namespace)")
    tenancy.add_argument("--max-groups-per-namespace", type=int, metavar="N",
                         help="ResourceGroups served per namespace, 0 for no limit (default 0)")
    tenancy.add_argument("--max-resources-per-group", type=int, metavar="N",
                         help="resources per ResourceGroup, 0 for the CRD's own limit (default 0)")
    tenancy.add_argument("--max-sessions-per-namespace", type=int, metavar="N",
                         help="ZooKeeper sessions the operator opens for one namespace's groups, 0 for no limit "
                              "(default 0)")
    tenancy.add_argument("--workers-per-namespace", type=int, metavar="N",
                         help="of the operator's worker threads, how many one namespace's groups may hold at once "
                              f"(default 0: {DEFAULT_WORKERS_PER_NAMESPACE})")
    tenancy.add_argument("--max-secret-key-bytes", type=int, metavar="BYTES",
                         help="the largest value of a referenced Secret's key (a TLS file, a username, a password) "
                              f"(default 0: {DEFAULT_SECRET_KEY_BYTES})")
    tenancy.add_argument("--max-tls-store-bytes", type=int, metavar="BYTES",
                         help="the TLS files written for the open sessions, in all "
                              f"(default 0: {DEFAULT_TLS_STORE_BYTES})")
    identity = parser.add_argument_group("the operator's own ZooKeeper identity (docs/operator.md, Security model)")
    identity.add_argument("--zk-identity-user", metavar="NAME",
                          help="digest user name of the operator's own identity (public: shown in the ACLs)")
    identity.add_argument("--zk-identity-password-file", metavar="FILE",
                          help="file holding its password (long and random: its hash is given to the workers). "
                               "Without an identity the parents of the groups stay open to any client")
    identity.add_argument("--zk-identity-tls-dir", metavar="DIR",
                          help="instead of a digest: a directory holding ca.crt, tls.crt and tls.key; the operator "
                               "connects over TLS with this client certificate and names itself in ACLs by its "
                               "subject (x509:<subject>, ZooKeeper's X509AuthenticationProvider)")
    replica = parser.add_argument_group("operator replicas sharing the ResourceGroups (docs/operator-replicas.md)")
    replica.add_argument("--replica-zk", metavar="HOSTS",
                         help="the ZooKeeper servers where the replicas form their own Rebalanser group "
                              "(REBALANSER_REPLICA_ZK); without it this operator serves every ResourceGroup alone")
    replica.add_argument("--replica-group", metavar="PATH",
                         help="the operator group's path (REBALANSER_REPLICA_GROUP; default "
                              f"{DEFAULT_GROUP_TEMPLATE.format(namespace='<operator namespace>')})")
    replica.add_argument("--replica-id", metavar="ID",
                         help="this replica's member id (default: $POD_NAME, else the host name)")
    replica.add_argument("--replica-session-timeout", type=float, default=10.0, metavar="SECONDS",
                         help="the replicas' ZooKeeper session timeout: the bound of a handover when a replica's "
                              "death is not reported (default 10)")
    replica.add_argument("--replica-pod-selector", metavar="SELECTOR",
                         help="a label selector of the operator's own pods in $POD_NAMESPACE "
                              "(REBALANSER_REPLICA_POD_SELECTOR): watched, so that a replica whose container the "
                              "kubelet reports ended loses its groups at once instead of at its session's expiry")
    replica.add_argument("--replica-readiness", metavar="URL", default="",
                         help="a readiness endpoint (http://HOST:PORT/PATH): 200 while this replica is a member of "
                              "the operator group in good standing, 503 otherwise (default: none)")
    replica.add_argument("--replica-termination-log", metavar="FILE",
                         help="the container's termination-message file, where the replica writes its instance "
                              "nonce (REBALANSER_TERMINATION_LOG; default /dev/termination-log when $POD_UID is set)")
    release = parser.add_argument_group("one release per ResourceGroup (docs/operator-replicas.md, Two releases)")
    release.add_argument("--release", metavar="NAMESPACE/NAME",
                         help="this operator's release (REBALANSER_RELEASE; the chart: <release namespace>/<full "
                              "name>): each ResourceGroup is claimed by one release, and another release serving the "
                              "same namespace leaves it alone while this one's heartbeat, the Lease NAME in NAMESPACE, "
                              "stands. Without it, no claim: every group of the served namespaces is served")
    release.add_argument("--release-lease-seconds", type=float, metavar="SECONDS",
                         help="how long the release's heartbeat stands without a renewal: its groups pass to another "
                              "release this long after its last replica stopped (REBALANSER_RELEASE_LEASE_SECONDS; "
                              f"default {DEFAULT_LEASE_SECONDS:g})")
    parser.add_argument("--failover-pods", action="store_true",
                        help="watch the served namespaces' pods for spec.failover: KubeletConfirmed (needs RBAC "
                             "on pods: the chart's failover.enabled); without it no pod is watched")
    parser.add_argument("--secret-poll", type=float, default=DEFAULT_SECRET_POLL, metavar="SECONDS",
                        help="re-read the Secrets ResourceGroups reference (by name; Secrets are never listed or "
                             f"watched) this often, to apply a rotation (default {DEFAULT_SECRET_POLL:g})")
    verbosity = parser.add_mutually_exclusive_group()
    verbosity.add_argument("-v", "--verbose", action="store_true")
    verbosity.add_argument("--debug", action="store_true")
    args = parser.parse_args(argv)
    if not 0 <= args.credentials_grace <= 86400:
        parser.error("--credentials-grace must lie in [0, 86400] seconds")
    if not 1 <= args.secret_poll <= 3600:
        parser.error("--secret-poll must lie in [1, 3600] seconds")
    if not args.all_namespaces and not args.namespaces:
        env_namespace = os.environ.get("POD_NAMESPACE")
        if not env_namespace:
            parser.error("give --namespace NS (repeatable) or --all-namespaces")
        args.namespaces = [env_namespace]
    if not 0 <= args.metrics_port <= 65535:
        parser.error("--metrics-port must be within 0..65535")
    if args.replica_readiness:
        try:
            readiness_address(args.replica_readiness)
        except ValueError as exc:
            parser.error(str(exc))
    try:
        args.tenancy = tenancy_settings(args, os.environ)
        args.identity = identity_setting(args, os.environ)
        args.replica = replica_setting(args, os.environ, args.tenancy)
    except SettingError as exc:
        parser.error(str(exc))
    text = args.release or os.environ.get("REBALANSER_RELEASE") or ""
    try:
        args.release = Release.parse(text) if text else None
    except ReleaseSettingError as exc:
        parser.error(f"--release: {exc}")
    if args.release_lease_seconds is None:
        raw = os.environ.get("REBALANSER_RELEASE_LEASE_SECONDS") or DEFAULT_LEASE_SECONDS
        try:
            args.release_lease_seconds = float(raw)
        except ValueError:
            parser.error(f"REBALANSER_RELEASE_LEASE_SECONDS must be a number, got {raw!r}")
    if not 2 <= args.release_lease_seconds <= 3600:
        parser.error("--release-lease-seconds must lie in [2, 3600] seconds")
    return args


def replica_setting(args: argparse.Namespace, env: Mapping[str, str], tenancy: Tenancy) -> ReplicaSettings | None:
    """Where the replicas meet, from the flags, else the environment; None without ``--replica-zk``
    (one operator serves every group). The operator group's path may not lie in a tenant's path root."""
    hosts = args.replica_zk or env.get("REBALANSER_REPLICA_ZK") or ""
    if not hosts:
        return None
    own = env.get("POD_NAMESPACE") or (args.namespaces[0] if args.namespaces else "default")
    group = args.replica_group or env.get("REBALANSER_REPLICA_GROUP") or DEFAULT_GROUP_TEMPLATE.format(namespace=own)
    member = args.replica_id or env.get("POD_NAME") or socket.gethostname()
    for template in tenancy.path_roots.templates:
        fixed = template.split("{", 1)[0].rstrip("/")
        if group == fixed or group.startswith(fixed + "/") or fixed.startswith(group + "/"):
            raise SettingError(f"the operator group {group} may not lie within or above the path root {template}: "
                               "a tenant's group could be it or hold it")
    uid = env.get("POD_UID") or None
    log_file = args.replica_termination_log or env.get("REBALANSER_TERMINATION_LOG") or (
        DEFAULT_TERMINATION_LOG if uid else None)
    try:
        return ReplicaSettings(hosts=hosts, group=group, member_id=member,
                               session_timeout=args.replica_session_timeout, pod=env.get("POD_NAME") or None,
                               pod_uid=uid, pod_namespace=env.get("POD_NAMESPACE") or None,
                               container=env.get("REBALANSER_CONTAINER") or DEFAULT_CONTAINER,
                               termination_log=log_file)
    except ValueError as exc:
        raise SettingError(f"operator replicas: {exc}") from exc


def identity_setting(args: argparse.Namespace, env: Mapping[str, str]) -> OperatorIdentity | None:
    """The operator's own identity from the flags, else the environment; None when neither names one. A
    digest (user and password file) or an x509 one (a TLS directory), never both."""
    user = args.zk_identity_user or env.get("REBALANSER_ZK_IDENTITY_USER") or ""
    path = args.zk_identity_password_file or env.get("REBALANSER_ZK_IDENTITY_PASSWORD_FILE") or ""
    directory = args.zk_identity_tls_dir or env.get("REBALANSER_ZK_IDENTITY_TLS_DIR") or ""
    if directory and (user or path):
        raise SettingError("the operator's ZooKeeper identity is either a digest (--zk-identity-user, "
                           "--zk-identity-password-file) or its TLS client certificate (--zk-identity-tls-dir), "
                           "not both")
    if directory:
        return x509_identity(directory)
    if not user and not path:
        return None
    if not user or not path:
        raise SettingError("the operator's ZooKeeper identity needs both a user (--zk-identity-user) and a password "
                           "file (--zk-identity-password-file)")
    try:
        with open(path, encoding="utf-8") as f:
            password = f.read().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingError(f"cannot read the operator's ZooKeeper password file {path}: {exc}") from exc
    try:
        return OperatorIdentity.digest(user, password)
    except ValueError as exc:
        raise SettingError(f"{exc} ({path})") from exc


def x509_identity(directory: str) -> OperatorIdentity:
    """The x509 identity of the client certificate in ``directory`` (``ca.crt``, ``tls.crt``, ``tls.key``:
    a mounted TLS Secret); :class:`SettingError` naming the file that is missing, unreadable or bad."""
    if not os.path.isdir(directory):
        raise SettingError(f"the operator's x509 identity: {directory} is not a directory (the TLS Secret of "
                           "zookeeperIdentity.tls, mounted)")
    parts: dict[str, bytes] = {}
    for name in (CA_FILE, CERTIFICATE_FILE, KEY_FILE):
        file = os.path.join(directory, name)
        try:
            with open(file, "rb") as f:
                parts[name] = f.read()
        except OSError as exc:
            raise SettingError(f"the operator's x509 identity needs {name} in {directory} (the TLS Secret of "
                               f"zookeeperIdentity.tls): {exc.strerror or exc}") from exc
        if not parts[name].strip():
            raise SettingError(f"the operator's x509 identity: {file} is empty")
    material = TlsMaterial(ca=parts[CA_FILE], certificate=parts[CERTIFICATE_FILE], key=parts[KEY_FILE])
    try:
        return OperatorIdentity.x509(material)
    except ValueError as exc:
        raise SettingError(f"the operator's x509 identity: {os.path.join(directory, CERTIFICATE_FILE)}: {exc}") from exc


def tenancy_settings(args: argparse.Namespace, env: Mapping[str, str]) -> Tenancy:
    """The tenancy settings from the flags, else the environment, else the defaults (the cluster id is
    resolved later, from the API server, when neither gives it)."""
    roots = args.path_roots or [env.get("REBALANSER_PATH_ROOT") or DEFAULT_PATH_ROOT]
    ensembles = args.allowed_ensembles or [env.get("REBALANSER_ALLOWED_ENSEMBLES", "")]
    limits = Limits(
        groups_per_namespace=_count(args.max_groups_per_namespace, env, "REBALANSER_MAX_GROUPS_PER_NAMESPACE"),
        resources_per_group=_count(args.max_resources_per_group, env, "REBALANSER_MAX_RESOURCES_PER_GROUP"),
        sessions_per_namespace=_count(args.max_sessions_per_namespace, env, "REBALANSER_MAX_SESSIONS_PER_NAMESPACE"),
        workers_per_namespace=_count(args.workers_per_namespace, env, "REBALANSER_WORKERS_PER_NAMESPACE"),
        secret_key_bytes=_count(args.max_secret_key_bytes, env, "REBALANSER_MAX_SECRET_KEY_BYTES"),
        tls_store_bytes=_count(args.max_tls_store_bytes, env, "REBALANSER_MAX_TLS_STORE_BYTES"),
    )
    return Tenancy(path_roots=PathRoots.parse(roots), ensembles=AllowedEnsembles.parse(ensembles),
                   cluster_id=args.cluster_id or env.get("REBALANSER_CLUSTER_ID", ""), limits=limits)


def _count(flag: int | None, env: Mapping[str, str], name: str) -> int:
    raw = flag if flag is not None else env.get(name) or 0
    try:
        value = int(raw)
    except ValueError:
        raise SettingError(f"{name} must be a whole number, got {raw!r}") from None
    if value < 0:
        raise SettingError(f"{name.removeprefix('REBALANSER_').lower().replace('_', '-')} must not be negative")
    return value


def load_kubernetes_config() -> k8s.ApiClient:
    """In-cluster service account first, then ``$KUBECONFIG`` / ``~/.kube/config``. The connection pool
    holds one connection per thread that calls the API (with the default of 10, every call past ten at
    once opened a TLS connection and threw it away afterwards)."""
    try:
        k8s_config.load_incluster_config()  # type: ignore[no-untyped-call]
    except k8s_config.ConfigException:
        k8s_config.load_kube_config()  # type: ignore[no-untyped-call]
    configuration = k8s.Configuration.get_default_copy()
    configuration.connection_pool_maxsize = 2 * EXECUTOR_THREADS
    return k8s.ApiClient(configuration)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    kopf.configure(debug=args.debug, verbose=args.verbose, log_format=LOG_FORMATS[args.log_format])
    logging.getLogger("kazoo.client").setLevel(logging.DEBUG if args.debug else logging.WARNING)
    try:
        api_client = load_kubernetes_config()
    except k8s_config.ConfigException as exc:
        print(f"rebalanser-operator: no Kubernetes configuration: {exc}", file=sys.stderr)
        return 2
    own = os.environ.get("POD_NAMESPACE") or None
    try:
        cluster_id = resolve_cluster_id(explicit=args.tenancy.cluster_id, api=k8s.CoreV1Api(api_client),
                                        own_namespace=own)
    except ClusterIdUnavailable as exc:
        print(f"rebalanser-operator: no cluster id: {exc}", file=sys.stderr)
        return 2
    tenancy = replace(args.tenancy, cluster_id=cluster_id)
    metrics = Metrics()
    if args.metrics_port:
        metrics.serve(args.metrics_port)
    ctx = OperatorContext(kube=KubernetesGateway(api_client), metrics=metrics,
                          options=LoopOptions(credentials_grace=args.credentials_grace), tenancy=tenancy,
                          identity=args.identity)
    own_namespace = own if own and (args.all_namespaces or own in args.namespaces) else None
    log.info(
        "starting: namespaces=%s metrics=%s liveness=%s peering=%s path roots=%s allowed ensembles=%s "
        "cluster id=%s limits=%s",
        "*" if args.all_namespaces else args.namespaces, args.metrics_port or "off", args.liveness or "off",
        args.peering or "standalone", ",".join(tenancy.path_roots.templates), tenancy.ensembles.describe(),
        tenancy.cluster_id, tenancy.limits,
    )
    if args.identity is None:
        log.warning("no ZooKeeper identity of the operator's own (--zk-identity-user or --zk-identity-tls-dir, "
                    "chart value zookeeperIdentity.secretName or zookeeperIdentity.tls.secretName): the parents of the "
                    "groups (/rebalanser, /rebalanser/<namespace>) "
                    "stay open to any ZooKeeper client, which can squat a future group's path or lock a namespace "
                    "out; fine for a quick start only (docs/operator.md, Security model)")
    else:
        log.info("ZooKeeper identity: %s; only the operator creates group roots and their parents",
                 args.identity.describe())
    if not tenancy.ensembles.any and not tenancy.ensembles.servers:
        log.warning("no --allowed-ensemble (REBALANSER_ALLOWED_ENSEMBLES) is set: every ResourceGroup is refused")
    try:
        replicas = Replicas(args.replica, args.identity, metrics)
    except ValueError as exc:
        print(f"rebalanser-operator: {exc}", file=sys.stderr)
        ctx.close()
        return 2
    if args.replica is not None:
        if args.identity is None:
            log.warning("the operator group %s is open to any ZooKeeper client (no identity of the operator's own)",
                        args.replica.group)
        try:
            replicas.start()
        except Exception as exc:
            print(f"rebalanser-operator: cannot join the operator group {args.replica.group} at {args.replica.hosts}: "
                  f"{type(exc).__name__}: {exc}", file=sys.stderr)
            replicas.stop()
            ctx.close()
            return 2
    claims, heartbeat = None, threading.Event()
    if args.release is not None:
        holder = (args.replica.member_id if args.replica is not None
                  else os.environ.get("POD_NAME") or socket.gethostname())
        claims = ReleaseClaims(ReleaseApi(api_client), args.release, holder, args.release_lease_seconds)
        try:
            claims.renew()
        except Exception as exc:
            print(f"rebalanser-operator: cannot renew the release's heartbeat, Lease {args.release.name} in namespace "
                  f"{args.release.namespace}: {exc}", file=sys.stderr)
            replicas.stop()
            ctx.close()
            return 2
        threading.Thread(target=claims.run_heartbeat, args=(heartbeat,), name="release-heartbeat", daemon=True).start()
        log.info("release %s: its heartbeat is Lease %s (%g s); its groups are claimed in status.servedBy",
                 args.release, args.release, args.release_lease_seconds)
    deaths = death_watch(args, replicas, api_client, own)
    try:
        kopf.run(
            registry=build_registry(ctx, own_namespace, watch_pods=args.failover_pods,
                                    secret_poll=args.secret_poll, replicas=replicas,
                                    readiness=args.replica_readiness if args.replica is not None else "",
                                    claims=claims),
            settings=operator_settings(handled_here(replicas, claims)),
            clusterwide=args.all_namespaces,
            namespaces=() if args.all_namespaces else args.namespaces,
            standalone=args.peering is None,
            peering_name=args.peering,
            liveness_endpoint=args.liveness or None,
        )
    finally:
        heartbeat.set()
        if deaths is not None:
            deaths.stop()
        replicas.stop()
        ctx.close()
    return 0


def death_watch(args: argparse.Namespace, replicas: Replicas, api_client: k8s.ApiClient,
                own: str | None) -> DeathWatch | None:
    """The watch of the operator's own pods, started, when replicas are on and a selector is given."""
    selector = args.replica_pod_selector or os.environ.get("REBALANSER_REPLICA_POD_SELECTOR") or ""
    if not replicas.enabled or not selector:
        return None
    if not own:
        log.warning("--replica-pod-selector needs $POD_NAMESPACE (the operator's own namespace): a replica's death "
                    "is left to its session's expiry")
        return None
    watch = DeathWatch(replicas, k8s.CoreV1Api(api_client), namespace=own, selector=selector)
    watch.start()
    return watch


if __name__ == "__main__":
    raise SystemExit(main())
