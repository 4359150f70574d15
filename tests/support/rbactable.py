"""The operator's RBAC as docs/operator.md states it ("RBAC (the chart)" table), and as
``kubectl auth can-i --list`` reports it, in one shape: ``{resource: verbs}`` where a resource is
``plural[.group][/subresource]`` (``configmaps``, ``deployments.apps``,
``resourcegroups.rebalanser.io/status``).

The tests compare the two (tests/e2e/test_rbac_e2e.py) and the table with the chart's rendered rules
(tests/operator/test_chart.py), so the doc, the chart and the API server cannot drift apart.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "operator.md"
HEADING = "### RBAC (the chart)"
ALWAYS = "always"

Grants = dict[str, frozenset[str]]


@dataclass(frozen=True)
class Row:
    scope: str  # "cluster", "served" or "own" (the operator's own namespace)
    resource: str
    verbs: frozenset[str]
    when: str  # "always", or the chart values that add the row, e.g. "failover.enabled", "a + b"


def table_rows(text: str | None = None) -> list[Row]:
    """The rows of the first table after :data:`HEADING` in docs/operator.md."""
    text = DOC.read_text() if text is None else text
    lines = text[text.index(HEADING):].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| scope |"))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        scope, resource, verbs, when = (cell.strip().strip("`") for cell in line.strip("|").split("|")[:4])
        rows.append(Row(scope, resource, frozenset(v.strip() for v in verbs.split(",")), when))
    return rows


def expected(rows: Iterable[Row], *, served: bool, own: bool = False, enabled: Iterable[str] = ()) -> Grants:
    """What the table grants in one namespace (``served``: one the operator serves; with
    ``rbac.clusterWide`` every namespace is; ``own``: the operator's own namespace), with the chart
    values ``enabled`` set. A resource restricted to names is keyed ``plural[name ...]``."""
    on = {ALWAYS, *enabled}
    served = served or "rbac.clusterWide" in on
    out: dict[str, set[str]] = {}
    for row in rows:
        scoped = row.scope == "cluster" or (row.scope == "served" and served) or (row.scope == "own" and own)
        if {c.strip().strip("`") for c in row.when.split("+")} <= on and scoped:
            out.setdefault(row.resource, set()).update(row.verbs)
    return {resource: frozenset(verbs) for resource, verbs in out.items()}


def canonical(resource: str) -> str:
    """``plural.group/sub`` from either ``plural.group/sub`` or ``plural/sub.group``."""
    name, _, sub = resource.partition("/")
    if sub and "." in sub:
        sub, _, group = sub.partition(".")
        name = f"{name}.{group}"
    return f"{name}/{sub}" if sub else name


CAN_I_LINE = re.compile(r"^(\S*)\s+\[(.*?)\]\s+\[(.*?)\]\s+\[(.*?)\]\s*$")


def parse_can_i(output: str) -> tuple[Grants, frozenset[str]]:
    """``kubectl auth can-i --list`` as (resource grants, non-resource URL lines). A rule restricted
    to resource names is kept with its names (``configmaps[a b]``), so it cannot pass for a grant on
    every object."""
    grants: dict[str, set[str]] = {}
    urls: set[str] = set()
    for line in output.splitlines()[1:]:
        match = CAN_I_LINE.match(line)
        if not match:
            continue
        resource, url, names, verbs = match.groups()
        if url:
            urls.add(f"{url} {verbs}")
            continue
        key = canonical(resource) + (f"[{names}]" if names else "")
        grants.setdefault(key, set()).update(verbs.split())
    return {k: frozenset(v) for k, v in grants.items()}, frozenset(urls)


def minus(grants: Mapping[str, frozenset[str]], baseline: Mapping[str, frozenset[str]]) -> Grants:
    """``grants`` without what every ServiceAccount may do anyway (``baseline``: one with no bindings)."""
    out = {}
    for resource, verbs in grants.items():
        rest = verbs - baseline.get(resource, frozenset())
        if rest:
            out[resource] = frozenset(rest)
    return out
