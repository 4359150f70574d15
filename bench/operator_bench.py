"""Operator figures against the real ZooKeeper: reconcile time for a large ResourceGroup, status lag.

* ``reconcile``: :func:`rebalanser_operator.apply.reconcile.reconcile_group` called directly on a fresh
  group path with R resources (every resource znode created), then once more with nothing to change
  (the idempotent resync every drift check pays).
* ``status lag``: the operator's live status loop (:class:`rebalanser_operator.statusloop.StatusLoop`)
  runs with a recording stand-in for the Kubernetes API (patches are kept in memory, timed), over a
  group of real worker processes. After each join, lag = the instant the status patch shows the new
  membership, every resource assigned and the new ``lastRebalance`` — minus the instant the
  rebalance had completed, i.e. every resource worked on by its new owner, per the workers' evidence
  (and, separately, minus the instant the coordinator's ``G/state`` write reached a watcher).
"""

from __future__ import annotations

import asyncio
import copy
import threading
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient

from bench.fleet import Fleet, FleetConfig
from bench.scenarios import percentile
from tests.support.zk import ZkCluster

BODY = {"apiVersion": "rebalanser.io/v1alpha1", "kind": "ResourceGroup", "metadata": {"name": "bench"}}


class RecordingKube:
    """The Kubernetes side, in memory: status after each merge patch, with the monotonic patch time."""

    def __init__(self) -> None:
        self.lock = threading.Condition()
        self.status: dict[str, Any] = {}
        self.patches: list[tuple[int, dict[str, Any]]] = []

    def patch_status(self, namespace: str, name: str, patch: Mapping[str, Any]) -> bool:
        with self.lock:
            _merge(self.status, patch)
            self.patches.append((time.monotonic_ns(), copy.deepcopy(self.status)))
            self.lock.notify_all()
        return True

    def post_event(self, body: Mapping[str, Any], type: str, reason: str, message: str) -> None:
        return None

    def read_credentials(self, namespace: str, secret: str) -> Any:
        raise RuntimeError("no credentials in the benchmark")

    def publish_config(self, namespace: str, name: str, data: Mapping[str, str], owner: Any,
                       stamp: tuple[int, int] | None = None) -> None:
        return None

    def workload_rolling_out(self, namespace: str, kind: str, name: str) -> bool | None:
        return None

    def first_patch(self, predicate: Any, timeout: float) -> int | None:
        """Monotonic instant of the first recorded status satisfying ``predicate`` (waits for it)."""
        deadline = time.monotonic() + timeout
        with self.lock:
            seen = 0
            while True:
                for ts, status in self.patches[seen:]:
                    try:
                        if predicate(status):
                            return ts
                    except (KeyError, TypeError):
                        pass
                seen = len(self.patches)
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.lock.wait(min(left, 0.1))


def _merge(target: dict[str, Any], patch: Mapping[str, Any]) -> None:
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


def bench_reconcile(admin: KazooClient, resources: int, repeats: int, log: Any) -> dict[str, Any]:
    from rebalanser.config import GroupConfig
    from rebalanser_operator.apply.reconcile import OwnerMarker, group_acl, reconcile_group

    created, resync = [], []
    names = {f"orders-{i}" for i in range(resources)}
    for i in range(repeats):
        path = f"/bench-operator/rg-{uuid.uuid4().hex[:8]}"
        owner = OwnerMarker("bench", f"rg{i}", uuid.uuid4().hex)
        config = GroupConfig.from_json({"algorithm": "ResourceBarrier", "minIntervalSeconds": 1})
        started = time.monotonic()
        result = reconcile_group(admin, path, desired=names, config=config, acl=group_acl(None), owner=owner)
        created.append(time.monotonic() - started)
        if result.created != resources:
            raise RuntimeError(f"reconcile created {result.created} of {resources}")
        started = time.monotonic()
        reconcile_group(admin, path, desired=names, config=config, acl=group_acl(None), owner=owner)
        resync.append(time.monotonic() - started)
        admin.delete(path, recursive=True)
    out = {
        "resources": resources, "repeats": repeats,
        "create_s": [round(x, 3) for x in created], "create_p50_s": round(percentile(created, 50) or 0, 3),
        "create_max_s": round(max(created), 3),
        "resync_s": [round(x, 3) for x in resync], "resync_p50_s": round(percentile(resync, 50) or 0, 3),
    }
    log(f"    reconcile {resources} resources: created in {', '.join(f'{x:.2f}s' for x in created)}; "
        f"no-op resync {', '.join(f'{x:.2f}s' for x in resync)}")
    return out


def bench_status_lag(cluster: ZkCluster, admin: KazooClient, log_dir: Path, rounds: int, log: Any) -> dict[str, Any]:
    from rebalanser_operator.apply.actions import apply_spec
    from rebalanser_operator.runtime import LoopOptions, OperatorContext
    from rebalanser_operator.statusloop import StatusLoop
    from rebalanser_operator.tenancy import PathRoots, Tenancy

    resources, members = 100, 3
    log_dir.mkdir(parents=True, exist_ok=True)
    kube = RecordingKube()
    tenancy = Tenancy(path_roots=PathRoots.parse(["/bench-operator"]))  # its groups live outside /rebalanser
    ctx = OperatorContext(kube=kube, options=LoopOptions(), tenancy=tenancy)
    path = f"/bench-operator/status-{uuid.uuid4().hex[:8]}"
    rt = ctx.group("bench", "status", uuid.uuid4().hex)
    spec = {"zookeeper": {"connect": cluster.hosts, "path": path, "sessionTimeoutSeconds": 2},
            "resourceSets": [{"prefix": "r", "count": resources}],
            "rebalance": {"minIntervalSeconds": 1, "maxIntervalSeconds": 2, "adaptive": False}}
    apply_spec(ctx, rt, spec, generation=1, body=BODY)
    state_seen: dict[int, int] = {}

    def on_state(data: bytes | None, stat: Any, *_: Any) -> None:
        import json

        try:
            generation = int(json.loads(data or b"{}").get("generation", 0))
        except ValueError:
            return
        state_seen.setdefault(generation, time.monotonic_ns())

    admin.DataWatch(f"{path}/state", on_state)
    stop = threading.Event()
    loop = StatusLoop(ctx, rt, initial_status={})
    thread = threading.Thread(target=lambda: asyncio.run(loop.run(should_stop=stop.is_set)), daemon=True)
    thread.start()
    fleet = Fleet(FleetConfig(impl="rebalanser", hosts=cluster.hosts, group=path, session_timeout=2.0,
                              min_interval=0.5, log_dir=log_dir))
    lags: list[float] = []
    state_lags: list[float] = []
    try:
        ids = [f"s{i}" for i in range(members)]
        for member in ids:
            fleet.spawn([member]).ready.wait(60)
        if not fleet.wait_settled(resources, set(ids), 60):
            raise RuntimeError("status-lag group did not settle")
        for i in range(rounds):
            time.sleep(1.5)  # beyond the patch rate limit: the worst case, not a warm wait
            member = f"x{i}"
            fleet.spawn([member])
            current = set(fleet.members())
            if not fleet.wait_settled(resources, current, 60):
                raise RuntimeError("status-lag group did not settle after a join")
            joined = fleet.ledger.sessions[member][1]
            completed, _ = fleet.ledger.coverage_ns(joined)
            generation = max(state_seen) if state_seen else 0
            size = len(current)

            def shows(s: dict[str, Any], n: int = size, g: int = generation) -> bool:
                rebalance = int(s.get("lastRebalance", {}).get("generation", 0))
                return bool(s["members"] == n and s["assigned"] == resources and rebalance >= g)

            shown = kube.first_patch(shows, 15)
            if shown is None:
                raise RuntimeError("the status never showed the rebalance")
            lags.append(max(0.0, (shown - completed) / 1e9))
            state_lags.append(max(0.0, (shown - state_seen.get(generation, completed)) / 1e9))
    finally:
        fleet.stop_all()
        stop.set()
        rt.wake()
        thread.join(15)
        ctx.close()
        try:
            admin.delete(path, recursive=True)
        except Exception:
            pass
    log(f"    status lag after a rebalance: {', '.join(f'{x:.2f}s' for x in lags)} "
        f"(from the G/state write: {', '.join(f'{x:.2f}s' for x in state_lags)})")
    return {
        "members": members, "resources": resources, "rounds": rounds,
        "lag_s": [round(x, 3) for x in lags], "lag_p50_s": round(percentile(lags, 50) or 0, 3),
        "lag_max_s": round(max(lags), 3) if lags else None,
        "lag_from_state_s": [round(x, 3) for x in state_lags],
        "loop_options": {"coalesce": 0.5, "min_patch_interval": 1.0},
    }
