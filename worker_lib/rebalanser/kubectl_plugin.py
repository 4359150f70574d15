"""``kubectl rebalanser``: who owns what in a ResourceGroup, asked by the ResourceGroup's name.

The plugin reads the ResourceGroup through ``kubectl`` (its ZooKeeper connect string and group path,
and the TLS and credentials Secrets it names: workers with credentials give their nodes a digest-only
ACL), then answers from ZooKeeper itself, as
``rebalanser status`` does: complete however many resources the group has, where the ResourceGroup's
status is capped. It needs ``kubectl`` on the PATH (or ``$KUBECTL``) and the network reach of a worker
pod: a shell inside the cluster, or ``--zk`` naming a port-forwarded ensemble instead of the connect
string the ResourceGroup names (``--context`` picks the kubeconfig context, as for kubectl)::

    kubectl rebalanser owner orders-0042 --rg orders -n shop     # who owns a resource
    kubectl rebalanser pod orders-worker-7d9f-x2 --rg orders -n shop   # what a pod owns
    kubectl rebalanser status --rg orders -n shop                 # the whole group, last rebalance

    kubectl -n zookeeper port-forward svc/zk 2181:2181 &          # from outside the cluster
    kubectl rebalanser status --rg orders -n shop --zk 127.0.0.1:2181

Installed as the ``kubectl-rebalanser`` command (kubectl finds plugins by that name on the PATH).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rebalanser import __version__, cli
from rebalanser.cli_args import OneLineParser, positive_seconds
from rebalanser.errors import InvalidInputError

__all__ = ["GroupAccess", "access_from", "main"]

TLS_FILES = ("ca.crt", "tls.crt", "tls.key")


@dataclass(frozen=True)
class GroupAccess:
    """What reaching a ResourceGroup's ZooKeeper group takes, as its spec says."""

    connect: str
    path: str
    tls_secret: str | None = None
    verify_hostname: bool = False
    credentials_secret: str | None = None
    #: The Secrets' keys: username and password; CA, certificate and private key (in TLS_FILES' order).
    credential_keys: tuple[str, str] = ("username", "password")
    tls_keys: tuple[str, str, str] = TLS_FILES


def access_from(rg: Mapping[str, Any]) -> GroupAccess:
    """The group's connection from a ResourceGroup object (``kubectl get rg -o json``); pure."""
    meta, spec = rg.get("metadata") or {}, rg.get("spec") or {}
    zookeeper = spec.get("zookeeper") or {}
    status = rg.get("status") or {}
    connect = status.get("zookeeperConnect") or zookeeper.get("connect")  # where the group actually lives
    if not connect:
        raise InvalidInputError(f"ResourceGroup {meta.get('name')} names no ZooKeeper connect string")
    path = zookeeper.get("path") or f"/rebalanser/{meta.get('namespace')}/{meta.get('name')}"
    tls = zookeeper.get("tls") or {}
    tls_ref = tls.get("secretRef") or {}  # a reference with key names, or the Secret's name alone
    credentials_ref = zookeeper.get("credentialsSecretRef") or {}
    credentials = credentials_ref.get("name") or zookeeper.get("credentialsSecret")
    return GroupAccess(
        str(connect), str(path), tls_ref.get("name") or tls.get("secret"), bool(tls.get("verifyHostname", False)),
        str(credentials) if credentials else None,
        (credentials_ref.get("usernameKey", "username"), credentials_ref.get("passwordKey", "password")),
        (tls_ref.get("caKey", TLS_FILES[0]), tls_ref.get("certificateKey", TLS_FILES[1]),
         tls_ref.get("privateKeyKey", TLS_FILES[2])),
    )


class Kubectl:
    def __init__(self, namespace: str | None, kubeconfig: str | None, context: str | None = None) -> None:
        self._base = [os.environ.get("KUBECTL", "kubectl")]
        if kubeconfig:
            self._base += ["--kubeconfig", kubeconfig]
        if context:
            self._base += ["--context", context]
        if namespace:
            self._base += ["-n", namespace]

    def get(self, kind: str, name: str) -> dict[str, Any]:
        proc = subprocess.run([*self._base, "get", kind, name, "-o", "json"], capture_output=True, text=True,
                              timeout=60, check=False)
        if proc.returncode != 0:
            raise InvalidInputError(f"kubectl get {kind} {name}: {proc.stderr.strip()}")
        result: dict[str, Any] = json.loads(proc.stdout)
        return result


def _secret_data(kubectl: Kubectl, name: str) -> dict[str, bytes]:
    data = kubectl.get("secret", name).get("data") or {}
    return {key: base64.b64decode(value) for key, value in data.items()}


def _status_argv(access: GroupAccess, kubectl: Kubectl, workdir: Path) -> list[str]:
    """``rebalanser status`` arguments for the group (the TLS Secret's files and the credentials Secret's
    password written into ``workdir``)."""
    argv = ["status", "--zk", access.connect, "--group", access.path]
    if access.credentials_secret:
        argv += _credential_argv(_secret_data(kubectl, access.credentials_secret), access.credentials_secret,
                                 workdir, access.credential_keys)
    if access.tls_secret:
        secret = _secret_data(kubectl, access.tls_secret)
        for key, name in zip(access.tls_keys, TLS_FILES, strict=True):  # each key to its usual file name
            if key in secret:
                target = workdir / name
                target.write_bytes(secret[key])
                target.chmod(0o600)
        argv += ["--zk-tls-dir", str(workdir)] + (["--zk-tls-verify-hostname"] if access.verify_hostname else [])
    return argv


def _credential_argv(secret: Mapping[str, bytes], name: str, workdir: Path,
                     keys: tuple[str, str] = ("username", "password")) -> list[str]:
    """``--zk-user``/``--zk-password-file`` from a credentials Secret's user name and password keys."""
    username_key, password_key = keys
    if username_key not in secret or password_key not in secret:
        raise InvalidInputError(f"Secret {name} needs the keys {username_key} and {password_key}")
    target = workdir / "password"
    target.write_bytes(secret[password_key])
    target.chmod(0o600)
    return ["--zk-user", secret[username_key].decode(), "--zk-password-file", str(target)]


#: ``rebalanser status`` options passed through as given (they win over what the ResourceGroup names).
PASSED_THROUGH = ("--zk-user", "--zk-password-file", "--zk-tls-dir", "--zk-tls-ca", "--zk-tls-cert", "--zk-tls-key")


def _parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="kubectl rebalanser", description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--version", action="version", version=f"kubectl-rebalanser {__version__}")
    p.add_argument("command", choices=["owner", "pod", "status"],
                   help="owner NAME...: who owns each resource; pod NAME...: what each pod owns; status: the group")
    p.add_argument("names", nargs="*", metavar="NAME")
    p.add_argument("--rg", required=True, metavar="NAME", help="the ResourceGroup")
    p.add_argument("-n", "--namespace", help="its namespace (default: kubectl's)")
    p.add_argument("--kubeconfig")
    p.add_argument("--context", help="the kubeconfig context to use (default: the current one)")
    p.add_argument("--zk", metavar="HOSTS",
                   help="reach ZooKeeper here instead of at the connect string the ResourceGroup names "
                        "(e.g. 127.0.0.1:2181 through kubectl port-forward)")
    p.add_argument("--connect-timeout", type=positive_seconds, metavar="SECONDS",
                   help="as for rebalanser status")
    p.add_argument("--json", action="store_true")
    for option in PASSED_THROUGH:
        p.add_argument(option, help="as for rebalanser status; overrides what the ResourceGroup names")
    p.add_argument("--zk-tls-verify-hostname", action="store_true", help="as for rebalanser status")
    return p


def _overrides(args: argparse.Namespace) -> list[str]:
    argv: list[str] = []
    for option in PASSED_THROUGH:
        value = getattr(args, option.lstrip("-").replace("-", "_"))
        if value:
            argv += [option, value]
    if args.connect_timeout is not None:
        argv += ["--connect-timeout", f"{args.connect_timeout:g}"]
    return argv + (["--zk-tls-verify-hostname"] if args.zk_tls_verify_hostname else [])


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command != "status" and not args.names:
        print(f"kubectl rebalanser {args.command}: name at least one", file=sys.stderr)
        return 2
    kubectl = Kubectl(args.namespace, args.kubeconfig, args.context)
    try:
        access = access_from(kubectl.get("resourcegroups.rebalanser.io", args.rg))
        if args.zk:  # e.g. a port-forwarded ensemble: the group's path and Secrets still come from the object
            access = replace(access, connect=args.zk)
        if args.zk_user or args.zk_password_file:  # given: the credentials Secret need not be readable
            access = replace(access, credentials_secret=None)
        if args.zk_tls_dir or args.zk_tls_ca or args.zk_tls_cert:
            access = replace(access, tls_secret=None)
        with tempfile.TemporaryDirectory(prefix="kubectl-rebalanser-") as workdir:
            status_argv = _status_argv(access, kubectl, Path(workdir))
            flag = {"owner": "--resource", "pod": "--pod", "status": ""}[args.command]
            for name in args.names if flag else []:
                status_argv += [flag, name]
            return cli.main([*status_argv, *_overrides(args), *(["--json"] if args.json else [])])
    except InvalidInputError as exc:
        print(f"kubectl rebalanser: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
