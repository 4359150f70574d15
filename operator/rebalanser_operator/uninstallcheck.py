"""The chart's uninstall check: refuses ``helm uninstall`` while ResourceGroups remain.

    python -m rebalanser_operator.uninstallcheck --namespace shop --namespace billing
    python -m rebalanser_operator.uninstallcheck --all-namespaces

Every ResourceGroup carries the operator's finalizer, and only a running operator releases it (after
its group's members have left and its znodes are deleted). Uninstalling the operator first would leave
each one, and any namespace holding one, stuck in deletion until an operator is installed again. The
chart runs this as a ``pre-delete`` hook Job (``uninstallCheck.enabled``): exit 0 when no ResourceGroup
is left in the served namespaces, else exit 1 with the list and what to do; Helm then stops the
uninstall before deleting anything, the operator still running. The verdict is :func:`verdict`, a pure
function; the listing is the only I/O.

With ``--release NAMESPACE/NAME`` (the chart passes its own), a ResourceGroup that another live release
serves, or leaves to this one while serving its namespace too (its ``status.refusedReleases``), does not
hold the uninstall: that release takes it over once this one's heartbeat expires
(docs/operator-replicas.md, "Two releases").
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rebalanser_operator.spec.models import GROUP, PLURAL, VERSION

#: How many remaining ResourceGroups the message names (the count is always given).
NAMED = 20


def verdict(remaining: Sequence[tuple[str, str]]) -> tuple[int, str]:
    """(exit status, message) for the ResourceGroups (namespace, name) left in the served namespaces."""
    if not remaining:
        return 0, "no ResourceGroup remains: the operator may be uninstalled"
    ordered = sorted(remaining)
    named = ", ".join(f"{namespace}/{name}" for namespace, name in ordered[:NAMED])
    more = f" and {len(ordered) - NAMED} more" if len(ordered) > NAMED else ""
    namespaces = sorted({namespace for namespace, _ in ordered})
    deletes = "; ".join(f"kubectl delete resourcegroups --all -n {namespace}" for namespace in namespaces[:5])
    return 1, (
        f"refusing to uninstall the operator: {len(ordered)} ResourceGroups remain ({named}{more}). Each carries a "
        "finalizer that only the running operator releases; without it, deleting them or their namespace would "
        f"hang. Delete them first, while the operator runs ({deletes}), then uninstall again. To keep them "
        "instead, uninstall with --no-hooks and remove their finalizers yourself "
        "(docs/operator.md, \"Uninstalling\")"
    )


def successor(status: Mapping[str, Any] | None, me: str, alive: Callable[[str], tuple[bool | None, str]]) -> str | None:
    """Another live release that serves a group of this status (its claimer) or serves its namespace too (a
    release that refused it), and so takes it over when this release goes; None when there is none."""
    status = status or {}
    served = status.get("servedBy") or {}
    refused = status.get("refusedReleases") or {}
    others = [served.get("release")] if isinstance(served, Mapping) else []
    others += sorted(refused) if isinstance(refused, Mapping) else []
    for other in others:
        if other and other != me and alive(str(other))[0] is True:
            return str(other)
    return None


def list_remaining(namespaces: Sequence[str] | None, release: str = "") -> list[tuple[str, str]]:
    """(namespace, name) of every ResourceGroup in ``namespaces`` (None: all namespaces), but those another live
    release takes over (with ``release``, this one's identity)."""
    from kubernetes import client

    from rebalanser_operator.main import load_kubernetes_config

    api = client.CustomObjectsApi(load_kubernetes_config())
    listings: list[Any]
    if namespaces is None:
        listings = [api.list_cluster_custom_object(GROUP, VERSION, PLURAL)]
    else:
        listings = [api.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL) for ns in namespaces]
    items = [item for listing in listings for item in listing.get("items", [])]
    if release:
        from rebalanser_operator.releaseclaim import Release, ReleaseApi, ReleaseClaims

        claims = ReleaseClaims(ReleaseApi(api.api_client), Release.parse(release), "uninstall-check")
        items = [item for item in items if successor(item.get("status"), release, claims.alive) is None]
    return [(str(item["metadata"]["namespace"]), str(item["metadata"]["name"])) for item in items]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rebalanser_operator.uninstallcheck",
                                     description=__doc__.split("\n")[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--namespace", action="append", help="a served namespace (repeatable)")
    where.add_argument("--all-namespaces", action="store_true", help="every namespace")
    parser.add_argument("--release", default="", metavar="NAMESPACE/NAME",
                        help="this release: a ResourceGroup another live release takes over does not count")
    args = parser.parse_args(argv)
    status, message = verdict(list_remaining(None if args.all_namespaces else args.namespace, args.release))
    print(message, file=sys.stderr if status else sys.stdout)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
