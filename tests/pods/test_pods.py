"""The operator and the workers as pods of the project's image, on the real cluster (``make cluster-up``).

One chart install and one set of worker pods serve the scenarios in file order (each waits for the
state it needs first). Evidence: the worker pods' own JSON logs (``kubectl logs``, ``--previous`` after
a restart) and the ResourceGroup's status; transcripts of ``kubectl get rg -w`` and the durations land
in ``.pod-e2e/``.
"""

from __future__ import annotations

import itertools
import json
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.pods.scene import (
    CHART,
    DOOMED,
    FULLNAME,
    GROUP,
    NS,
    OUT,
    OWN,
    RELEASE,
    RESTRICTED,
    SELECTOR,
    WORKERS,
    ZK_CONNECT,
    ZK_NAMESPACE,
    Bound,
    Scene,
    example,
    owners,
    ready_condition,
)
from tests.support.invariants import (
    balanced_counts,
    first_full_coverage,
    minimum_moved,
    overlaps,
    tick_gaps,
    token_regressions,
)
from tests.support.kube import KubeCluster
from tests.support.kubectl import Kube, wait_until
from tests.support.podcluster import IMAGE, IMAGE_REPOSITORY, IMAGE_TAG

pytestmark = [pytest.mark.pods, pytest.mark.timeout(900)]

BOUND = Bound.of_examples()
RESOURCES = example("resourcegroup.yaml")["spec"]["resourceSets"][0]["count"]
MIN_INTERVAL = float(example("resourcegroup.yaml")["spec"]["rebalance"]["minIntervalSeconds"])
MAX_INTERVAL = float(example("resourcegroup.yaml")["spec"]["rebalance"]["maxIntervalSeconds"])


def _gone(scene: Scene, *args: str) -> bool:
    return scene.kube.maybe_json("get", *args) is None


def _delete_namespace(scene: Scene, name: str, timeout: float = 180.0) -> None:
    """Deletes a namespace left by an earlier run; its ResourceGroups' finalizers are dropped first
    when no operator is left to release them (the documented last resort)."""
    if _gone(scene, "namespace", name):
        return
    for rg in scene.kube.json("get", "rg", "-n", name)["items"]:
        scene.kube.kubectl("patch", "rg", rg["metadata"]["name"], "-n", name, "--type=merge",
                           "-p", '{"metadata":{"finalizers":null}}', check=False)
    scene.kube.kubectl("delete", "namespace", name, "--wait=false", check=False)
    wait_until(lambda: _gone(scene, "namespace", name), timeout, f"namespace {name} left by an earlier run")


def _delete_release_leftovers(scene: Scene, release: str) -> None:
    """A release whose namespace was deleted leaves its cluster-scoped objects (helm's record went
    with the namespace)."""
    scene.kube.kubectl("delete", "clusterrole,clusterrolebinding", "-l", f"app.kubernetes.io/instance={release}",
                       "--ignore-not-found", check=False)


@pytest.fixture(scope="module")
def scene(kube: Kube) -> Iterator[Scene]:
    started = time.monotonic()
    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True)
    s = Scene(kube, OUT)
    if kube.helm("status", RELEASE, "-n", NS, check=False).returncode == 0:
        # a leftover of an earlier run, ResourceGroups and all: no uninstall check
        kube.helm("uninstall", RELEASE, "-n", NS, "--no-hooks", "--wait", "--timeout", "120s")
    for name in (DOOMED, OWN, NS):
        _delete_namespace(s, name)
    _delete_release_leftovers(s, OWN)
    s.tools.create()
    s.purge_groups(NS, DOOMED, OWN)
    s.namespace(NS, RESTRICTED)
    s.timed("setup", started)
    try:
        yield s
    finally:
        s.close()
        kube.kubectl("delete", "deployment", WORKERS, "-n", NS, "--ignore-not-found", check=False, timeout=120)
        try:
            _delete_namespace(s, NS)
            s.purge_groups(NS, DOOMED, OWN)
            _delete_release_leftovers(s, OWN)
        finally:
            s.tools.delete()
            print(f"\npod e2e durations (s): {json.dumps(s.durations)}")


def no_overlap(scene: Scene, namespace: str = NS) -> list[dict[str, Any]]:
    events = scene.logs[namespace].events()
    assert events, f"no worker events collected from {namespace} ({scene.logs[namespace].errors[-3:]})"
    assert overlaps(events) == [], overlaps(events)[:5]
    assert token_regressions(events) == [], token_regressions(events)[:5]
    return events


def reassigned_within(scene: Scene, resources: set[str], after: int, excluded: tuple[str, int] | None,
                      what: str) -> float:
    """Seconds from ``after`` (monotonic ns) until every resource was worked on again by someone else."""
    def covered() -> int | None:
        events = [e for e in scene.logs[NS].events() if excluded is None or (e["id"], e["_pid"]) != excluded]
        return first_full_coverage(events, resources, after)

    done = wait_until(covered, BOUND.seconds + 30,
                      f"{what}: {sorted(resources)} not all worked on again within {BOUND.seconds + 30:.0f}s", poll=1.0)
    latency = (int(done) - after) / 1e9
    assert latency <= BOUND.seconds, f"{what}: reassigned after {latency:.1f}s > documented bound {BOUND}"
    return latency


# ------------------------------------------------------------------------------------------- scenarios


def test_chart_installs_in_a_restricted_namespace(scene: Scene) -> None:
    started = time.monotonic()
    values = example("values.yaml")
    assert set(values) == {"image", "operator"} and set(values["image"]) == {"repository", "tag", "pullPolicy"}, (
        "examples/values.yaml must override only the image and the allowed ensemble")
    assert values["operator"] == {"allowedEnsembles": [ZK_CONNECT]}
    scene.helm_install(RELEASE, NS)
    scene.follow_operators()
    namespace = scene.kube.json("get", "namespace", NS)
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    (pod,) = scene.operator_pods()
    assert any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"]["conditions"]), pod["status"]
    container = pod["spec"]["containers"][0]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["status"]["containerStatuses"][0]["restartCount"] == 0
    assert all(e["name"] != "KUBECONFIG" for e in container.get("env", [])), "in-cluster configuration only"
    # The metrics, through the chart's Service, from another pod (cluster DNS + Service routing).
    url = f"http://{FULLNAME}-metrics.{NS}.svc.cluster.local:8080/metrics"
    metrics = wait_until(lambda: scene.tools.fetch(url), 60, f"no metrics at {url}")
    assert "rebalanser_operator_zookeeper_connections" in metrics
    log = scene.kube.kubectl("logs", "-n", NS, pod["metadata"]["name"]).stdout
    assert "starting: namespaces=" in log and "Traceback" not in log, log[-3000:]
    scene.timed("chart install", started)


def test_examples_reach_stable_with_the_printer_columns(scene: Scene) -> None:
    started = time.monotonic()
    scene.follow(NS)
    scene.apply_examples(NS)
    status = scene.stable(NS, 3)
    assert status["resources"] == RESOURCES and status["effectiveIntervalSeconds"] >= MIN_INTERVAL
    assert ready_condition(status)["status"] == "True"
    table = scene.kube.kubectl("get", "rg", "-n", NS).stdout.splitlines()
    assert re.split(r"\s+", table[0].strip()) == [
        "NAME", "ALGORITHM", "RESOURCES", "MEMBERS", "ASSIGNED", "COORDINATOR", "PHASE", "READY", "AGE"], table
    row = re.split(r"\s+", table[1].strip())
    assert row[:7] == [GROUP, "ResourceBarrier", str(RESOURCES), "3", str(RESOURCES), status["coordinator"],
                       "Stable"], table
    assert status["coordinator"] in scene.ready_workers(NS)
    no_overlap(scene)
    scene.timed("examples to Stable", started)


def test_scale_3_to_5_moves_the_minimum(scene: Scene) -> None:
    started = time.monotonic()
    before = scene.stable(NS, 3)
    generation = int(before["lastRebalance"]["generation"])
    with scene.kube.watch_json("get", "rg", GROUP, "-n", NS) as stream, \
            scene.kube.transcript(OUT / "transcript-scale.txt", "get", "rg", "-n", NS, "-w", "-o", "wide"):
        scene.kube.kubectl("scale", f"deployment/{WORKERS}", "-n", NS, "--replicas=5")
        after = scene.stable(NS, 5)
        versions = [v.obj.get("status") or {} for v in stream.snapshot()]
    # Every rebalance since the scale, in order, with the member count it produced.
    seen: dict[int, dict[str, Any]] = {generation: {"members": 3}}
    for st in [*versions, after]:
        last = st.get("lastRebalance") or {}
        if last.get("generation") is not None and int(last["generation"]) > generation:
            seen[int(last["generation"])] = {"members": int(st.get("members", 0)), "moved": last.get("moved")}
    gens = sorted(seen)
    assert gens == list(range(generation, gens[-1] + 1)), f"a rebalance was not seen in the status: {gens}"
    for prev, gen in itertools.pairwise(gens):
        n_before, n_after = seen[prev]["members"], seen[gen]["members"]
        held = dict(zip(map(str, range(n_before)), balanced_counts(RESOURCES, n_before), strict=True))
        new_members = set(held) | {f"new{i}" for i in range(n_after - n_before)}
        assert seen[gen]["moved"] == minimum_moved(held, new_members, RESOURCES), (
            f"rebalance {gen} ({n_before} -> {n_after} members) moved {seen[gen]['moved']}")
    assert after["lastRebalance"]["moved"] == seen[gens[-1]]["moved"]
    assert after["members"] == 5 and len(owners(after)) == 5
    no_overlap(scene)
    scene.timed("scale 3->5", started)


def test_deleted_and_killed_workers_are_reassigned_within_the_bound(scene: Scene) -> None:
    started = time.monotonic()
    status = scene.stable(NS, 5)
    by_owner = owners(status)
    victim, killed = sorted(by_owner)[:2]

    # Graceful: kubectl delete pod. The worker stops its resources and leaves; they move at once.
    t0 = time.monotonic_ns()
    instance = _instance(scene, victim)
    scene.kube.kubectl("delete", "pod", victim, "-n", NS, "--wait=false")
    latency = reassigned_within(scene, set(by_owner[victim]), t0, (victim, instance), f"deleted pod {victim}")
    wait_until(lambda: any(e["event"] == "stopped" and e["id"] == victim for e in scene.logs[NS].events()),
               60, f"{victim} never logged a graceful stop")
    scene.durations["reassigned after kubectl delete pod (s)"] = round(latency, 1)

    # SIGKILL of the worker's process (from the tools pod, which shares the node's PID namespace).
    status = scene.stable(NS, 5)
    by_owner = owners(status)
    assert killed in by_owner, f"{killed} owns nothing: {by_owner}"
    instance = _instance(scene, killed)
    t1 = time.monotonic_ns()
    pids = scene.tools.kill_worker(killed)
    assert len(pids) == 1, f"expected one worker process for {killed}, found {pids}"
    latency = reassigned_within(scene, set(by_owner[killed]), t1, (killed, instance), f"SIGKILLed {killed}")
    scene.durations["reassigned after SIGKILL (s)"] = round(latency, 1)

    def restarted() -> dict[str, Any] | None:
        pod = scene.kube.json("get", "pod", killed, "-n", NS)
        (cs,) = pod["status"]["containerStatuses"]
        return cs if cs["restartCount"] > instance and "running" in cs["state"] else None

    container = wait_until(restarted, 120, f"the kubelet did not restart {killed}'s container")
    assert container["lastState"]["terminated"]["exitCode"] == 137, container["lastState"]
    scene.logs[NS].fetch_previous(killed)
    events = no_overlap(scene)
    assert any(e["id"] == killed and e["_pid"] == instance and e["event"] == "tick" for e in events)
    assert not any(e["id"] == killed and e["_pid"] == instance and e["event"] == "stopped" for e in events), (
        "the killed instance cannot have stopped gracefully")
    scene.stable(NS, 5)
    no_overlap(scene)
    scene.timed("delete pod + SIGKILL", started)


def _instance(scene: Scene, pod: str) -> int:
    (container,) = scene.kube.json("get", "pod", pod, "-n", NS)["status"]["containerStatuses"]
    return int(container["restartCount"])


def _sample_through_replacement(scene: Scene, label: str, replace: Callable[[], object],
                                replaced: Callable[[list[dict[str, Any]]], bool]) -> dict[str, Any]:
    """Samples the ResourceGroup's status while ``replace`` swaps the operator pod, until ``replaced``
    holds for the operator pods and then 20 s more (the new operator has resumed and refreshed the
    status): every second, and every version the API server sends (``kubectl get -w``). Every sample
    must equal the Stable status from before: no field gone, Ready never False and its
    ``lastTransitionTime`` kept, the same coordinator and last rebalance."""
    baseline = scene.stable(NS, 5)
    ready_since = ready_condition(baseline)["lastTransitionTime"]
    samples: list[dict[str, Any]] = []

    def sample_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
        def step() -> bool:
            samples.append(scene.status())
            return predicate()
        wait_until(step, timeout, what, poll=1.0)

    with scene.kube.watch_json("get", "rg", GROUP, "-n", NS) as stream:
        replace()
        sample_until(lambda: replaced(scene.operator_pods()), 240,
                     f"{label}: the new operator pod did not become Ready")
        quiet_until = time.monotonic() + 20
        sample_until(lambda: time.monotonic() >= quiet_until, 60, "sampling")
        samples += [v.obj.get("status") or {} for v in stream.snapshot()]
    (OUT / f"operator-{label}-samples.json").write_text(json.dumps(samples, indent=1))
    for st in samples:
        missing = set(baseline) - set(st)
        assert not missing, f"{label}: status fields disappeared: {missing}"
        assert st["phase"] == "Stable" and st["members"] == 5, {k: st[k] for k in ("phase", "members", "message")}
        assert ready_condition(st)["status"] == "True", (label, ready_condition(st))
        assert ready_condition(st)["lastTransitionTime"] == ready_since, (label, ready_condition(st))
        assert st["coordinator"] == baseline["coordinator"] and st["lastRebalance"] == baseline["lastRebalance"]
    scene.durations[f"status samples during the operator {label}"] = len(samples)
    return baseline


def _ready_pods(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")
            and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))]


def test_operator_pod_replaced_or_upgraded_without_status_flapping(scene: Scene, kube_cluster: KubeCluster) -> None:
    """The operator pod deleted, then the chart upgraded to a new image tag (``helm upgrade``, the
    Deployment's Recreate strategy): the status never flaps through either, and the upgraded operator
    reconciles a spec change."""
    started = time.monotonic()
    (old,) = scene.operator_pods()

    def only_new_ready(pods: list[dict[str, Any]]) -> bool:
        others = [p for p in pods if p["metadata"]["name"] != old["metadata"]["name"]]
        return len(pods) == 1 and len(_ready_pods(others)) == 1

    baseline = _sample_through_replacement(
        scene, "replacement",
        lambda: scene.kube.kubectl("delete", "pod", old["metadata"]["name"], "-n", NS, "--wait=false"),
        only_new_ready)

    upgraded = f"{IMAGE_REPOSITORY}:{IMAGE_TAG}-upgrade"
    subprocess.run(["docker", "tag", IMAGE, upgraded], check=True, capture_output=True, timeout=60)
    kube_cluster.load_image(upgraded)

    def upgraded_ready(pods: list[dict[str, Any]]) -> bool:
        images = {c["image"] for p in pods for c in p["spec"]["containers"]}
        return images == {upgraded} and len(_ready_pods(pods)) == len(pods) == 1

    _sample_through_replacement(
        scene, "upgrade",
        lambda: scene.kube.helm("upgrade", RELEASE, str(CHART), "-n", NS, "--reuse-values",
                                "--set", f"image.tag={IMAGE_TAG}-upgrade", timeout=120),
        upgraded_ready)
    # The upgraded operator takes over: it reconciles a spec change and mirrors the rebalance that follows.
    scene.kube.kubectl("patch", "rg", GROUP, "-n", NS, "--type=merge",
                       "-p", json.dumps({"spec": {"resources": ["orders-extra"]}}))
    def reconciled() -> dict[str, Any] | None:
        st = scene.stable(NS, 5)
        return st if st["resources"] == RESOURCES + 1 else None

    after = wait_until(reconciled, 120, "the upgraded operator did not reconcile the added resource")
    assert int(after["lastRebalance"]["generation"]) > int(baseline["lastRebalance"]["generation"])
    assert after["observedGeneration"] == scene.rg()["metadata"]["generation"]
    no_overlap(scene)
    scene.timed("operator pod replaced and upgraded", started)


def _zookeeper_leader(scene: Scene) -> str:
    pods = scene.kube.json("get", "pods", "-n", ZK_NAMESPACE)["items"]
    assert pods, "no ZooKeeper pods"
    for pod in pods:
        if scene.tools.zookeeper_mode(pod["status"].get("podIP", "")) == "leader":
            return str(pod["metadata"]["name"])
    return str(sorted(p["metadata"]["name"] for p in pods)[0])


def test_zookeeper_pod_deleted_and_the_group_keeps_working(scene: Scene) -> None:
    started = time.monotonic()
    status = scene.stable(NS, 5)
    resources = {r for rs in owners(status).values() for r in rs}
    victim = _zookeeper_leader(scene)
    uid = scene.kube.json("get", "pod", victim, "-n", ZK_NAMESPACE)["metadata"]["uid"]
    t0 = time.monotonic_ns()
    scene.kube.kubectl("delete", "pod", victim, "-n", ZK_NAMESPACE, "--wait=false")

    def back() -> bool:  # the StatefulSet's new pod of the same name, Ready
        pod = scene.kube.maybe_json("get", "pod", victim, "-n", ZK_NAMESPACE)
        return pod is not None and pod["metadata"]["uid"] != uid and any(
            c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", []))

    wait_until(back, 240, f"ZooKeeper pod {victim} did not come back Ready")
    until = max(time.monotonic_ns(), t0 + int(30e9))
    wait_until(lambda: time.monotonic_ns() >= until + int(3e9), 60, "window")
    events = no_overlap(scene)
    gaps = tick_gaps(events, resources, t0, until)
    worst = max(gaps.values()) / 1e9
    assert worst <= BOUND.seconds, f"a resource went {worst:.1f}s without work: {gaps}"
    scene.durations[f"longest pause of a resource after deleting {victim} (s)"] = round(worst, 1)
    scene.stable(NS, 5)
    scene.timed("ZooKeeper pod deleted", started)


def test_rollout_restart_batches_rebalances(scene: Scene) -> None:
    started = time.monotonic()
    scene.stable(NS, 5)
    # The interval must have room to rise: wait for the churn of earlier scenarios to decay.
    wait_until(lambda: scene.status()["effectiveIntervalSeconds"] < MAX_INTERVAL, 180,
               "effectiveIntervalSeconds did not decay below the maximum")
    before = scene.stable(NS, 5)
    old_pods = set(scene.ready_workers(NS))
    generation = int(before["lastRebalance"]["generation"])
    with scene.kube.watch_json("get", "rg", GROUP, "-n", NS) as stream, \
            scene.kube.transcript(OUT / "transcript-rollout.txt", "get", "rg", "-n", NS, "-w", "-o", "wide"):
        scene.kube.kubectl("rollout", "restart", f"deployment/{WORKERS}", "-n", NS)
        scene.kube.kubectl("rollout", "status", f"deployment/{WORKERS}", "-n", NS, "--timeout=420s", timeout=450)
        def on_new_pods() -> dict[str, Any] | None:
            st = scene.stable(NS, 5)
            return None if set(owners(st)) & old_pods else st

        after = wait_until(on_new_pods, 240, "the group did not become Stable on the new pods")
        intervals = [float((v.obj.get("status") or {}).get("effectiveIntervalSeconds", 0)) for v in stream.snapshot()]
    assert max(intervals) > before["effectiveIntervalSeconds"], f"interval never rose: {intervals}"
    assert max(intervals) == MAX_INTERVAL, intervals
    rebalances = int(after["lastRebalance"]["generation"]) - generation
    # Each departed pod's resources are handed out at once (at most one write per departure: orphans never
    # wait); the joins' moves between live members are what the interval batches. Unbatched, 5 departures
    # and 5 joins would make at least 10 rebalances.
    assert 0 < rebalances < 2 * len(old_pods), f"{rebalances} rebalances for {len(old_pods)} pods restarted"
    scene.durations["rollout restart: rebalances for 5 pods"] = rebalances
    no_overlap(scene)
    scene.timed("rollout restart", started)


def test_namespace_deletion_completes_and_removes_the_znodes(scene: Scene) -> None:
    """Two namespaces with a ResourceGroup and running workers, deleted at once: one served by the
    operator of namespace rb-pods (cluster-wide ResourceGroup permissions outlive the namespace's
    RoleBindings), one with an operator of its own (the chart's default: it serves its release
    namespace, and releases the groups on its way out)."""
    started = time.monotonic()
    scene.namespace(DOOMED, RESTRICTED)
    scene.namespace(OWN, RESTRICTED)
    scene.helm_install(RELEASE, NS, "--set", f"rbac.watchNamespaces={{{NS},{DOOMED}}}")
    scene.helm_install(OWN, OWN)
    members: dict[str, set[str]] = {}
    for namespace in (DOOMED, OWN):
        scene.follow(namespace)
        scene.apply_examples(namespace)
        scene.kube.kubectl("scale", f"deployment/{WORKERS}", "-n", namespace, "--replicas=2")
    for namespace in (DOOMED, OWN):
        scene.stable(namespace, 2)
        group = scene.zk_status(namespace)
        assert group["exists"] and len(group["members"]) == 2, group
        members[namespace] = set(group["members"])
    t0 = time.monotonic()
    for namespace in (DOOMED, OWN):
        scene.kube.kubectl("delete", "namespace", namespace, "--wait=false")
    for namespace in (DOOMED, OWN):
        def gone(ns: str = namespace) -> bool:
            return _gone(scene, "namespace", ns)

        def left(ns: str = namespace) -> str:
            return (f"namespace {ns} still there {time.monotonic() - t0:.0f}s after the delete: "
                    f"{scene.kube.kubectl('get', 'rg,pods', '-n', ns, check=False).stdout}")

        wait_until(gone, max(1.0, 120 - (time.monotonic() - t0)), left)
        scene.durations[f"namespace deletion of {namespace} (s)"] = round(time.monotonic() - t0, 1)
    for namespace in (DOOMED, OWN):
        group = scene.zk_status(namespace)
        assert group["exists"] is False, f"the znodes of {namespace}/{GROUP} remain: {group}"
        scene.logs[namespace].stop()
        events = no_overlap(scene, namespace)
        stopped = {e["id"] for e in events if e["event"] == "stopped"}
        assert stopped >= members[namespace], f"workers that did not leave gracefully: {members[namespace] - stopped}"
    _delete_release_leftovers(scene, OWN)
    scene.timed("namespace deletion", started)


def test_helm_uninstall_keeps_the_crd_and_resource_groups(scene: Scene) -> None:
    """A ResourceGroup remains: the chart's pre-delete check refuses the uninstall (the operator keeps
    running, its log names the group); with --no-hooks the operator goes and the CRD and the group stay."""
    started = time.monotonic()
    refused = scene.kube.helm("uninstall", RELEASE, "-n", NS, "--wait", "--timeout", "120s", timeout=180, check=False)
    assert refused.returncode != 0, refused.stdout
    check = scene.kube.kubectl("logs", f"job/{FULLNAME}-uninstall-check", "-n", NS, check=False)
    assert f"{NS}/{GROUP}" in check.stdout + check.stderr and "refusing to uninstall" in check.stdout + check.stderr
    assert scene.operator_pods(), "the refused uninstall removed the operator"
    scene.kube.helm("uninstall", RELEASE, "-n", NS, "--no-hooks", "--wait", "--timeout", "120s", timeout=180)
    wait_until(lambda: not scene.operator_pods(), 120, "operator pods still there after helm uninstall")
    assert _gone(scene, "deployment", FULLNAME, "-n", NS)
    assert _gone(scene, "service", f"{FULLNAME}-metrics", "-n", NS)
    assert _gone(scene, "clusterrole", f"{NS}-{FULLNAME}-scanning")
    assert not _gone(scene, "crd", "resourcegroups.rebalanser.io")
    rg = scene.rg()
    assert rg["status"]["phase"] == "Stable" and "rebalanser.io/finalizer" in rg["metadata"]["finalizers"]
    assert len(scene.kube.json("get", "pods", "-n", NS, "-l", SELECTOR)["items"]) == 5
    scene.timed("helm uninstall", started)

