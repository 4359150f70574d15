"""Generates the ResourceGroup CustomResourceDefinition from the pydantic models.

Usage (what ``make crds`` runs, from the repository root)::

    python -m rebalanser_operator.spec.crdgen            # writes crds/ and the chart's crds/
    python -m rebalanser_operator.spec.crdgen --check    # exit 1 when the committed files drift
    python -m rebalanser_operator.spec.crdgen --beta-plan v1beta1   # print a CRD that also serves v1beta1

The ``--beta-plan STORAGE`` variant (:func:`build_beta_plan_crd`) is never written to the chart: it is the
CRD of the planned ``v1alpha1`` -> ``v1beta1`` move (docs/operator.md), serving both versions with the same
schema, conversion strategy ``None``, and ``STORAGE`` as the storage version. The e2e upgrade test walks
the plan with it on a real API server.

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

from rebalanser_operator.spec import models

CRD_FILE = f"{models.CRD_NAME}.yaml"
#: Paths of the generated file, relative to the repository root.
OUTPUTS = (Path("crds") / CRD_FILE, Path("charts") / "rebalanser-operator" / "crds" / CRD_FILE)
HEADER = (
    "# Generated from operator/rebalanser_operator/spec/models.py by `make crds`\n"
    "# (python -m rebalanser_operator.spec.crdgen). Do not edit by hand.\n"
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


#: The version the planned move serves beside :data:`models.VERSION` (docs/operator.md).
BETA_VERSION = "v1beta1"


def _root_schema(version: str) -> dict[str, Any]:
    spec = model_schema(models.ResourceGroupSpec)
    status = model_schema(models.ResourceGroupStatus)
    return {
        "description": "A named set of resources shared among worker processes through ZooKeeper.",
        "type": "object",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string", "description": f"{models.GROUP}/{version}"},
            "kind": {"type": "string", "description": "ResourceGroup"},
            "metadata": {"type": "object"},  # the API server allows nothing more here
            "spec": spec,
            "status": status,
        },
        "x-kubernetes-validations": [dict(rule) for rule in models.OBJECT_VALIDATIONS],
    }


def _version(name: str, *, storage: bool) -> dict[str, Any]:
    return {
        "name": name,
        "served": True,
        "storage": storage,
        "subresources": {"status": {}},
        "additionalPrinterColumns": [dict(column) for column in models.PRINTER_COLUMNS],
        "schema": {"openAPIV3Schema": _root_schema(name)},
    }


def build_crd() -> dict[str, Any]:
    """The CRD the chart ships: ``v1alpha1`` only."""
    return _crd([_version(models.VERSION, storage=True)])


def build_beta_plan_crd(storage: str) -> dict[str, Any]:
    """The planned CRD serving ``v1alpha1`` and ``v1beta1`` (same schema, conversion ``None``), with
    ``storage`` as the storage version; not shipped (the public contract is ``v1alpha1``)."""
    if storage not in (models.VERSION, BETA_VERSION):
        raise ValueError(f"storage must be {models.VERSION} or {BETA_VERSION}, not {storage!r}")
    crd = _crd([_version(name, storage=name == storage) for name in (models.VERSION, BETA_VERSION)])
    crd["spec"]["conversion"] = {"strategy": "None"}
    return crd


def _crd(versions: list[dict[str, Any]]) -> dict[str, Any]:
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
            "versions": versions,
        },
    }


class _PlainDumper(yaml.SafeDumper):
    """Writes a value that occurs twice (a shared enum) twice, never as a YAML anchor and alias."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def render(crd: dict[str, Any] | None = None) -> str:
    body = yaml.dump(build_crd() if crd is None else crd, Dumper=_PlainDumper, sort_keys=False, width=110,
                     allow_unicode=True)
    return HEADER + body


def _repo_root(explicit: Path | None) -> Path:
    if explicit is not None:
        return explicit
    for candidate in (Path.cwd(), Path(__file__).resolve().parents[3]):
        if (candidate / "pyproject.toml").is_file() and (candidate / "operator").is_dir():
            return candidate
    raise SystemExit("crdgen: run from the repository root or pass --root")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rebalanser_operator.spec.crdgen",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, help="repository root (default: the current directory)")
    parser.add_argument("--check", action="store_true", help="do not write; exit 1 when a file differs")
    parser.add_argument("--beta-plan", choices=(models.VERSION, BETA_VERSION), metavar="STORAGE",
                        help="print the planned CRD serving v1alpha1 and v1beta1 with STORAGE stored; write nothing")
    args = parser.parse_args(argv)
    if args.beta_plan:
        sys.stdout.write(render(build_beta_plan_crd(args.beta_plan)))
        return 0
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
