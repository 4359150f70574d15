"""examples/ is the one set of manifests; the credentials overlay changes only what credentials need."""

from __future__ import annotations

import copy
import glob
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"


def kubectl() -> str:
    cache = Path(os.environ.get("REBALANSER_CACHE", Path.home() / ".cache" / "rebalanser"))
    found = [*sorted(glob.glob(str(cache / "controlplane-*" / "bin" / "kubectl"))), shutil.which("kubectl") or ""]
    usable = [path for path in found if path and os.access(path, os.X_OK)]
    if not usable:
        pytest.skip("kubectl not found: make controlplane builds it")
    return usable[0]


def rendered() -> dict[str, Any]:
    out = subprocess.run([kubectl(), "kustomize", "--load-restrictor", "LoadRestrictionsNone",
                          str(EXAMPLES / "credentials")], capture_output=True, text=True, check=True).stdout
    return {doc["kind"]: doc for doc in yaml.safe_load_all(out)}


def test_the_credentials_overlay_adds_the_secret_and_nothing_else() -> None:
    docs = rendered()
    group, workers = docs["ResourceGroup"], docs["Deployment"]
    assert group["spec"]["zookeeper"]["credentialsSecretRef"] == {"name": "zk-digest"}
    base_group = yaml.safe_load((EXAMPLES / "resourcegroup.yaml").read_text())
    trimmed = copy.deepcopy(group)
    del trimmed["spec"]["zookeeper"]["credentialsSecretRef"]
    assert trimmed == base_group

    pod = workers["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert env["REBALANSER_ZK_USERNAME"]["valueFrom"]["secretKeyRef"] == {"name": "zk-digest", "key": "username"}
    mount = next(m for m in container["volumeMounts"] if m["name"] == "zk-digest")
    assert env["REBALANSER_ZK_PASSWORD_FILE"]["value"] == f"{mount['mountPath']}/password" and mount["readOnly"]
    volume = next(v for v in pod["volumes"] if v["name"] == "zk-digest")
    assert volume["secret"]["items"] == [{"key": "password", "path": "password"}]
    base = yaml.safe_load((EXAMPLES / "workers.yaml").read_text())["spec"]["template"]["spec"]["containers"][0]
    assert {"POD_NAME", "POD_UID"} <= set(env) and container["args"] == base["args"]
    assert container["envFrom"] == base["envFrom"]


@pytest.mark.parametrize("manifest", sorted(EXAMPLES.rglob("*.yaml")), ids=lambda path: path.name)
def test_the_examples_teach_only_the_current_field_forms(manifest: Path) -> None:
    """No deprecated field and no fraction of a second in a ResourceGroup of examples/ (what a newcomer copies)."""
    from rebalanser_operator.spec.notices import spec_notices

    for doc in yaml.safe_load_all(manifest.read_text()):
        if isinstance(doc, dict) and doc.get("kind") == "ResourceGroup":
            assert spec_notices(doc.get("spec")) == (), manifest
