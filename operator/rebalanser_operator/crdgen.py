"""Generates the ResourceGroup CustomResourceDefinition from the pydantic models.

Usage (what ``make crds`` runs, from the repository root)::

    python -m rebalanser_operator.crdgen            # writes crds/ and the chart's crds/
    python -m rebalanser_operator.crdgen --check    # exit 1 when the committed files drift

pydantic's JSON Schema is turned into a Kubernetes *structural* schema: ``$ref`` inlined,
``Optional`` unwrapped (an absent field, never ``null``), titles dropped, JSON-Schema-2020 numeric
exclusive bounds converted to OpenAPI v3.0 booleans, ``additionalProperties: false`` dropped (the API
server prunes unknown fields instead). Kubernetes extensions (``x-kubernetes-*``) pass through.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from rebalanser_operator import models

CRD_FILE = f"{models.CRD_NAME}.yaml"
#: Paths of the generated file, relative to the repository root.
OUTPUTS = (Path("crds") / CRD_FILE, Path("charts") / "rebalanser-operator" / "crds" / CRD_FILE)
HEADER = (
    "# Generated from operator/rebalanser_operator/models.py by `make crds`\n"
    "# (python -m rebalanser_operator.crdgen). Do not edit by hand.\n"
)

_DROP = {"title", "$defs"}
_KEY_ORDER = ("description", "type", "format", "enum", "required", "properties", "items")


class SchemaError(ValueError):
    """The model produces a schema construct that has no structural equivalent."""


def structural(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """Converts one pydantic JSON-Schema node (and its children) to a structural OpenAPI node."""
    node = dict(schema)
    ref = node.pop("$ref", None)
    if ref is not None:
        target = defs[ref.rsplit("/", 1)[-1]]
        return structural({**target, **node}, defs)
    any_of = node.pop("anyOf", None)
    if any_of is not None:
        options = [option for option in any_of if option.get("type") != "null"]
        if len(options) != 1:
            raise SchemaError(f"union types are not structural: {any_of}")
        return structural({**options[0], **node}, defs)

    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP or (key == "default" and value is None):
            continue
        if key == "description":
            out[key] = " ".join(str(value).split())
        elif key == "properties":
            out[key] = {name: structural(child, defs) for name, child in value.items()}
        elif key == "items":
            out[key] = structural(value, defs)
        elif key == "additionalProperties":
            if isinstance(value, dict):
                out[key] = structural(value, defs)
        elif key in ("exclusiveMinimum", "exclusiveMaximum") and not isinstance(value, bool):
            out["minimum" if key == "exclusiveMinimum" else "maximum"] = value
            out[key] = True
        else:
            out[key] = value
    if "properties" in out:
        out.setdefault("type", "object")
    return _ordered(out)


def _ordered(node: dict[str, Any]) -> dict[str, Any]:
    first = {key: node[key] for key in _KEY_ORDER if key in node}
    return {**first, **{key: value for key, value in node.items() if key not in first}}


def model_schema(model: type[BaseModel]) -> dict[str, Any]:
    raw = model.model_json_schema(by_alias=True, mode="validation")
    return structural(raw, raw.get("$defs", {}))


def build_crd() -> dict[str, Any]:
    spec = model_schema(models.ResourceGroupSpec)
    status = model_schema(models.ResourceGroupStatus)
    root = {
        "description": "A named set of resources shared among worker processes through ZooKeeper.",
        "type": "object",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string", "description": "rebalanser.io/v1alpha1"},
            "kind": {"type": "string", "description": "ResourceGroup"},
            "metadata": {"type": "object"},  # the API server allows nothing more here
            "spec": spec,
            "status": status,
        },
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": models.CRD_NAME,
            "labels": {"app.kubernetes.io/part-of": "rebalanser"},
        },
        "spec": {
            "group": models.GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": models.KIND,
                "listKind": f"{models.KIND}List",
                "plural": models.PLURAL,
                "singular": models.SINGULAR,
                "shortNames": list(models.SHORT_NAMES),
                "categories": ["rebalanser"],
            },
            "versions": [
                {
                    "name": models.VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [dict(column) for column in models.PRINTER_COLUMNS],
                    "schema": {"openAPIV3Schema": root},
                }
            ],
        },
    }


def render() -> str:
    body = yaml.safe_dump(build_crd(), sort_keys=False, width=110, allow_unicode=True)
    return HEADER + body


def _repo_root(explicit: Path | None) -> Path:
    if explicit is not None:
        return explicit
    for candidate in (Path.cwd(), Path(__file__).resolve().parents[2]):
        if (candidate / "pyproject.toml").is_file() and (candidate / "operator").is_dir():
            return candidate
    raise SystemExit("crdgen: run from the repository root or pass --root")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rebalanser_operator.crdgen", description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, help="repository root (default: the current directory)")
    parser.add_argument("--check", action="store_true", help="do not write; exit 1 when a file differs")
    args = parser.parse_args(argv)
    root = _repo_root(args.root)
    text = render()
    drifted = []
    for relative in OUTPUTS:
        target = root / relative
        current = target.read_text() if target.is_file() else None
        if current == text:
            continue
        drifted.append(str(relative))
        if not args.check:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
            print(f"wrote {relative}")
    if args.check and drifted:
        print(f"out of date (run `make crds`): {', '.join(drifted)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
