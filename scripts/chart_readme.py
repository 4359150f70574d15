"""The chart's README, generated from Chart.yaml and values.yaml (its comments are the descriptions).

    python scripts/chart_readme.py charts/rebalanser-operator > charts/rebalanser-operator/README.md

Every key of values.yaml gets a row: its dotted path, its default, and the comment lines written just
above it. The chart's README.md is this output, committed (tests/operator/test_chart_readme.py keeps it
current); ``make dist`` writes it again into the packaged chart. (There is no served version of the usual
Go generator, helm-docs, among the modules this project may install: this script does its job.)
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z0-9_.-]+):(?:\s|$)")


def described_keys(values_text: str) -> dict[str, str]:
    """Dotted key path -> the comment block directly above the key (empty when none)."""
    found: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    comments: list[str] = []
    for line in values_text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            comments.append(stripped.lstrip("#").strip())
            continue
        match = KEY.match(line)
        if not match or stripped.startswith("-"):
            comments = [] if not stripped else comments
            continue
        indent = len(match["indent"])
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, match["key"]))
        found[".".join(key for _, key in stack)] = " ".join(c for c in comments if c)
        comments = []
    return found


def leaves(values: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted path, default) of every key; a non-empty mapping is descended into, anything else is a leaf."""
    if isinstance(values, dict) and values:
        if prefix:
            yield prefix, None
        for key, value in values.items():
            yield from leaves(value, f"{prefix}.{key}" if prefix else str(key))
    else:
        yield prefix, values


def render(chart: Path) -> str:
    meta = yaml.safe_load((chart / "Chart.yaml").read_text())
    values_text = (chart / "values.yaml").read_text()
    comments = described_keys(values_text)
    rows = []
    for path, default in leaves(yaml.safe_load(values_text)):
        shown = "" if default is None and path in comments and _is_section(path, values_text) else (
            f"`{json.dumps(default)}`")
        rows.append(f"| `{path}` | {shown} | {comments.get(path, '').replace('|', '/')} |")
    name, version = meta["name"], meta["version"]
    return "\n".join([
        f"# {name}",
        "",
        meta.get("description", ""),
        "",
        f"Chart version {version}, application version {meta.get('appVersion', version)}; "
        f"Kubernetes {meta.get('kubeVersion', 'any')}.",
        "",
        "## Installing",
        "",
        "The install recipe is `docs/getting-started.md` in the project's repository, followed command by command",
        "by its tests: the operator in a namespace of its own, serving the tenant namespaces of",
        "`rbac.watchNamespaces`; `image.repository` in your registry; `operator.allowedEnsembles` listing the",
        "servers of the ResourceGroups' `spec.zookeeper.connect` (none is allowed by default); a ResourceGroup",
        "and its workers with digest credentials from a Secret.",
        "",
        "The CRD comes from the chart's `crds/` folder on the first install; Helm never upgrades or deletes it.",
        "Before every `helm upgrade`, apply the new chart's CRD:",
        "",
        "```sh",
        f"helm show crds {name}-{version}.tgz | kubectl apply --server-side --force-conflicts -f -",
        "```",
        "",
        "With `crds.templated: true` the CRD is a template instead (kept on uninstall, upgraded with the chart);",
        "then install with `--skip-crds`.",
        "",
        "## Uninstalling",
        "",
        "Delete the ResourceGroups first, while the operator runs: each carries a finalizer that only the",
        "operator releases. `helm uninstall` checks (`uninstallCheck.enabled`, a pre-delete hook Job) and",
        "stops, deleting nothing, while any remain in the served namespaces; the Job's log names them.",
        "",
        "```sh",
        "kubectl delete resourcegroups --all -n <each served namespace>",
        "helm uninstall rebalanser-operator --namespace rebalanser",
        "```",
        "",
        "## Values",
        "",
        "Generated from `values.yaml`: the description is the comment above each key.",
        "",
        "| key | default | description |",
        "| --- | --- | --- |",
        *rows,
        "",
    ])


def _is_section(path: str, values_text: str) -> bool:
    data = yaml.safe_load(values_text)
    for key in path.split("."):
        data = data.get(key) if isinstance(data, dict) else None
    return isinstance(data, dict) and bool(data)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: chart_readme.py CHART_DIR", file=sys.stderr)
        return 2
    sys.stdout.write(render(Path(argv[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
