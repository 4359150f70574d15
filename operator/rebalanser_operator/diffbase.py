"""kopf's "last handled" state of a ResourceGroup as a digest of its spec, not a copy of it.

kopf compares what it last handled with the object it sees to tell a creation, an update and a
no-op apart. Its stock annotation storage keeps a JSON copy of the spec in an annotation, and every
annotation of an object together must fit in 256 KiB: a large spec (thousands of resource names),
copied once there and once more by a client-side ``kubectl apply``, would push the object over that
limit and every later patch would be refused. :class:`SpecDigestStorage` keeps one SHA-256 of the
canonical JSON spec instead (about 80 bytes, whatever the spec's size)::

    settings.persistence.diffbase_storage = SpecDigestStorage(prefix="rebalanser.io")

What the operator gives up: kopf's ``old``/``new``/``diff`` handler arguments carry digests, not
specs (the handlers read the spec itself), and changes to labels or annotations are not causes
(no handler reacts to them). An object handled by an older operator still carries the full copy
under ``last-handled-configuration``: it is read as the digest of its spec (so an upgrade is not
mistaken for a creation or an edit) and removed the next time the state is stored.

With operator replicas or release claims (``handled``), only the replica that serves a group stores its
digest. kopf stores the new state even when its change handlers are filtered out (a group another
replica owns, or another release holds): a replica that does not serve the group would then mark a spec
change handled before the one that serves it saw it, and that one would never apply it. Not stored,
the change stays a change for every replica until the one that serves it has handled it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any, cast

import kopf

DIGEST_KEY = "last-handled-spec-digest"
LEGACY_KEY = "last-handled-configuration"


def spec_digest(spec: Any) -> str:
    """SHA-256 of the spec's canonical JSON (sorted keys, no spaces)."""
    canonical = json.dumps(spec if spec is not None else {}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def essence_of(spec: Any) -> dict[str, Any]:
    return {"spec": {"sha256": spec_digest(spec)}}


class SpecDigestStorage(kopf.AnnotationsDiffBaseStorage):
    def __init__(self, *, prefix: str, handled: Callable[[kopf.Body], bool] | None = None) -> None:
        super().__init__(prefix=prefix, key=DIGEST_KEY)
        self._legacy = kopf.AnnotationsDiffBaseStorage(prefix=prefix, key=LEGACY_KEY)
        self._handled = handled

    def build(
        self, *, body: kopf.Body, extra_fields: Iterable[Any] | None = None
    ) -> kopf.BodyEssence:
        return cast(kopf.BodyEssence, essence_of(body.get("spec")))

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        for key in self.make_keys(self.key, body=body):
            digest = body.metadata.annotations.get(key)
            if digest:
                return cast(kopf.BodyEssence, {"spec": {"sha256": digest.strip()}})
        legacy = self._legacy.fetch(body=body)
        if legacy is None:
            return None
        return cast(kopf.BodyEssence, essence_of(cast(Mapping[str, Any], legacy).get("spec")))

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        if self._handled is not None and not self._handled(body):
            return  # another replica (release) serves the group: the change is its to mark handled
        digest = str(cast(Mapping[str, Any], essence).get("spec", {}).get("sha256", ""))
        for key in self.make_keys(self.key, body=body):
            patch.metadata.annotations[key] = digest
        for key in self._legacy.make_keys(LEGACY_KEY, body=body):
            if key in body.metadata.annotations:
                patch.metadata.annotations[key] = None
        self._store_marker(prefix=self.prefix, patch=patch, body=body)
