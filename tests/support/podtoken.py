"""kubectl as an operator pod: a kubeconfig holding only a service-account token bound to one pod
(``kubectl create token --bound-object-kind Pod``), so that the API server itself puts the pod's name into
the request's user info, as for the pod's own mounted token. The replicas' writer fence judges that name
(docs/operator-replicas.md, "Fenced writes")."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.support.kubectl import Kube


def as_pod(admin: Kube, path: Path, account: str, namespace: str, pod: str | None) -> Kube:
    """A :class:`Kube` that acts with a token of ``namespace``/``account`` bound to pod ``pod`` of the same
    namespace (``None``: a token bound to no pod), written to the kubeconfig ``path``; the cluster (server
    and CA) is the one of ``admin``'s kubeconfig."""
    bound: list[str] = []
    if pod is not None:
        uid = admin.json("get", "pod", pod, "-n", namespace)["metadata"]["uid"]
        bound = ["--bound-object-kind", "Pod", "--bound-object-name", pod, "--bound-object-uid", uid]
    token = admin.kubectl("create", "token", account, "-n", namespace, "--duration", "1h", *bound).stdout.strip()
    config = yaml.safe_load(admin.kubeconfig.read_text())
    current = next(c for c in config["contexts"] if c["name"] == config["current-context"])["context"]
    clusters = [c for c in config["clusters"] if c["name"] == current["cluster"]]
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "clusters": clusters,
        "users": [{"name": "pod", "user": {"token": token}}],
        "contexts": [{"name": "pod", "context": {"cluster": current["cluster"], "user": "pod"}}],
        "current-context": "pod",
    }))
    path.chmod(0o600)
    return Kube(path, admin.bin_dir)
