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
    return Kube(token_kubeconfig(admin.kubeconfig, path, token), admin.bin_dir)


def token_kubeconfig(admin: Path, path: Path, token: str, namespace: str | None = None) -> Path:
    """Writes to ``path`` a kubeconfig that reaches the cluster of kubeconfig ``admin`` (its server and CA)
    with ``token`` alone (and ``namespace`` as its default), and returns ``path``."""
    config = yaml.safe_load(admin.read_text())
    current = next(c for c in config["contexts"] if c["name"] == config["current-context"])["context"]
    clusters = [c for c in config["clusters"] if c["name"] == current["cluster"]]
    context: dict[str, str] = {"cluster": current["cluster"], "user": "token"}
    if namespace is not None:
        context["namespace"] = namespace
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "clusters": clusters,
        "users": [{"name": "token", "user": {"token": token}}],
        "contexts": [{"name": "token", "context": context}], "current-context": "token",
    }))
    path.chmod(0o600)
    return path
