"""The claim book alone: how long one session takes to claim, re-take and release many resources.

    python -m bench.claimbook [--claims 5000] [--runs 3] [--hosts HOST:PORT] [--profile claim|release]
                              [--plain-kazoo]

Starts its own standalone ZooKeeper (the benchmark's server) unless ``--hosts`` names one. Each run
uses a fresh session and a fresh group path: claim every resource (``ClaimBook.claim``), claim them
again (the re-take of remembered claims: verified on the current connection, as a member's are
between reconnections), release them all. The session is made as a member's is
(``rebalanser.session.make_client``: buffered reads, handshakes numbered for the verification). Each
step's wall-clock and CPU seconds (the process's, all threads). Prints one JSON line per run and a
summary with the load average before and after, since the machine these run on is shared.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kazoo.client import KazooClient
from rebalanser.claims import ClaimBook
from rebalanser.paths import GroupPaths

from bench.zkserver import start_standalone

if TYPE_CHECKING:
    from rebalanser.claimcheck import Verified  # absent from older libraries (bench/compare.py)


def _timed(fn: Callable[[], object], profile: cProfile.Profile | None) -> tuple[float, float]:
    """Wall-clock seconds, and this process's CPU seconds (all its threads: kazoo's too, which the
    load of a shared machine affects far less than the wall clock)."""
    start, cpu = time.perf_counter(), time.process_time()
    if profile is not None:
        profile.enable()
    fn()
    if profile is not None:
        profile.disable()
    return time.perf_counter() - start, time.process_time() - cpu


def _member_client(hosts: str) -> tuple[KazooClient, Verified | None]:
    """The client a member of the installed library makes (``rebalanser.session.make_client``: buffered
    reads, handshakes numbered) and its claims' verification per connection; an older library without
    that verification (bench/compare.py runs one) gets none, as its members had none."""
    from rebalanser.options import Options
    from rebalanser.session import handshakes, make_client

    zk = make_client(Options(hosts, "/bench-claimbook", session_timeout=20.0))
    try:
        from rebalanser.claimcheck import Verified as verification
    except ImportError:
        return zk, None
    shakes = handshakes(zk)
    return zk, verification(lambda: shakes.connection)


def one_run(hosts: str, claims: int, profile: str | None, plain: bool = False) -> dict[str, float]:
    zk, verified = (KazooClient(hosts=hosts, timeout=20.0), None) if plain else _member_client(hosts)
    zk.start(timeout=30)
    root = f"/bench-claimbook/{uuid.uuid4().hex[:8]}"
    paths = GroupPaths(root)
    zk.ensure_path(paths.owners)
    book = ClaimBook(zk, paths, "m-0") if verified is None else ClaimBook(zk, paths, "m-0", verified=verified)
    member = zk.create(f"{root}/clients/bench-member", ephemeral=True, makepath=True)
    book.reset(zk.client_id[0], member)  # releases are fenced by the member node, as a member's are
    names = [f"r{i:06d}" for i in range(claims)]
    lost: list[str] = []
    book.on_lost = lambda resource, _token: lost.append(resource)
    prof = {step: cProfile.Profile() if profile == step else None for step in ("claim", "retake", "release")}
    out: dict[str, float] = {}
    result = None

    def claim() -> None:
        nonlocal result
        result = book.claim(names)

    out["claim_s"], out["claim_cpu_s"] = _timed(claim, prof["claim"])
    assert result is not None and len(result.claimed) == claims, "every claim taken"
    out["retake_s"], out["retake_cpu_s"] = _timed(lambda: book.claim(names), prof["retake"])
    out["release_s"], out["release_cpu_s"] = _timed(lambda: book.release(names), prof["release"])
    assert not zk.get_children(paths.owners), "every claim released"
    assert not lost, f"no claim reported lost: {lost[:5]}"
    zk.delete(root, recursive=True)
    zk.stop()
    zk.close()
    for step, p in prof.items():
        if p is not None:
            pstats.Stats(p).sort_stats("cumulative").print_stats(30)
            pstats.Stats(p).sort_stats("tottime").print_stats(20)
            del step
    return out


STEPS = ("claim", "retake", "release")


def measure(hosts: str, claims: int, runs: int) -> dict[str, Any]:
    """What ``make bench`` reports: ``runs`` runs at ``claims`` claims, each step's p50 (ms) and every run,
    with the load average before and after."""
    load_before = os.getloadavg()
    samples = [one_run(hosts, claims, None) for _ in range(runs)]
    out: dict[str, Any] = {"claims": claims, "runs": [{k: round(v, 4) for k, v in r.items()} for r in samples],
                           "load_before": [round(x, 2) for x in load_before],
                           "load_after": [round(x, 2) for x in os.getloadavg()]}
    for step in STEPS:
        values = sorted(r[f"{step}_s"] for r in samples)
        out[f"{step}_p50_ms"] = round(1000 * values[(len(values) - 1) // 2], 1)
    return out


def markdown_lines(result: dict[str, Any] | None) -> list[str]:
    """The claim book's section of docs/benchmarks.md, each figure beside its floor (bench/floor.py)."""
    if not result:
        return []
    lines = ["", "## The claim book: one session claims, re-takes and releases R resources", ""]
    if result.get("error"):
        return [*lines, f"- not measured: {result['error']}", ""]
    ratios = result.get("x_floor", {})
    loads = f"{result['load_before'][0]:.1f} before, {result['load_after'][0]:.1f} after"
    lines += [
        "`python -m bench.claimbook` in the harness's process, against the bench's server: one session "
        "(the library's buffered connection) claims every resource (`ClaimBook.claim`), claims them again (the "
        "re-take of claims it holds), then releases them all; p50 of the runs, every run in "
        "`bench/results.json`. `x floor`: divided by one plain client creating (claim) or deleting "
        "(release) as many ephemeral znodes (see ZooKeeper's floor above). A re-take writes nothing: "
        f"it has no floor. {len(result['runs'])} runs, load average {loads}.", "",
        "| R | claim | x floor | re-take | release | x floor |", "|---|---|---|---|---|---|",
        f"| {result['claims']:,} | {result['claim_p50_ms']:.0f} ms | {ratios.get('claim', '-')} "
        f"| {result['retake_p50_ms']:.1f} ms | {result['release_p50_ms']:.0f} ms | {ratios.get('release', '-')} |",
        ""]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--claims", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--hosts", default="")
    parser.add_argument("--profile", choices=("claim", "retake", "release"), default=None)
    parser.add_argument("--plain-kazoo", action="store_true",
                        help="kazoo's own connection (message by message) instead of the library's buffered one, "
                             "and no claim verified (every re-take reads)")
    args = parser.parse_args()
    cluster = None
    hosts = args.hosts
    if not hosts:
        cluster = start_standalone(Path(tempfile.mkdtemp(prefix="bench-claimbook-")))
        hosts = cluster.hosts
    try:
        load_before = os.getloadavg()
        runs = []
        for _ in range(args.runs):
            run = one_run(hosts, args.claims, args.profile, args.plain_kazoo)
            runs.append(run)
            print(json.dumps({k: round(v, 3) for k, v in run.items()}), flush=True)
        load_after = os.getloadavg()
        summary = {
            "claims": args.claims,
            "load_before": [round(x, 1) for x in load_before],
            "load_after": [round(x, 1) for x in load_after],
            **{k: sorted(round(r[k], 3) for r in runs) for k in runs[0]},
        }
        print(json.dumps(summary), flush=True)
    finally:
        if cluster is not None:
            cluster.stop()


if __name__ == "__main__":
    main()
