"""docs/getting-started.md, followed as written on the local cluster: ``make dist``, then every ``sh`` block
of the page in order in one ``bash -e`` shell, with the one substitution the page documents (the image is
loaded into the node, the local cluster having no registry).

Evidence, between the page's steps: the chart's notes (no warning); the ResourceGroup's status (Stable,
every resource assigned); the worker pods' own JSON logs (every resource worked on by exactly one worker,
the one the status names, no two owners of a resource at once, fencing tokens rising); the output of the
page's ``rebalanser status`` (with the credentials every resource and its owner, without them refused);
the group still Stable after the upgrade step; both namespaces gone after the last step. The transcript of
every block and its output is written to .pod-recipe/transcript.md.
"""

from __future__ import annotations

import base64
import json
import re
import shutil
import time
from collections.abc import Iterator
from typing import Any

import pytest
import rebalanser

from tests.pods.scene import example
from tests.support.invariants import Event, overlaps, owners_in_window, token_regressions
from tests.support.kubectl import Kube, KubeError, wait_until
from tests.support.podlogs import parse_log
from tests.support.podtools import Tools, admin_identity
from tests.support.recipe import REPO, Shell, for_the_local_cluster, page_steps, shell_env

pytestmark = [pytest.mark.pods, pytest.mark.timeout(3600)]

OUT = REPO / ".pod-recipe"
OPERATOR_NS, TENANT_NS, RELEASE, GROUP = "rebalanser", "shop", "rebalanser", "orders"
SELECTOR = "app.kubernetes.io/name=orders-worker"
OVERLAY = REPO / "orders"  # the page's own overlay folder, made in the checkout by step 6
RESOURCES = {f"{s['prefix']}{i}" for s in example("resourcegroup.yaml")["spec"]["resourceSets"]
             for i in range(int(s["count"]))}
MEMBERS = int(example("workers.yaml")["spec"]["replicas"])
#: seconds each step may take: make dist builds the wheel, the chart and the image; step 6 waits up to 5 min
TIMEOUTS = {2: 1800.0}


def _gone(kube: Kube, *args: str) -> bool:
    return kube.maybe_json("get", *args) is None


#: Run in a tools pod: the parents the recipe's operator took over for its identity are given back to
#: everyone (the cluster's ZooKeeper is shared by the pod tests, whose operators run without an identity).
GIVE_BACK_SCRIPT = """
import sys
from kazoo.client import KazooClient
from kazoo.security import OPEN_ACL_UNSAFE
zk = KazooClient(hosts=sys.argv[1], timeout=10, auth_data=[("digest", sys.argv[2])])
zk.start(timeout=30)
for node in sys.argv[3:]:
    if zk.exists(node) is not None:
        zk.set_acls(node, OPEN_ACL_UNSAFE)
zk.stop()
"""
IDENTITY_SECRET = "rebalanser-zk-identity"  # step 4's Secret
ZK_CONNECT = "zk.zookeeper.svc.cluster.local:2181"


#: the identity step 4 created ("user:password"), remembered: the page's last step deletes its Secret
IDENTITY_SEEN: list[str] = []


def remember_identity(kube: Kube) -> None:
    secret = kube.maybe_json("get", "secret", IDENTITY_SECRET, "-n", OPERATOR_NS)
    if secret is not None:
        user, password = (base64.b64decode(secret["data"][key]).decode() for key in ("username", "password"))
        IDENTITY_SEEN.append(f"{user}:{password}")


def give_back_parents(kube: Kube) -> None:
    """The recipe's operator made /rebalanser and /rebalanser/shop its own (its identity, step 4): give
    them back to everyone, once its operator is gone (a running one would take them again). As the
    ensemble's administrator when the cluster has one, which also removes whatever an earlier run left
    under /rebalanser/shop: an interrupted run's group root carries the ACL of an operator identity that
    no longer exists, and the page's operator rightly refuses to adopt it. Otherwise with the identity of
    step 4 (read from its Secret, or remembered when the page's last step has deleted it)."""
    remember_identity(kube)
    admin = admin_identity(kube)
    auth = admin or (IDENTITY_SEEN[-1] if IDENTITY_SEEN else "")
    if not auth:
        return
    tools = Tools(kube, "recipe-tools")
    tools.create()
    try:
        if admin:  # what any earlier run left under the tenant's path, whichever identity made it
            tools.purge(ZK_CONNECT, f"/rebalanser/{TENANT_NS}")
        tools.python(GIVE_BACK_SCRIPT, ZK_CONNECT, auth, "/rebalanser", f"/rebalanser/{TENANT_NS}")
    finally:
        tools.delete()


def clear(kube: Kube) -> None:
    """What an earlier, interrupted run left: the tenant namespace first while its operator still runs (it
    deletes the group's znodes, which only the group's credentials may), then the release and its namespace.
    A ResourceGroup's finalizer is dropped only when no operator is left to release it."""
    if not _gone(kube, "namespace", TENANT_NS):
        kube.kubectl("delete", "namespace", TENANT_NS, "--wait=false", check=False)
        try:
            wait_until(lambda: _gone(kube, "namespace", TENANT_NS), 180, "namespace shop left by an earlier run")
        except AssertionError:
            for rg in kube.json("get", "resourcegroups.rebalanser.io", "-n", TENANT_NS)["items"]:
                kube.kubectl("patch", "resourcegroups.rebalanser.io", rg["metadata"]["name"], "-n", TENANT_NS,
                             "--type=merge", "-p", '{"metadata":{"finalizers":null}}', check=False)
            wait_until(lambda: _gone(kube, "namespace", TENANT_NS), 120, "namespace shop, without finalizers")
    remember_identity(kube)
    if kube.helm("status", RELEASE, "-n", OPERATOR_NS, check=False).returncode == 0:
        kube.helm("uninstall", RELEASE, "-n", OPERATOR_NS, "--wait", "--timeout", "120s", check=False)
    if not _gone(kube, "namespace", OPERATOR_NS):
        kube.kubectl("delete", "namespace", OPERATOR_NS, "--wait=false", check=False)
        wait_until(lambda: _gone(kube, "namespace", OPERATOR_NS), 180, "namespace rebalanser left by an earlier run")
    give_back_parents(kube)
    shutil.rmtree(OVERLAY, ignore_errors=True)


@pytest.fixture
def shell(kube: Kube) -> Iterator[Shell]:
    clear(kube)
    shutil.rmtree(OUT, ignore_errors=True)
    session = Shell(cwd=REPO, env=shell_env(kube.env()), scratch=OUT / "blocks")
    try:
        yield session
    finally:
        session.close()
        (OUT / "transcript.md").write_text(session.markdown("docs/getting-started.md, followed on the local cluster"))
        clear(kube)


def status(kube: Kube) -> dict[str, Any]:
    found = kube.maybe_json("get", "resourcegroups.rebalanser.io", GROUP, "-n", TENANT_NS) or {}
    return dict(found.get("status") or {})


def worker_events(kube: Kube) -> tuple[list[Event], set[str]]:
    """Every worker pod's JSON events (``kubectl logs``), and the names of the pods."""
    events: list[Event] = []
    pods = kube.json("get", "pods", "-n", TENANT_NS, "-l", SELECTOR)["items"]
    for pod in pods:
        name = pod["metadata"]["name"]
        restarts = max((c.get("restartCount", 0) for c in pod["status"].get("containerStatuses", [])), default=0)
        text = kube.kubectl("logs", name, "-n", TENANT_NS, "-c", "worker", check=False, timeout=60).stdout
        events += parse_log(text, restarts)
    return sorted(events, key=lambda e: int(e["ts"])), {p["metadata"]["name"] for p in pods}


def ownership_problems(kube: Kube, since: int) -> list[str]:
    """Since ``since`` (monotonic ns, the node's clock and ours are one), every resource worked on by exactly
    one worker pod, the one the status names as its owner."""
    st = status(kube)
    named = {r: m for m, rs in (st.get("assignments") or {}).items() for r in rs}
    events, pods = worker_events(kube)
    worked = owners_in_window(events, since, time.monotonic_ns())
    problems = [] if set(named) == RESOURCES else [f"status assigns {sorted(named)}"]
    for resource in sorted(RESOURCES):
        who = {worker for worker, _ in worked.get(resource, set())}
        if who != {named.get(resource)} or not who <= pods:
            problems.append(f"{resource}: worked on by {sorted(who)}, status names {named.get(resource)}")
    return problems


def listed_owners(out: str) -> dict[str, set[str]]:
    """``rebalanser status``'s member lines (``  <member> <count>  <resource>, <resource>, ...``)."""
    return {m[1]: set(filter(None, m[3].split(", "))) for m in re.finditer(r"^  (\S+)\s+(\d+)  (.*)$", out, re.M)}


def owners(st: dict[str, Any]) -> dict[str, set[str]]:
    held = {member: set(resources) for member, resources in (st.get("assignments") or {}).items()}
    assert set().union(*held.values()) == RESOURCES, held
    return held


def check_stable(kube: Kube) -> dict[str, Any]:
    st = status(kube)
    assert st.get("phase") == "Stable" and st.get("members") == MEMBERS, json.dumps(st)[:2000]
    assert st.get("resources") == st.get("assigned") == len(RESOURCES), json.dumps(st)[:2000]
    return st


def check_owned(kube: Kube) -> None:
    check_stable(kube)
    since = time.monotonic_ns()
    last: list[str] = []

    def settled() -> bool:
        nonlocal last
        last = ownership_problems(kube, since)
        return not last

    wait_until(settled, 60, lambda: f"the workers' logs disagree with the status: {last[:6]}", poll=2.0)
    events, _ = worker_events(kube)
    assert overlaps(events) == [], overlaps(events)[:5]
    assert token_regressions(events) == [], token_regressions(events)[:5]


def test_the_page_runs_as_written_on_the_local_cluster(kube: Kube, shell: Shell) -> None:
    recipe = for_the_local_cluster(page_steps())
    numbers = [step.number for step in recipe]
    assert numbers == sorted(numbers) and {2, 3, 4, 6, 7, 8, 9} <= set(numbers), numbers
    for step in recipe:
        try:
            out = shell.run(step.script, TIMEOUTS.get(step.number, 600.0), f"{step.number}. {step.title}")
        except AssertionError as exc:
            raise AssertionError(f"step {step.number} of the page failed: {exc}\n"
                                 f"the ResourceGroup's status: {json.dumps(status(kube))[:3000]}") from None
        if step.number == 2:
            assert (REPO / "dist" / f"rebalanser-operator-{rebalanser.__version__}.tgz").exists(), out
        elif step.number == 4:
            remember_identity(kube)
            assert "STATUS: deployed" in out and "WARNING: the operator" not in out, out
            assert "WARNING: operator.allowedEnsembles" not in out, out
        elif step.number == 6:
            check_owned(kube)
        elif step.number == 7:
            assert "refused access" in out and "refused without the credentials" in out, out
            assert listed_owners(out) == owners(status(kube)), f"rebalanser status disagrees with the status:\n{out}"
        elif step.number == 8:
            check_stable(kube)
        elif step.number == 9:
            for namespace in (TENANT_NS, OPERATOR_NS):
                assert _gone(kube, "namespace", namespace), f"namespace {namespace} left after the last step"
            with pytest.raises(KubeError):
                kube.helm("status", RELEASE, "-n", OPERATOR_NS)
            assert not OVERLAY.exists()
