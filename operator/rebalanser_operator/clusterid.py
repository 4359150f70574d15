"""The id of the Kubernetes cluster the operator serves, written into every group's owner marker so
that two clusters sharing one ZooKeeper ensemble never take each other's groups.

    cluster_id = resolve_cluster_id(explicit=args.cluster_id, api=k8s.CoreV1Api(api_client),
                                    own_namespace=os.environ.get("POD_NAMESPACE"))

In this order: the ``--cluster-id`` setting; the UID of namespace ``kube-system`` (it lives as long
as the cluster and every cluster has one); a random id the operator keeps in the ConfigMap
``rebalanser-cluster-id`` of its own namespace (created on first start). When none of these can be
had, the operator does not start: a wrong id could hand one cluster's groups to another.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from kubernetes.client.exceptions import ApiException

log = logging.getLogger(__name__)

CONFIG_MAP = "rebalanser-cluster-id"
KEY = "clusterId"
TIMEOUT = (5.0, 20.0)


class ClusterIdUnavailable(RuntimeError):
    pass


def resolve_cluster_id(*, explicit: str | None, api: Any, own_namespace: str | None) -> str:
    if explicit:
        return explicit
    try:
        uid = api.read_namespace("kube-system", _request_timeout=TIMEOUT).metadata.uid
        if uid:
            log.info("cluster id: the UID of namespace kube-system")
            return str(uid)
    except ApiException as exc:
        log.info("cannot read namespace kube-system (%s); keeping a cluster id of our own", exc.status)
    if not own_namespace:
        raise ClusterIdUnavailable("cannot read namespace kube-system and POD_NAMESPACE is not set: "
                                   "give --cluster-id (or REBALANSER_CLUSTER_ID)")
    return _kept_id(api, own_namespace)


def _kept_id(api: Any, namespace: str) -> str:
    from kubernetes import client as k8s

    try:
        found = api.read_namespaced_config_map(CONFIG_MAP, namespace, _request_timeout=TIMEOUT)
        value = (found.data or {}).get(KEY)
        if value:
            return str(value)
    except ApiException as exc:
        if exc.status != 404:
            raise ClusterIdUnavailable(f"cannot read ConfigMap {namespace}/{CONFIG_MAP}: {exc.status}; "
                                       "give --cluster-id (or REBALANSER_CLUSTER_ID)") from exc
    value = uuid.uuid4().hex
    body = k8s.V1ConfigMap(metadata=k8s.V1ObjectMeta(name=CONFIG_MAP, labels={
        "app.kubernetes.io/managed-by": "rebalanser-operator"}), data={KEY: value})
    try:
        api.create_namespaced_config_map(namespace, body, _request_timeout=TIMEOUT)
    except ApiException as exc:
        if exc.status == 409:  # another replica made it first
            return _kept_id(api, namespace)
        raise ClusterIdUnavailable(f"cannot create ConfigMap {namespace}/{CONFIG_MAP}: {exc.status}; "
                                   "give --cluster-id (or REBALANSER_CLUSTER_ID)") from exc
    log.info("cluster id: a new one, kept in ConfigMap %s/%s", namespace, CONFIG_MAP)
    return value
