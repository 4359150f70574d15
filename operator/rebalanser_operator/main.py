"""``rebalanser-operator``: runs the kopf operator for ResourceGroups.

    rebalanser-operator [--namespace NS]... | --all-namespaces
                        [--metrics-port N] [--liveness URL] [--peering NAME | --standalone]
                        [--log-format json|plain|full] [--verbose | --debug]

Kubernetes credentials come from the in-cluster service account or ``$KUBECONFIG``. Standalone (no
kopf peering) is the default: the Helm chart runs exactly one replica with the Recreate strategy.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

import kopf
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from rebalanser_operator.handlers import build_registry, operator_settings
from rebalanser_operator.kube import KubernetesGateway
from rebalanser_operator.metrics import Metrics
from rebalanser_operator.runtime import DEFAULT_CREDENTIALS_GRACE, EXECUTOR_THREADS, LoopOptions, OperatorContext
from rebalanser_operator.secretpoll import DEFAULT_INTERVAL as DEFAULT_SECRET_POLL

log = logging.getLogger("rebalanser_operator")

DEFAULT_METRICS_PORT = 8080
DEFAULT_LIVENESS = "http://0.0.0.0:8081/healthz"
LOG_FORMATS = {"json": kopf.LogFormat.JSON, "plain": kopf.LogFormat.PLAIN, "full": kopf.LogFormat.FULL}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="rebalanser-operator", description="Reconciles ResourceGroups.")
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
    return args


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
    metrics = Metrics()
    if args.metrics_port:
        metrics.serve(args.metrics_port)
    ctx = OperatorContext(kube=KubernetesGateway(api_client), metrics=metrics,
                          options=LoopOptions(credentials_grace=args.credentials_grace))
    own = os.environ.get("POD_NAMESPACE") or None
    own_namespace = own if own and (args.all_namespaces or own in args.namespaces) else None
    log.info(
        "starting: namespaces=%s metrics=%s liveness=%s peering=%s",
        "*" if args.all_namespaces else args.namespaces, args.metrics_port or "off", args.liveness or "off",
        args.peering or "standalone",
    )
    try:
        kopf.run(
            registry=build_registry(ctx, own_namespace, watch_pods=args.failover_pods,
                                    secret_poll=args.secret_poll),
            settings=operator_settings(),
            clusterwide=args.all_namespaces,
            namespaces=() if args.all_namespaces else args.namespaces,
            standalone=args.peering is None,
            peering_name=args.peering,
            liveness_endpoint=args.liveness or None,
        )
    finally:
        ctx.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
