"""The local cluster's scripts and configuration, checked without Docker: shell syntax (and shellcheck
when installed), the pins that must agree, and the runtime wrapper's logic (scripts/lib/runc-bounded.py)
on real OCI files.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from tests.support.cluster import REPO

SCRIPTS = sorted(
    [*REPO.glob("scripts/*.sh"), *REPO.glob("scripts/lib/*.sh"),
     REPO / "e2e/cluster/zookeeper/zk-run", REPO / "e2e/cluster/zookeeper/zk-probe",
     REPO / "e2e/cluster/images/select-iptables"]
)


def load_wrapper() -> ModuleType:
    spec = importlib.util.spec_from_file_location("runc_bounded", REPO / "scripts/lib/runc-bounded.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["runc_bounded"] = module
    spec.loader.exec_module(module)
    return module


runc_bounded = load_wrapper()


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(REPO)))
def test_scripts_parse(script: Path) -> None:
    shell = "sh" if script.read_text().startswith("#!/bin/sh") else "bash"
    subprocess.run([shell, "-n", str(script)], check=True)
    if not script.name.endswith(".sh") or script.parent.name != "lib":
        assert script.stat().st_mode & 0o111, f"{script} is not executable"


def test_shellcheck() -> None:
    shellcheck = shutil.which("shellcheck")
    if shellcheck is None:
        pytest.skip("shellcheck not installed")
    proc = subprocess.run([shellcheck, "-x", *map(str, SCRIPTS)], cwd=REPO, capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stdout


def test_kind_config_names_the_etcd_built_here() -> None:
    etcd = re.search(r"go\.etcd\.io/etcd/server/v3 v(\S+)", (REPO / "e2e/controlplane/etcd/go.mod").read_text())
    assert etcd is not None
    config = yaml.safe_load((REPO / "e2e/cluster/kind.yaml").read_text())
    patch = yaml.safe_load(config["kubeadmConfigPatches"][0])
    assert patch["etcd"]["local"]["imageTag"] == f"{etcd.group(1)}-0"
    assert config["networking"]["disableDefaultCNI"] is True
    assert any("restrict_oom_score_adj = true" in p for p in config["containerdConfigPatches"])


def test_node_and_controlplane_modules_pin_the_same_kubernetes() -> None:
    def pins(path: str) -> list[str]:
        text = (REPO / path).read_text()
        return sorted(re.findall(r"^(?:require )?\s*(k8s\.io/\S+ (?:=> k8s\.io/\S+ )?v\S+)$", text, re.M))

    node = pins("e2e/node/go.mod")
    assert "k8s.io/kubernetes v1.34.4" in node
    assert set(pins("e2e/controlplane/go.mod")) <= set(node)


def test_zookeeper_manifest_serves_the_documented_address() -> None:
    docs = list(yaml.safe_load_all((REPO / "e2e/cluster/zookeeper.yaml").read_text()))
    by_kind = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    labels = by_kind[("Namespace", "zookeeper")]["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    client = by_kind[("Service", "zk")]
    assert client["metadata"]["namespace"] == "zookeeper" and client["spec"]["ports"][0]["port"] == 2181
    sts = by_kind[("StatefulSet", "zk")]
    assert sts["spec"]["replicas"] == 3 and sts["spec"]["serviceName"] == "zk-hs"
    assert sts["spec"]["podManagementPolicy"] == "Parallel"  # Ready needs a quorum: start all at once
    container = sts["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}
    assert env["ZK_REPLICAS"] == "3" and env["ZK_PEER_DOMAIN"] == "zk-hs.zookeeper.svc.cluster.local"
    # the administrator's digest, from the Secret scripts/cluster.sh up makes; optional, so that the tests'
    # own copies of this manifest in other namespaces run without one
    assert env["ZK_SUPER_DIGEST"] == {"secretKeyRef": {"name": "zk-admin", "key": "digest", "optional": True}}


# ---- the runtime wrapper: pure logic, then a run against a stand-in runc

def spec_with(caps: list[str]) -> dict[str, object]:
    return {"ociVersion": "1.0.2", "process": {"args": ["sh"], "capabilities": {
        key: list(caps) for key in ("bounding", "effective", "permitted", "inheritable")}}}


def test_subcommand_skips_global_options() -> None:
    args = ["--root", "/run/x", "--log", "/l.json", "--log-format", "json", "--systemd-cgroup", "create",
            "--bundle", "/b", "id"]
    assert runc_bounded.subcommand(args) == ("create", ["--bundle", "/b", "id"])
    assert runc_bounded.subcommand(["--debug"]) == (None, [])
    assert runc_bounded.option(["--bundle=/b"], "--bundle", "-b") == "/b"
    assert runc_bounded.option(["-b", "/c"], "--bundle", "-b") == "/c"
    assert runc_bounded.option(["id"], "--bundle", "-b") is None


def test_strip_removes_only_the_missing_capabilities() -> None:
    process = spec_with(["CAP_CHOWN", "CAP_SYS_RESOURCE", "CAP_FUTURE_THING"])["process"]
    assert isinstance(process, dict)
    assert runc_bounded.strip(process, {"CAP_SYS_RESOURCE"}) is True
    assert process["capabilities"]["effective"] == ["CAP_CHOWN", "CAP_FUTURE_THING"]
    assert runc_bounded.strip(process, {"CAP_SYS_RESOURCE"}) is False  # nothing left to remove
    assert runc_bounded.strip({"args": ["sh"]}, {"CAP_SYS_RESOURCE"}) is False


def test_missing_capabilities_follow_this_process_bounding_set() -> None:
    status = Path("/proc/self/status").read_text()
    mask = int(re.search(r"^CapBnd:\s*(\S+)$", status, re.M).group(1), 16)  # type: ignore[union-attr]
    expected = {f"CAP_{n}" for bit, n in enumerate(runc_bounded.CAPABILITIES) if not mask >> bit & 1}
    assert runc_bounded.missing_capabilities() == expected


def test_wrapper_rewrites_the_bundle_and_execs_runc(tmp_path: Path) -> None:
    """End to end through the real program: a stand-in runc records its arguments and the config it saw."""
    fake = tmp_path / "runc"
    fake.write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$RECORD"\ncat "$BUNDLE/config.json" > "$RECORD.config"\n')
    fake.chmod(0o755)
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    every = [f"CAP_{n}" for n in runc_bounded.CAPABILITIES]
    (bundle / "config.json").write_text(json.dumps(spec_with(every)))
    record = tmp_path / "record"
    args = ["--root", "/run/r", "create", "--bundle", str(bundle), "--pid-file", "/p", "ctr-1"]
    env = {"RUNC_BOUNDED_RUNC": str(fake), "RECORD": str(record), "BUNDLE": str(bundle), "PATH": "/usr/bin:/bin"}
    subprocess.run([sys.executable, str(REPO / "scripts/lib/runc-bounded.py"), *args], env=env, check=True,
                   timeout=30)
    assert record.read_text().splitlines() == args
    seen = json.loads((tmp_path / "record.config").read_text())["process"]["capabilities"]
    allowed = [c for c in every if c not in runc_bounded.missing_capabilities()]
    assert all(seen[key] == allowed for key in ("bounding", "effective", "permitted", "inheritable"))


def test_one_script_starts_a_local_cluster(tmp_path: Path) -> None:
    """scripts/cluster.sh is the only entry point: the kind cluster's commands, and ``controlplane`` for
    the e2e tests' API server (checked here without starting anything: usage errors and a DIR that is
    not up). Nothing refers to a second script."""
    script = REPO / "scripts" / "cluster.sh"

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(script), *args], capture_output=True, text=True, timeout=60, check=False)

    for args in (("bogus",), ("controlplane",), ("controlplane", "up"), ("controlplane", "start", str(tmp_path))):
        proc = run(*args)
        assert proc.returncode == 2 and "usage:" in proc.stderr, (args, proc.returncode, proc.stderr)
    assert run("controlplane", "status", str(tmp_path / "api")).returncode == 1
    second = "kind-cluster" + ".sh"  # the former second script (spelt so that this file does not name it)
    assert not (REPO / "scripts" / second).exists()
    makefile = (REPO / "Makefile").read_text()
    assert "scripts/cluster.sh up" in makefile and "scripts/cluster.sh down" in makefile
    tracked = subprocess.run(["git", "-C", str(REPO), "grep", "-l", second], capture_output=True,
                             text=True, check=False).stdout.split()
    assert tracked == [], f"references to a second cluster script: {tracked}"
