"""Targets (met/missed) and the markdown report, from ``bench/results.json``'s structure."""

from __future__ import annotations

from typing import Any

from bench.assignment_bytes import markdown_lines as bytes_lines
from bench.assignment_bytes import targets as bytes_targets
from bench.claimbook import markdown_lines as claimbook_lines
from bench.coldstart import markdown_lines as coldstart_lines
from bench.coldstart import targets as coldstart_targets
from bench.failover import markdown_lines as failover_lines
from bench.failover import targets as failover_targets
from bench.floor import markdown_lines as floor_lines
from bench.scalestats import markdown_lines as replicas_scale_lines
from bench.split import markdown_lines as split_lines

FAULT_TITLES = {
    "join": "join", "leave": "graceful leave", "kill": "kill -9 member", "kill-coordinator": "kill -9 coordinator",
}


#: The figures bench.figures renders into docs/figures (file name -> caption).
FIGURE_TITLES = {
    "bench-latency.svg": "Rebalance latency by group size and algorithm, kazoo beside",
    "bench-movement.svg": "Resources moved against the minimum",
    "bench-writes.svg": "ZooKeeper writes against members + moved",
}


def _cells(results: dict[str, Any], impl: str, algorithm: str | None = None) -> list[dict[str, Any]]:
    out = []
    for cell in results.get("cells", []):
        c = cell["cell"]
        if c["impl"] == impl and (algorithm is None or c["algorithm"] == algorithm):
            out.append(cell)
    return out


def _find(results: dict[str, Any], impl: str, algorithm: str | None, n: int, r: int) -> dict[str, Any] | None:
    for cell in _cells(results, impl, algorithm):
        if cell["cell"]["members"] == n and cell["cell"]["resources"] == r:
            return cell
    return None


def _fault(cell: dict[str, Any] | None, fault: str) -> dict[str, Any] | None:
    if cell is None:
        return None
    summary = cell.get("summary", {}).get(fault)
    return summary if summary and summary.get("p50_ms") is not None else None


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value / 1000:.2f} s" if value >= 10_000 else f"{value:.0f} ms"


def _target(name: str, met: bool | None, value: str, detail: str = "") -> dict[str, Any]:
    return {"target": name, "met": met, "value": value, "detail": detail}


# Per rebalance, a few writes do not depend on the group's size: the fenced multis' epoch checks, the
# rebalance summary (G/state) and, for Global Barrier, G/barrier twice and the generation's marker
# directory. "Proportional" is checked as ops <= WRITE_SLOPE x (members + moved) + WRITE_FIXED.
WRITE_SLOPE, WRITE_FIXED = 4.0, 8
WRITE_DETAIL = {
    "resource-barrier": "bytes: see \"Bytes written per rebalance\" (lists over 256 names are chunked, so "
                        "a changed member costs its header and the chunks its moves touched)",
    "global-barrier": "each round writes every member's stop marker and assignment (they carry the "
                      "generation), and claims only for moved resources",
}


def _writes_targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Writes per rebalance grow with members + moved resources, not with all resources."""
    slopes: dict[str, list[tuple[float, int, int, str]]] = {}
    for cell in _cells(results, "rebalanser"):
        c = cell["cell"]
        for sample in cell.get("samples", []):
            if sample["ok"]:
                ops = sample["client"].get("requests", {}).get("write_ops", 0)
                slope = max(0, ops - WRITE_FIXED) / (sample["members_after"] + sample["moved"])
                slopes.setdefault(c["algorithm"], []).append((slope, c["members"], c["resources"], sample["fault"]))
    if not slopes:
        return [_target("ZooKeeper writes per rebalance ∝ members + moved", None, "not measured")]
    out = []
    for algorithm in ("resource-barrier", "global-barrier"):
        if algorithm in slopes:
            worst = max(slopes[algorithm])
            out.append(_target(
                f"ZooKeeper writes per rebalance ∝ members + moved ({algorithm})", worst[0] <= WRITE_SLOPE,
                f"write ops ≤ {WRITE_FIXED} + {worst[0]:.2f} x (members + moved) in every rebalance",
                f"worst: {worst[3]} N={worst[1]} R={worst[2]}; {WRITE_DETAIL[algorithm]}"))
    return out


def evaluate(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Each target of the issue, as measured (``met`` None: not measured in this run)."""
    targets: list[dict[str, Any]] = []
    main_n, main_r = 50, 10_000
    for algorithm in ("resource-barrier", "global-barrier"):
        cell = _find(results, "rebalanser", algorithm, main_n, main_r)
        interval_ms = (cell["cell"]["min_interval"] * 1000) if cell else 0.0
        for fault in ("join", "leave"):
            s = _fault(cell, fault)
            name = f"{fault} N=50 R=10,000 ({algorithm}): p50 ≤ min interval + 250 ms"
            if s is None:
                targets.append(_target(name, None, "not measured"))
                continue
            beyond = s["p50_ms"] - interval_ms
            value = f"p50 {s['p50_ms']:.0f} ms ({beyond:+.0f} ms vs the {interval_ms:.0f} ms interval)"
            targets.append(_target(name, beyond <= 250, value, f"p99 {s['p99_ms']:.0f} ms over {s['n']} runs"))
        session_ms = (cell["cell"]["session_timeout"] * 1000) if cell else 0.0
        for fault in ("kill", "kill-coordinator"):
            s = _fault(cell, fault)
            name = f"{FAULT_TITLES[fault]} N=50 R=10,000 ({algorithm}): p50 ≤ session timeout + 500 ms"
            if s is None:
                targets.append(_target(name, None, "not measured"))
                continue
            bound = session_ms + 500
            targets.append(_target(
                name, s["p50_ms"] <= bound,
                f"p50 {s['p50_ms']:.0f} ms, p99 {s['p99_ms']:.0f} ms (bound {bound:.0f} ms on the p50)",
                f"{s['n']} runs; session timeout {session_ms:.0f} ms"))
    # Movement: exactly the minimum, in every sample of every rebalanser cell.
    exact = total = 0
    for cell in _cells(results, "rebalanser"):
        for sample in cell.get("samples", []):
            if sample["ok"]:
                total += 1
                exact += sample["moved"] == sample["min_moved"]
    kazoo_ratio = []
    for cell in _cells(results, "kazoo"):
        for sample in cell.get("samples", []):
            if sample["ok"] and sample["min_moved"]:
                kazoo_ratio.append(sample["moved"] / sample["min_moved"])
    detail = ""
    if kazoo_ratio:
        detail = f"kazoo moved {min(kazoo_ratio):.1f}-{max(kazoo_ratio):.1f}x the minimum"
    targets.append(_target("movement exactly the minimum", total > 0 and exact == total if total else None,
                           f"{exact}/{total} rebalances at exactly the minimum", detail))
    targets += _writes_targets(results)
    # R = 100,000, N = 200.
    big = _find(results, "rebalanser", "resource-barrier", 200, 100_000)
    for fault in ("join", "leave"):
        s = _fault(big, fault)
        name = f"R=100,000 N=200 {fault}: rebalance complete ≤ 2 s"
        targets.append(_target(name, None, "not measured") if s is None else _target(
            name, s["p50_ms"] <= 2000, f"p50 {s['p50_ms']:.0f} ms, p99 {s['p99_ms']:.0f} ms", f"{s['n']} runs"))
    if big is not None and big.get("rss"):
        rss = big["rss"]["solo_max_mb"]
        targets.append(_target("R=100,000 N=200: worker RSS ≤ 150 MB", rss <= 150,
                               f"{rss:.0f} MB (largest one-member worker process, the coordinator included)",
                               f"{big['rss']['pack_max_mb']:.0f} MB for a process hosting "
                               f"{big['rss']['pack_max_members']} members"))
    else:
        targets.append(_target("R=100,000 N=200: worker RSS ≤ 150 MB", None, "not measured"))
    # One watch notification per coordinator loss.
    counts = []
    for cell in _cells(results, "rebalanser"):
        for sample in cell.get("samples", []):
            if sample["ok"] and sample["fault"] == "kill-coordinator":
                counts.append(sample["client"].get("watches", {}).get("members", 0))
    targets.append(_target(
        "one watch notification per coordinator loss", bool(counts) and max(counts) <= 1 if counts else None,
        f"membership notifications per coordinator loss: {min(counts)}-{max(counts)} over {len(counts)} losses"
        if counts else "not measured",
        "kazoo: every member's party watch fires (N-1 per loss)"))
    op = results.get("operator", {})
    rec = op.get("reconcile")
    if rec:
        targets.append(_target(f"operator: {rec['resources']:,} resources reconciled ≤ 3 s",
                               rec["create_max_s"] <= 3.0,
                               f"p50 {rec['create_p50_s']:.2f} s, max {rec['create_max_s']:.2f} s",
                               f"no-op resync p50 {rec['resync_p50_s']:.2f} s"))
    else:
        targets.append(_target("operator: 10,000 resources reconciled ≤ 3 s", None, op.get("error", "not measured")))
    lag = op.get("status_lag")
    if lag and lag.get("lag_max_s") is not None:
        targets.append(_target("operator: status lag after a rebalance ≤ 2 s", lag["lag_max_s"] <= 2.0,
                               f"p50 {lag['lag_p50_s']:.2f} s, max {lag['lag_max_s']:.2f} s",
                               f"{lag['rounds']} rebalances"))
    else:
        targets.append(_target("operator: status lag after a rebalance ≤ 2 s", None, op.get("error", "not measured")))
    targets.extend(coldstart_targets(results.get("coldstart")))
    targets.extend(bytes_targets(results.get("assignment_bytes")))
    targets.extend(operator_scale_targets(results.get("operator_scale")))
    targets.extend(failover_targets(results.get("failover")))
    return targets


def operator_scale_targets(rows: Any) -> list[dict[str, Any]]:
    """The 1,000-group targets, from the largest row ``bench.operator_idle`` measured."""
    rows = [r for r in rows if "groups" in r] if isinstance(rows, list) else []
    if not rows:
        return []
    row = max(rows, key=lambda r: r["groups"])
    n, load = f"{row['groups']:,}", f"load average {row.get('loadavg', '?')}"
    changes = row.get("membership_join_s", []) + row.get("membership_leave_s", [])
    return [
        _target(f"operator: {n} ResourceGroups synced ≤ 60 s after a bulk apply", row["synced_s"] <= 60.0,
                f"{row['synced_s']} s", load),
        _target(f"operator: idle CPU with {n} groups < 5 % of a core", row["idle_cores"] < 0.05,
                f"{row['idle_cores'] * 100:.1f} % of a core", f"over {row['idle_window_s']:.0f} s"),
        _target(f"operator: RSS with {n} groups ≤ 300 MB", row["rss_mb"] <= 300.0, f"{row['rss_mb']} MB"),
        _target(f"operator: a membership change in one of {n} groups in its status ≤ 2 s",
                bool(changes) and max(changes) <= 2.0 if changes else None,
                f"max {max(changes):.2f} s" if changes else "not measured",
                f"{len(changes)} changes (joins and leaves), every other group idle"),
    ]


# ---------------------------------------------------------------------------------------- markdown


def _num(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "-"
    if abs(value) >= 10_000:
        return f"{value / 1000:.0f}k"
    return f"{value:.{digits}f}"


def _kb(value: float | None) -> str:
    return "-" if value is None else f"{value / 1024:.0f} KiB"


def fault_table(results: dict[str, Any], n: int, r: int) -> list[str]:
    found = [("rebalanser RB", _find(results, "rebalanser", "resource-barrier", n, r)),
             ("rebalanser GB", _find(results, "rebalanser", "global-barrier", n, r)),
             ("kazoo SetPartitioner", _find(results, "kazoo", None, n, r))]
    columns = [(title, cell) for title, cell in found if cell is not None]
    if not columns:
        return []
    lines = [f"### N = {n} members, R = {r:,} resources", ""]
    for title, cell in columns:
        c = cell["cell"]
        extra = f" — **error:** {cell['error']}" if cell.get("error") else ""
        if cell.get("cut_short"):
            extra += f" — cut short ({cell['cut_short']})"
        if cell.get("loadavg"):
            load = cell["loadavg"]
            extra += (f"; load average {' '.join(f'{x:g}' for x in load['start'])} at its start ({load['at']}), "
                      f"{' '.join(f'{x:g}' for x in load['end'])} at its end")
        lines.append(f"- {title}: {cell.get('processes', '?')} processes, session timeout "
                     f"{c['session_timeout']:g} s, min interval {c['min_interval']:g} s, {c['repeats']} repeat(s), "
                     f"initial assignment settled in {cell.get('initial_settle_s', '?')} s{extra}")
    lines.append("")
    header = "| fault | metric | " + " | ".join(t for t, _ in columns) + " | kazoo ÷ RB |"
    lines += [header, "|" + "---|" * (len(columns) + 3)]
    kazoo = next((cell for t, cell in columns if t.startswith("kazoo")), None)
    ours = next((cell for t, cell in columns if t == "rebalanser RB"), None)
    metrics: list[tuple[str, str, Any]] = [
        ("latency p50", "p50_ms", _ms), ("latency p99", "p99_ms", _ms),
        ("moved (min)", "moved", None), ("resources restarted", "restarted", _num),
        ("write requests", "write_requests", _num), ("write ops", "write_ops", _num),
        ("bytes written", "write_bytes", _kb), ("read requests", "read_requests", _num),
        ("server requests (net of idle)", "server_requests_net", _num),
        ("watch notifications (membership)", "notifications", None),
        ("worker CPU-s", "cpu_s", lambda v: "-" if v is None else f"{v:.2f}"),
    ]
    for fault in ("join", "leave", "kill", "kill-coordinator"):
        if not any(_fault(cell, fault) for _, cell in columns):
            continue
        for label, key, fmt in metrics:
            row = [FAULT_TITLES[fault] if label == "latency p50" else "", label]
            for _, cell in columns:
                s = _fault(cell, fault)
                if s is None:
                    row.append("-")
                elif key == "moved":
                    row.append(f"{_num(s['moved'])} ({_num(s['min_moved'])})")
                elif key == "notifications":
                    row.append(f"{_num(s['notifications'])} ({_num(s['member_notifications'])})")
                else:
                    row.append(fmt(s.get(key)))
            kz = _fault(kazoo, "kill" if fault == "kill-coordinator" else fault)
            us = _fault(ours, fault)
            ratio = "-"
            if kz and us and key not in ("notifications",):
                denominator = us.get(key) or 0
                if denominator:
                    ratio = f"{(kz.get(key) or 0) / denominator:.1f}x"
            row.append(ratio)
            lines.append("| " + " | ".join(row) + " |")
    lines.append("")
    return lines


KAFKA_COLUMNS = (("Kafka KIP-848", "kafka-consumer"), ("Kafka cooperative-sticky", "kafka-cooperative"),
                 ("Kafka eager", "kafka-eager"))

KAFKA_KNOBS = """\
How each protocol is set up (T = the cell's session timeout; every member is a confluent-kafka
consumer of one topic with R partitions, one partition per resource; `bench/adapters/kafka_worker.py`):

- **Kafka eager**: the classic group protocol, `partition.assignment.strategy=range`;
  `session.timeout.ms` = T, `heartbeat.interval.ms` = T/3 (set by the consumer). Every rebalance
  revokes every partition of every member before the new assignment.
- **Kafka cooperative-sticky**: the classic protocol with `cooperative-sticky` (incremental: only
  the moved partitions are revoked, then assigned in a second round); the same timeouts.
- **Kafka KIP-848**: `group.protocol=consumer`; the broker computes the assignment (its default
  `uniform` assignor) and owns the session timeout and heartbeat interval: the broker's
  `group.consumer.session.timeout.ms` = T and `group.consumer.heartbeat.interval.ms` = T/3 (the
  client refuses them with this protocol).
- The broker: one KRaft node (broker and controller in one JVM, `-Xmx512m`) on loopback,
  `group.initial.rebalance.delay.ms=0`, `group.min.session.timeout.ms` lowered to allow T.
- rebalanser: `min_interval` as in the cell (the interval batches moves between live members; a
  departed member's resources do not wait for it), lease probe T/10. kazoo: `time_boundary` =
  `min_interval`.
- Every Kafka member learns of a rebalance on its next heartbeat (T/3); rebalanser's members are
  told by ZooKeeper watches. \"worked on\" for a Kafka member is the first pass of its poll loop
  after the partition is in its `assignment()` (the topic carries no records)."""


def side_by_side(results: dict[str, Any]) -> list[str]:
    """rebalanser, kazoo and Kafka's protocols at each size a Kafka cell ran, from the same run."""
    sizes = sorted({(c["cell"]["members"], c["cell"]["resources"]) for c in _cells(results, "kafka")},
                   key=lambda x: (x[1], x[0]))
    if not sizes:
        return []
    kafka = results.get("kafka", {})
    lines = ["## Side by side: rebalanser, kazoo and Kafka consumer groups", "",
             f"`make bench-kafka` (`python -m bench.run --kafka`). {kafka.get('broker', '')}; "
             f"{kafka.get('client', '')}. The Kafka cells ran in the same run as the others, back to back "
             "on the same shared 2-core machine (other agents' work ran meanwhile: the load averages are "
             "given per cell).", ""]
    lines += KAFKA_KNOBS.splitlines()
    for n, r in sizes:
        columns = [("rebalanser RB", _find(results, "rebalanser", "resource-barrier", n, r)),
                   ("rebalanser GB", _find(results, "rebalanser", "global-barrier", n, r)),
                   *[(title, _find(results, "kafka", protocol, n, r)) for title, protocol in KAFKA_COLUMNS],
                   ("kazoo", _find(results, "kazoo", None, n, r))]
        present = [(t, c) for t, c in columns if c is not None]
        lines += ["", f"### N = {n}, R = {r:,}, T = {present[0][1]['cell']['session_timeout']:g} s", "",
                  "| fault | metric | " + " | ".join(t for t, _ in present) + " |",
                  "|" + "---|" * (len(present) + 2)]
        for fault in ("join", "leave", "kill"):
            for label, key in (("latency p50", "p50_ms"), ("latency p99", "p99_ms"), ("moved (min)", "moved"),
                               ("restarted", "restarted")):
                row = [FAULT_TITLES[fault] if label == "latency p50" else "", label]
                for _, cell in present:
                    f = _fault(cell, fault)
                    if f is None:
                        row.append("-")
                    elif key == "moved":
                        row.append(f"{_num(f['moved'])} ({_num(f['min_moved'])})")
                    elif key == "restarted":
                        row.append(_num(f["restarted"]))
                    else:
                        row.append(_ms(f.get(key)))
                lines.append("| " + " | ".join(row) + " |")
        lines.append("")
        for title, cell in present:
            load = cell.get("loadavg", {})
            error = f" — **error:** {cell['error']}" if cell.get("error") else ""
            lines.append(f"- {title}: {cell['cell']['repeats']} repeat(s); load average "
                         f"{' '.join(f'{x:g}' for x in load.get('start', []))} at its start ({load.get('at', '?')}), "
                         f"{' '.join(f'{x:g}' for x in load.get('end', []))} at its end{error}")
    return [*lines, ""]


def markdown(results: dict[str, Any]) -> str:
    m = results.get("machine", {})
    cfg = results.get("config", {})
    lines = [
        "# Benchmarks",
        "",
        "Generated by `make bench` (`python -m bench.run`; `--quick` for a small grid; `make bench-kafka` "
        "adds Kafka consumer groups beside rebalanser and kazoo at N = 10, R = 1,000, and KIP-848 at N = 50; "
        "`make bench-compare REF=<ref>` runs another ref's library beside this one, into bench/before-after/). "
        "Raw numbers: `bench/results.json`. Do not edit by hand.",
        "",
        f"Run {results.get('started', '')}, {results.get('elapsed_s', 0):.0f} s in total.",
        "",
        "## Machine",
        "",
        f"- `nproc`: {m.get('nproc')}; CPU: {m.get('cpu_model')}; load average at start: "
        f"{' '.join(m.get('loadavg', []))}",
        f"- Python {m.get('python')}, kazoo {m.get('kazoo')}, ZooKeeper {m.get('zookeeper')} (standalone, "
        f"one server, loopback, `forceSync=no`, heap {cfg.get('zk_heap', '?')}), {m.get('java')}",
        "- `free -h`:",
        "",
        "```",
        m.get("free_h", ""),
        "```",
        "",
        "The two cores are shared with other engineers' test runs while the bench runs: numbers are noisy "
        "(load averages above 10 were seen during development runs). Compare rebalanser and kazoo "
        "within a run; they run back to back against the same ZooKeeper.",
        "",
        "## Targets",
        "",
        "| target | result | measured | notes |",
        "|---|---|---|---|",
    ]
    for t in results.get("targets", []):
        verdict = {True: "**met**", False: "**missed**", None: "not measured"}[t["met"]]
        lines.append(f"| {t['target']} | {verdict} | {t['value']} | {t['detail']} |")
    lines += ["", "## Figures", "", "Rendered from `bench/results.json` by `python -m bench.figures` (also at the end "
              "of `make bench`).", ""]
    for name, title in FIGURE_TITLES.items():
        lines += [f"![{title}](figures/{name})", ""]
    lines += ["## Rebalancing after membership changes", ""]
    lines += METHOD.splitlines()
    lines.append("")
    scales = sorted({(c["cell"]["members"], c["cell"]["resources"]) for c in results.get("cells", [])},
                    key=lambda x: (x[1], x[0]))
    for n, r in scales:
        lines += fault_table(results, n, r)
    lines += side_by_side(results)
    lines += split_lines(results.get("split"))
    lines += ["## Cost at rest and memory", "", "| cell | idle CPU per member | idle requests/s (server) | "
              "lease probes/s | pings/s | RSS one-member process | RSS multi-member process |",
              "|---|---|---|---|---|---|---|"]
    for cell in results.get("cells", []):
        idle = cell.get("idle_per_s", {})
        rss = cell.get("rss", {})
        lines.append(
            f"| {cell['name']} | {cell.get('idle_cpu_per_member_pct', '-')} % | "
            f"{idle.get('server', {}).get('packets_received', '-')} | "
            f"{idle.get('client', {}).get('lease_probes', 0)} | {idle.get('client', {}).get('ping', 0)} | "
            f"{rss.get('solo_max_mb', '-')} MB | "
            + (f"{rss['pack_max_mb']} MB ({rss['pack_max_members']} members) |" if rss.get("pack_max_members")
               else "- |"))
    lines += ["", "## Operator", ""]
    op = results.get("operator", {})
    rec = op.get("reconcile")
    if rec:
        lines.append(f"- `reconcile_group` with {rec['resources']:,} resources on a fresh group path (every "
                     f"resource znode created): {', '.join(f'{x:.2f} s' for x in rec['create_s'])}; the "
                     f"same call again with nothing to change: {', '.join(f'{x:.2f} s' for x in rec['resync_s'])}.")
    lag = op.get("status_lag")
    if lag:
        lines.append(f"- Status lag after a rebalance ({lag['members']}→{lag['members'] + lag['rounds']} "
                     f"real worker processes joining one at a time, {lag['resources']} resources, "
                     f"`StatusLoop` with its default coalesce 0.5 s / one patch per 1 s): "
                     f"{', '.join(f'{x:.2f} s' for x in lag['lag_s'])} after every resource was worked on by "
                     f"its new owner ({', '.join(f'{x:.2f} s' for x in lag['lag_from_state_s'])} after the "
                     "coordinator's `G/state` write reached a watcher).")
    if op.get("error"):
        lines.append(f"- **error:** {op['error']}")
    lines += floor_lines(results.get("floor"))
    lines += claimbook_lines(results.get("claimbook"))
    lines += coldstart_lines(results.get("coldstart"))
    lines += bytes_lines(results.get("assignment_bytes"))
    lines += operator_scale_lines(results.get("operator_scale"))
    lines += replicas_scale_lines(results.get("operator_replicas_scale"))
    lines += failover_lines(results.get("failover"))
    lines += ["", "## Grid: what ran and what was skipped", ""]
    for note in results.get("skipped", []):
        lines.append(f"- {note}")
    lines += ["", *NOTES.splitlines()]
    findings = results.get("findings", [])
    if findings:
        lines += ["", "## Profiling findings", ""]
        lines += [f"- {f}" for f in findings]
    return "\n".join(lines).rstrip() + "\n"


def operator_scale_lines(rows: Any) -> list[str]:
    if not isinstance(rows, list) or not rows:
        return []
    errors = [r["error"] for r in rows if "error" in r]
    rows = [r for r in rows if "groups" in r]
    lines = ["", "### Operator at scale", "",
             "One operator as a host process, a real API server and ZooKeeper, 20 resources per group, no "
             "workers but the probes (`python -m bench.operator_idle`; docs/operator.md, \"At scale\"). "
             "Membership → status: a real worker joins one group and leaves it while every other group is idle, "
             "from the change reaching a ZooKeeper watch to the status reaching a `kubectl get -w`.", "",
             "| groups | synced after the apply | idle CPU | RSS | membership → status (joins; leaves) "
             "| load average |",
             "|---|---|---|---|---|---|"]
    for row in rows:
        joins = ", ".join(f"{x:.2f}" for x in row.get("membership_join_s", []))
        leaves = ", ".join(f"{x:.2f}" for x in row.get("membership_leave_s", []))
        lines.append(f"| {row['groups']:,} | {row['synced_s']} s | {row['idle_cores'] * 100:.1f} % of a core | "
                     f"{row['rss_mb']} MB | {joins} s; {leaves} s | {row.get('loadavg', '?')} |")
    lines += [f"- **error:** {e}" for e in errors]
    return lines


METHOD = """\
Every cell starts its own group (fresh znodes) on one ZooKeeper server and real worker processes
(`bench/multiworker.py`: one or several members per process, each member its own ZooKeeper session).
rebalanser and kazoo's `SetPartitioner` (through `bench/adapters/kazoo_worker.py`) run with the same
session timeout, the same interval (`min_interval` = kazoo's `time_boundary` settle window) and the
same work loop.

- **latency**: from the membership change (join: the new member's `session connected` event; leave:
  SIGTERM; kill: SIGKILL) until every resource has been worked on by its post-change owner, read from
  the workers' JSON events (CLOCK_MONOTONIC `ts`). Resources whose owner never stopped count at once.
  p50/p99 are nearest-rank over the repeats: with fewer than 100 repeats, p99 is the maximum.
  Faults are spaced more than the interval apart, so no fault waits for the previous one.
- **moved (min)**: resources whose owner changed; in brackets the fewest moves any balanced
  assignment needs. **restarted**: resources stopped and started again (kazoo restarts everything,
  and so does Global Barrier when a resource moves between live members, even when the owner stays).
- **write requests / ops / bytes, read requests**: counted inside every worker process by wrapping
  kazoo's request submission (`ConnectionHandler._submit`): a `multi` is one request of several ops;
  bytes are the serialized requests. Pings and rebalanser's lease probes (one `sync` per member per
  T/10) are counted apart and excluded. **server requests (net of idle)**: the ZooKeeper server's own
  `mntr` `zk_packets_received` over the fault window, minus the idle rate measured before the faults.
- **watch notifications**: received by the workers (counted in kazoo's watch-event reader), all
  paths; in brackets those on membership paths (`G/clients`, `G/epoch`; kazoo: the party).
- **worker CPU-s**: user+system CPU of all worker processes (that existed before the fault) over the
  fault window, from `getrusage` inside the workers; includes idle background (see the cost at rest)."""

NOTES = """\
Members per process: one-member processes for the oldest members (the coordinator chain) and for
every member that is killed, joins or leaves; the others share processes of up to 25 members (each
a separate `Client` with its own ZooKeeper session and threads). Work is reported once per ownership
episode (the first unit of work after assignment, gated by `Client.owns` / the partitioner's own
check) so that 100,000 resources ticking 20 times a second do not turn the bench into a JSON-pipe
benchmark; the work loop wakes on assignment."""
