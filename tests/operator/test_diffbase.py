"""kopf's last-handled state as a digest of the spec (pure: kopf's own Body and Patch objects)."""

from __future__ import annotations

import json
from typing import Any

import kopf
from rebalanser_operator.diffbase import SpecDigestStorage, spec_digest
from rebalanser_operator.handlers import operator_settings

from tests.operator.spec_limits import largest_specs

PREFIX = "rebalanser.io"
LEGACY = f"{PREFIX}/last-handled-configuration"
DIGEST = f"{PREFIX}/last-handled-spec-digest"


def body(spec: dict[str, Any], annotations: dict[str, str] | None = None) -> kopf.Body:
    return kopf.Body({"metadata": {"name": "orders", "namespace": "shop", "annotations": annotations or {}},
                      "spec": spec, "status": {"phase": "Stable"}})


def stored(storage: SpecDigestStorage, obj: kopf.Body) -> dict[str, Any]:
    patch = kopf.Patch()
    storage.store(body=obj, patch=patch, essence=storage.build(body=obj, extra_fields=["spec"]))
    annotations: dict[str, Any] = dict(patch.get("metadata", {}).get("annotations", {}))
    return annotations


def test_the_operator_uses_the_digest_storage() -> None:
    assert isinstance(operator_settings().persistence.diffbase_storage, SpecDigestStorage)


def test_what_is_stored_does_not_grow_with_the_spec() -> None:
    storage = SpecDigestStorage(prefix=PREFIX)
    big = stored(storage, body(largest_specs()["long-names"]))
    small = stored(storage, body({"zookeeper": {"connect": "zk:2181"}}))
    assert set(big) == set(small) == {DIGEST, f"{PREFIX}/kopf-managed"}
    assert len(big[DIGEST]) == len(small[DIGEST]) == 64


def test_a_spec_change_is_a_change_and_key_order_is_not() -> None:
    storage = SpecDigestStorage(prefix=PREFIX)
    spec = {"zookeeper": {"connect": "zk:2181"}, "resources": ["a", "b"]}
    handled = body(spec, stored(storage, body(spec)))
    assert storage.fetch(body=handled) == storage.build(body=handled)
    reordered = body({"resources": ["a", "b"], "zookeeper": {"connect": "zk:2181"}}, dict(handled.metadata.annotations))
    assert storage.fetch(body=reordered) == storage.build(body=reordered)
    edited = body({**spec, "resources": ["a", "c"]}, dict(handled.metadata.annotations))
    assert storage.fetch(body=edited) != storage.build(body=edited)


def test_an_object_never_handled_has_no_state() -> None:
    assert SpecDigestStorage(prefix=PREFIX).fetch(body=body({"zookeeper": {"connect": "zk:2181"}})) is None


def test_an_object_handled_by_an_older_operator_is_neither_new_nor_edited_and_loses_the_copy() -> None:
    storage = SpecDigestStorage(prefix=PREFIX)
    spec = {"zookeeper": {"connect": "zk:2181"}, "resources": ["a"]}
    old_copy = json.dumps({"spec": spec, "metadata": {"labels": {"x": "y"}}}, separators=(",", ":")) + "\n"
    legacy = body(spec, {LEGACY: old_copy})
    assert storage.fetch(body=legacy) == storage.build(body=legacy) == {"spec": {"sha256": spec_digest(spec)}}
    annotations = stored(storage, legacy)
    assert annotations[LEGACY] is None, "the full copy must be removed"
    assert annotations[DIGEST] == spec_digest(spec)


def test_a_replica_that_does_not_serve_the_group_stores_nothing() -> None:
    """kopf stores the new state even when the change handlers are filtered out: a replica (or release) that
    does not serve the group would mark the change handled before the one that serves it sees it."""
    served: set[str] = set()
    storage = SpecDigestStorage(prefix=PREFIX, handled=lambda b: b["metadata"]["name"] in served)
    obj = body({"zookeeper": {"connect": "zk:2181"}})
    assert stored(storage, obj) == {}
    served.add("orders")
    assert DIGEST in stored(storage, obj)
    handled = operator_settings(lambda b: False).persistence.diffbase_storage
    assert stored(handled, obj) == {}  # type: ignore[arg-type]
