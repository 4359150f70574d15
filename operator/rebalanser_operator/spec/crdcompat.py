"""Where a new CRD schema would reject, or silently lose, what an older schema admitted.

An upgrade of the CRD is safe for stored objects when every object valid under the old structural
schema is still valid under the new one and keeps all its fields. :func:`breaking_changes` compares
two ``openAPIV3Schema`` trees node by node and lists every change that can break that:

- a property that disappears (the API server prunes it from stored objects on the next read);
- a changed ``type``, ``format``, ``pattern`` or list/map type;
- a newly required property, a narrower ``enum``, a lower maximum or a higher minimum (of values,
  lengths, items or properties), a bound that becomes exclusive;
- a validation rule (``x-kubernetes-validations``) that the old schema did not have, unless its form
  alone shows it admits every stored object (:func:`admits_stored_objects`); any other new rule is
  reported for a human to judge.

Descriptions, defaults and new optional properties are not breaking. The comparison is conservative:
anything not listed above that differs is ignored, so an empty result means "none of the known kinds
of breakage", not a proof.
"""

from __future__ import annotations

import re
from typing import Any

#: Breaking changes made on purpose, each safe for stored objects for the reason given (the API
#: server's validation ratcheting, on by default since Kubernetes 1.30, lets an update through when a
#: field it leaves unchanged is invalid only under the new schema). docs/operator.md, "Upgrading".
ACCEPTED_CHANGES: dict[str, str] = {
    **{
        f".spec.{field}: type changed from 'number' to 'integer'": (
            "whole seconds; a stored fraction is read rounded up and named in the SpecCurrent condition"
        )
        for field in ("zookeeper.sessionTimeoutSeconds", "rebalance.minIntervalSeconds",
                      "rebalance.maxIntervalSeconds", "rebalance.departureGraceSeconds")
    },
    **{
        f".status.lastRebalance.{field}: format 'date-time' added": (
            "the operator writes RFC 3339 (and rewrites the status it owns)"
        )
        for field in ("startedAt", "completedAt")
    },
}

#: Keys whose value must not change at all.
_EQUAL = ("type", "format", "pattern", "x-kubernetes-list-type", "x-kubernetes-map-type")
#: Upper bounds: the new one must be absent or at least the old one (absent old = unbounded).
_UPPER = ("maximum", "maxLength", "maxItems", "maxProperties")
#: Lower bounds: the new one must be absent or at most the old one.
_LOWER = ("minimum", "minLength", "minItems", "minProperties")


def breaking_changes(old: dict[str, Any], new: dict[str, Any], path: str = "") -> list[str]:
    """Every change from ``old`` to ``new`` (structural schema nodes) that can break a stored object."""
    where = path or "<root>"
    found: list[str] = []
    for key in _EQUAL:
        if key in old and old.get(key) != new.get(key):
            found.append(f"{where}: {key} changed from {old[key]!r} to {new.get(key)!r}")
        elif key not in old and key in new and key != "type":
            found.append(f"{where}: {key} {new[key]!r} added")
    for key in _UPPER:
        if key in new and (key not in old or new[key] < old[key]):
            found.append(f"{where}: {key} lowered from {old.get(key, 'unbounded')!r} to {new[key]!r}")
    for key in _LOWER:
        if key in new and (key not in old or new[key] > old[key]):
            found.append(f"{where}: {key} raised from {old.get(key, 'none')!r} to {new[key]!r}")
    for key in ("exclusiveMinimum", "exclusiveMaximum"):
        if new.get(key) and not old.get(key):
            found.append(f"{where}: {key} added")
    if old.get("nullable") and not new.get("nullable"):
        found.append(f"{where}: no longer nullable")
    if "enum" in new:
        missing = [value for value in old.get("enum", [None]) if value not in new["enum"]]
        if "enum" not in old:
            found.append(f"{where}: enum {new['enum']!r} added")
        elif missing:
            found.append(f"{where}: enum no longer admits {missing!r}")
    added_required = sorted(set(new.get("required", [])) - set(old.get("required", [])))
    if added_required:
        found.append(f"{where}: newly required {added_required!r}")
    old_rules = {rule.get("rule") for rule in old.get("x-kubernetes-validations", [])}
    for rule in new.get("x-kubernetes-validations", []):
        if rule.get("rule") not in old_rules and not admits_stored_objects(rule, old):
            found.append(f"{where}: new validation rule {rule.get('rule')!r}")
    old_props: dict[str, Any] = old.get("properties", {})
    new_props: dict[str, Any] = new.get("properties", {})
    for name, child in old_props.items():
        if name not in new_props:
            if not new.get("x-kubernetes-preserve-unknown-fields"):
                found.append(f"{path}.{name}: removed (the API server would prune it from stored objects)")
            continue
        found.extend(breaking_changes(child, new_props[name], f"{path}.{name}"))
    for key, suffix in (("items", "[]"), ("additionalProperties", "{}")):
        old_child, new_child = old.get(key), new.get(key)
        if isinstance(old_child, dict) and isinstance(new_child, dict):
            found.extend(breaking_changes(old_child, new_child, f"{path}{suffix}"))
        elif isinstance(old_child, dict) and new_child is None:
            found.append(f"{where}: {key} removed")
    return found


_CREATE_ONLY = re.compile(r"^oldSelf\.hasValue\(\) \|\| ")
_UNLESS_ABSENT = re.compile(r"^!has\(self\.(\w+)\) \|\| ")
_IF_PRESENT = re.compile(r"^has\(self\.(\w+)\) \|\| ")


def admits_stored_objects(rule: dict[str, Any], old: dict[str, Any]) -> bool:
    """Whether a rule new on the node ``old`` (of the old schema) is true for every object the old
    schema admitted, or never evaluated on them, by its form alone:

    - ``oldSelf.hasValue() || …`` with ``optionalOldSelf``: checked on create only, so no update of a
      stored object is refused;
    - ``!has(self.F) || …`` where the old node has no property ``F``: stored objects never hold ``F``
      (the API server pruned it);
    - ``has(self.F) || …`` where ``F`` was required by the old node: stored objects always hold it.
    """
    text = str(rule.get("rule", ""))
    if rule.get("optionalOldSelf") and _CREATE_ONLY.match(text):
        return True
    absent = _UNLESS_ABSENT.match(text)
    if (absent is not None and absent.group(1) not in old.get("properties", {})
            and not old.get("x-kubernetes-preserve-unknown-fields")):
        return True
    present = _IF_PRESENT.match(text)
    return present is not None and present.group(1) in old.get("required", [])


def version_schema(crd: dict[str, Any], version: str) -> dict[str, Any]:
    """The ``openAPIV3Schema`` of one version of a CRD manifest."""
    for entry in crd["spec"]["versions"]:
        if entry["name"] == version:
            schema: dict[str, Any] = entry["schema"]["openAPIV3Schema"]
            return schema
    raise KeyError(f"{crd['metadata']['name']} has no version {version}")
