"""The ``rebalanser`` command: ``worker`` (a member that simulates work on what it owns), ``status`` and
``group`` (:mod:`rebalanser.admin_cli`).

See the README (the worker CLI) for the options and the exit codes (:mod:`rebalanser.cli_args`). With
``--json`` every line on stdout is one event object carrying ``event``, ``id`` and ``ts``
(``time.monotonic_ns()`` taken when the event happens), a tick included. In addition to the contract's
events, ``error`` (with ``path`` and ``reason``) reports a value read from ZooKeeper that was rejected
as bad data and ignored; the worker goes on working. Without ``--json`` the output is meant for a
terminal or a pod's log: a line per change (assigned, revoked, role, session) and a summary every
``--summary-interval`` seconds, never a line per tick.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import FrameType
from typing import TYPE_CHECKING, Any, TextIO

from kazoo.exceptions import KazooException, NoAuthError
from kazoo.handlers.threading import KazooTimeoutError

from rebalanser import __version__, admin_cli
from rebalanser.cli_args import (
    EXIT_EXPIRED,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_NO_GROUP,
    EXIT_TERMINATED,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    OneLineParser,
    member_id,
    non_negative_seconds,
    port,
    positive_seconds,
)
from rebalanser.client import Client
from rebalanser.config import Algorithm
from rebalanser.credentials import PasswordFile, PasswordFileError, read_password
from rebalanser.errors import GroupDeletedError, GroupNotFoundError, InvalidInputError, RebalanserError
from rebalanser.handler import Handler
from rebalanser.metrics import Metrics, NoMetrics
from rebalanser.options import ExpiryPolicy, Options, default_member_id
from rebalanser.tls import TlsOptions
from rebalanser.worker_events import Notifications, emit_assigned

if TYPE_CHECKING:
    from rebalanser.status import GroupStatus

worker_log = logging.getLogger("rebalanser.worker")

SUMMARY_INTERVAL = 60.0  # seconds between two summary lines of the human output
CONNECT_TIMEOUT = 15.0  # seconds a command waits for a ZooKeeper server to answer


class EventLog:
    """One line per event, written atomically (several threads report events). With ``as_json`` every
    event is a line; otherwise ticks are only counted, and a summary line is printed every
    ``summary_interval`` seconds (:meth:`start_summaries`). A closed output (``worker | head``) calls
    ``on_closed`` once (the worker then leaves as on SIGTERM) and silences the rest."""

    def __init__(self, member_id: str, as_json: bool, out: TextIO = sys.stdout,
                 summary_interval: float = SUMMARY_INTERVAL) -> None:
        self._id, self._json, self._out = member_id, as_json, out
        self._lock = threading.Lock()
        self.on_closed: Callable[[], object] = lambda: None
        self._closed = False
        self._summary_interval = summary_interval
        self._owned: set[str] = set()
        self._ticks = 0
        self._done = threading.Event()

    def emit(self, event: str, ts: int | None = None, **fields: Any) -> None:
        record = {"event": event, "id": self._id, "ts": ts if ts is not None else time.monotonic_ns(), **fields}
        if self._json:
            self._write(json.dumps(record))
            return
        with self._lock:
            self._follow(record)
        if event != "tick":
            self._write(_human(record))

    def _follow(self, record: dict[str, Any]) -> None:
        event = record["event"]
        if event == "tick":
            self._ticks += 1
        elif event == "assigned":
            self._owned |= set(record["resources"])
        elif event == "revoked":
            self._owned -= set(record["resources"])

    def start_summaries(self) -> None:
        """Without ``--json``: a summary line every ``summary_interval`` seconds, until :meth:`close`."""
        if not self._json:
            threading.Thread(target=self._summaries, name="rebalanser-summary", daemon=True).start()

    def _summaries(self) -> None:
        while not self._done.wait(self._summary_interval):
            with self._lock:
                owned, ticks, self._ticks = sorted(self._owned), self._ticks, 0
            shown = ", ".join(owned[:8]) + (f", … (+{len(owned) - 8})" if len(owned) > 8 else "")
            noun = "resource" if len(owned) == 1 else "resources"
            self._write(f"[{self._id}] working on {len(owned)} {noun}{': ' + shown if owned else ''}; "
                        f"{ticks} units of work in the last {self._summary_interval:g} s")

    def close(self) -> None:
        self._done.set()

    def _write(self, line: str) -> None:
        with self._lock:
            if self._closed:
                return
            try:
                self._out.write(line + "\n")
                self._out.flush()
                return
            except (BrokenPipeError, ValueError):  # the reader went away (ValueError: the file was closed)
                self._closed = True
                _silence(self._out)
        self.on_closed()


def _silence(out: TextIO) -> None:
    """Points a closed standard output at /dev/null, so that nothing more fails on it (the flush at exit)."""
    if out is not sys.stdout:
        return
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def _human(record: dict[str, Any]) -> str:
    extras = " ".join(f"{k}={_shown(v)}" for k, v in record.items() if k not in ("event", "id", "ts"))
    return f"[{record['id']}] {record['event']} {extras}".rstrip()


def _shown(value: Any) -> str:
    return ",".join(map(str, value)) if isinstance(value, list) else str(value)


def event_log(member: str, args: argparse.Namespace, on_closed: Callable[[], object]) -> EventLog:
    log = EventLog(member, args.json, summary_interval=args.summary_interval)
    log.on_closed = on_closed
    return log


class SimulatedWork(Notifications, Handler):
    """Ticks once per owned resource every ``tick`` seconds, each only after ``owns`` passes."""

    def __init__(self, log: EventLog, tick: float, stop_behaviour: str = "normal", stop_delay: float = 0.0,
                 start_delay: float = 0.0) -> None:
        self.log, self.tick = log, tick
        self.stop_behaviour, self.stop_delay, self.start_delay = stop_behaviour, stop_delay, start_delay
        self.client: Client | None = None
        self._work_lock = threading.Lock()  # a unit of work and a revocation never interleave
        self._resources: dict[str, int] = {}
        self._halt = threading.Event()
        self.expired = False
        self.ended: Exception | None = None

    def on_assigned(self, resources: Mapping[str, int]) -> None:
        if self.start_delay:
            # Fault simulation: a slow start callback (the member's loop busy in it). The event says when
            # the library called it; the work on the resources begins once it returns.
            with self._work_lock:
                emit_assigned(self.log, resources)
            time.sleep(self.start_delay)
            with self._work_lock:
                self._resources.update(resources)
            return
        with self._work_lock:
            self._resources.update(resources)
            emit_assigned(self.log, resources)

    def on_revoked(self, resources: Sequence[str]) -> None:
        # Fault simulation for tests and chaos runs: slow, failing or hanging stop handlers.
        if self.stop_delay:
            time.sleep(self.stop_delay)
        if self.stop_behaviour == "hang":
            self._halt.wait()
        with self._work_lock:
            for resource in resources:
                self._resources.pop(resource, None)
            # the work has stopped either way: reported before a simulated failure, or the event stream
            # (the evidence the checks read) would show work on resources this worker no longer ticks
            self.log.emit("revoked", resources=list(resources))
            if self.stop_behaviour == "fail":
                raise RuntimeError("simulated stop failure")

    def halt_work(self) -> None:
        self._halt.set()

    def run(self, stop: threading.Event) -> None:
        assert self.client is not None
        while not stop.is_set() and not self._halt.is_set():
            with self._work_lock:
                for resource in list(self._resources):
                    ts = time.monotonic_ns()
                    # Checked at an instant after ts (the lease held at ts); the library's token, never a
                    # cached one: a resource whose stop callback hung may have been granted anew since.
                    token = self.client.token(resource)
                    if token is not None:
                        self.log.emit("tick", ts=ts, resource=resource, token=token)
            stop.wait(self.tick)


def worker_options(args: argparse.Namespace) -> Options:
    """The member's options from the worker's arguments (``InvalidInputError`` on a bad value)."""
    return Options(
        hosts=args.zk, group=args.group,
        member_id=args.id if args.id is not None else os.environ.get("POD_NAME") or default_member_id(),
        algorithm=Algorithm.parse(args.algorithm), session_timeout=args.session_timeout,
        min_interval=args.min_interval, expiry_policy=ExpiryPolicy(args.expiry_policy),
        stop_timeout=args.stop_timeout, departure_grace=args.departure_grace, initial_quiet=args.initial_quiet,
        credentials=_credentials(args), tls=tls_options(args), termination_log=args.termination_log or None,
        pod_namespace=_env("POD_NAMESPACE"), pod=_env("POD_NAME"), pod_uid=_env("POD_UID"),
        container=_env("REBALANSER_CONTAINER"), create_group=args.create_group,
        operator_id=_env("REBALANSER_ZK_OPERATOR_ID"), metrics=_metrics(args.metrics_port),
    )


SignalHandler = Callable[[int, FrameType | None], None]


def stop_on_signal(stop: threading.Event, then: Callable[[], object] = lambda: None) -> SignalHandler:
    """A signal handler that sets ``stop`` (then calls ``then``) from a thread of its own. Python runs a
    handler on the main thread between two bytecodes, which may be inside ``stop.wait()`` with the Event's
    lock held (its Condition re-takes the lock before it returns): ``stop.set()`` there waits for that lock
    forever, and the worker never exits on SIGTERM (nor may the handler log: the same holds for the
    logging lock)."""
    def handler(signum: int, _frame: FrameType | None) -> None:
        def graceful() -> None:
            worker_log.info("%s: stopping the resources and leaving the group", signal.Signals(signum).name)
            stop.set()
            then()
        threading.Thread(target=graceful, name="rebalanser-stop-signal", daemon=True).start()
    return handler


def while_starting(client: Client, stop: threading.Event) -> SignalHandler:
    """SIGTERM/SIGINT while ``client.start()`` runs. Before the member has joined, the worker ends at once
    (exit 143/130), also while kazoo is still connecting. Once it has joined, the start may still be
    reading the group's state and running the first start callbacks: the signal is then a graceful stop,
    as it is later on (the member stops its resources, leaves, and ``start()`` returns), and the worker
    writes ``stopped`` and exits 0."""
    graceful = stop_on_signal(stop, then=client.stop)

    def handler(signum: int, frame: FrameType | None) -> None:
        if client.has_joined:
            graceful(signum, frame)
            return
        raise KeyboardInterrupt() if signum == signal.SIGINT else _Terminated()
    return handler


def _on_signals(handler: SignalHandler) -> None:
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, handler)


def run_worker(args: argparse.Namespace) -> int:
    options = worker_options(args)
    stop = threading.Event()
    log = event_log(options.member_id, args, on_closed=stop.set)
    if args.api == "asyncio":
        return _run_asyncio_worker(options, log, args)
    work = SimulatedWork(log, args.tick, args.simulate_stop, args.simulate_stop_delay, args.simulate_start_delay)
    client = Client(options, work)
    work.client = client
    if args.simulate_oom:
        signal.signal(signal.SIGUSR1, lambda *_: threading.Thread(target=_exhaust_memory, daemon=True).start())
    _on_signals(while_starting(client, stop))
    with worker_group_errors():
        try:
            client.start(connect_timeout=args.connect_timeout)
        except BaseException:
            client.stop(timeout=options.stop_timeout + 10)  # releases whatever it holds, leaves the group
            if client.has_joined:  # e.g. its group deleted under its start: it ran, and its stream says so
                log.emit("stopped")
            raise
    _on_signals(stop_on_signal(stop))
    if not stop.is_set():
        warn_if_no_resources(client)
    log.start_summaries()
    work.run(stop)
    client.stop()
    log.emit("stopped")
    log.close()
    return _worker_exit(work)


def _worker_exit(work: SimulatedWork) -> int:
    """The exit code of a worker that ran: 3 after an expiry under 'shutdown', 5 when its group was deleted."""
    if work.ended is not None:
        print(f"rebalanser: {work.ended}", file=sys.stderr)
        return EXIT_NO_GROUP if isinstance(work.ended, GroupDeletedError) else EXIT_FAILED
    return EXIT_EXPIRED if work.expired else 0


@contextlib.contextmanager
def worker_group_errors() -> Iterator[None]:
    """A missing group named in the worker's own terms (its flag, not the library's option)."""
    try:
        yield
    except GroupNotFoundError as exc:
        raise GroupNotFoundError(str(exc).replace("Options.create_group", "--create-group")) from None


class _Terminated(Exception):
    """SIGTERM before the member joined."""


def warn_if_no_resources(client: Client) -> None:
    """One line when the group has no resources: the member waits with nothing assigned."""
    try:
        count = len(client.zk.get_children(client.paths.resources))
    except KazooException:
        return
    if not count:
        print(f"rebalanser: group {client.paths.root} has no resources yet: nothing is assigned until some are "
              "added (rebalanser group resources add)", file=sys.stderr)


def _run_asyncio_worker(options: Options, log: EventLog, args: argparse.Namespace) -> int:
    """The same worker on :class:`rebalanser.aio.Client`: the same events, from one event loop."""
    import asyncio

    from rebalanser.aio import worker

    work = worker.AsyncSimulatedWork(log, args.tick, args.simulate_stop, args.simulate_stop_delay,
                                      args.simulate_start_delay)
    log.on_closed = work.halt_work  # every event is emitted on the loop's thread
    if args.simulate_oom:
        signal.signal(signal.SIGUSR1, lambda *_: threading.Thread(target=_exhaust_memory, daemon=True).start())
    log.start_summaries()
    try:
        with worker_group_errors():
            expired = asyncio.run(worker.run(options, work, log, connect_timeout=args.connect_timeout))
    except worker.Interrupted as exc:
        raise KeyboardInterrupt() if exc.signum == signal.SIGINT else _Terminated() from None
    log.close()
    if work.ended is not None:
        print(f"rebalanser: {work.ended}", file=sys.stderr)
        return EXIT_NO_GROUP if isinstance(work.ended, GroupDeletedError) else EXIT_FAILED
    return EXIT_EXPIRED if expired else 0


def _exhaust_memory() -> None:
    """Fault simulation (``--simulate-oom``): allocates and touches memory without bound, so that the
    container's memory limit has the kernel OOM-kill this process."""
    hog = []
    while True:
        hog.append(bytearray(b"x" * (16 << 20)))


def _env(variable: str) -> str | None:
    """The pod and container recorded in the member node come from the downward API's environment:
    ``POD_NAMESPACE``, ``POD_NAME``, ``POD_UID``, and ``REBALANSER_CONTAINER`` (the container's name is no
    downward API field: the pod spec sets it as a plain value). Never guessed from the hostname."""
    return os.environ.get(variable) or None


def _metrics(number: int) -> Metrics:
    """Prometheus series served on port ``number`` in a registry of their own (the ``metrics`` extra); none for 0."""
    if not number:
        return NoMetrics()
    try:
        from prometheus_client import CollectorRegistry, start_http_server

        from rebalanser.prometheus import PrometheusMetrics
    except ImportError:
        raise SystemExit("--metrics-port needs the metrics extra: pip install 'rebalanser[metrics]'") from None
    registry = CollectorRegistry()
    start_http_server(number, registry=registry)
    return PrometheusMetrics(registry)


def _credentials(args: argparse.Namespace) -> tuple[str, str] | PasswordFile | None:
    """Digest credentials: ``--zk-user`` with ``--zk-password-file`` (re-read while the worker runs: a
    rotated Secret takes effect without a restart), or REBALANSER_ZK_USERNAME / REBALANSER_ZK_PASSWORD
    (fixed for the life of the process)."""
    user = args.zk_user or os.environ.get("REBALANSER_ZK_USERNAME")
    password_file = args.zk_password_file or os.environ.get("REBALANSER_ZK_PASSWORD_FILE")
    if password_file:
        if not user:
            raise InvalidInputError("--zk-password-file needs a user (--zk-user or REBALANSER_ZK_USERNAME)")
        source = PasswordFile(user, password_file, poll_interval=getattr(args, "zk_password_poll", 5.0),
                              previous_grace=getattr(args, "zk_previous_password_grace", 120.0))
        try:
            read_password(source.path)  # fail at start on a missing or empty file
        except PasswordFileError as exc:
            raise InvalidInputError(str(exc)) from exc
        return source
    password = os.environ.get("REBALANSER_ZK_PASSWORD")
    if not user and not password:
        return None
    if not user or not password:
        raise InvalidInputError("digest credentials need both a user and a password")
    return user, password


def tls_options(args: argparse.Namespace) -> TlsOptions | None:
    """TLS to ZooKeeper from ``--zk-tls*`` or REBALANSER_ZK_TLS* (flags win): a directory holding
    ``ca.crt``/``tls.crt``/``tls.key`` (a mounted TLS Secret), single files overriding it, or
    ``--zk-tls`` alone (the system's trust store, no client certificate). None: plain TCP."""
    env = os.environ.get
    directory = args.zk_tls_dir or env("REBALANSER_ZK_TLS_DIR")
    ca = args.zk_tls_ca or env("REBALANSER_ZK_TLS_CA")
    certificate = args.zk_tls_cert or env("REBALANSER_ZK_TLS_CERT")
    key = args.zk_tls_key or env("REBALANSER_ZK_TLS_KEY")
    verify_hostname = args.zk_tls_verify_hostname or _true(env("REBALANSER_ZK_TLS_VERIFY_HOSTNAME"))
    enabled = args.zk_tls or _true(env("REBALANSER_ZK_TLS"))
    if not (enabled or directory or ca or certificate or key):
        return None
    base = TlsOptions.from_directory(directory) if directory else TlsOptions()
    return TlsOptions(ca or base.ca, certificate or base.certificate, key or base.key, verify_hostname)


def _true(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def run_status(args: argparse.Namespace) -> int:
    from rebalanser.admin import connect
    from rebalanser.status import read_group_status

    with connect(args.zk, credentials=_credentials(args), tls=tls_options(args), timeout=args.connect_timeout) as zk:
        status = read_group_status(zk, args.group)
    if args.resource or args.member or args.pod:
        return _print_owners(status, args.resource or [], args.member or [], args.pod or [], as_json=args.json)
    if args.json:
        print(json.dumps(status.to_dict(), indent=None))
        return 0
    if not status.exists:
        raise GroupNotFoundError(f"group {status.path} does not exist (rebalanser group create makes it)")
    coordinator = status.coordinator if status.coordinator is not None else "(none)"
    print(f"group {status.path}: {len(status.members)} members, coordinator {coordinator}, "
          f"epoch {status.epoch}, generation {status.generation}")
    print(f"resources {len(status.resources)}, assigned {len(status.assigned)}, unassigned {len(status.unassigned)}")
    last = status.last_rebalance
    if last is not None:
        print(f"last rebalance: generation {last.generation}, started {last.started_at}, "
              f"completed {last.completed_at}, {last.duration_ms} ms, moved {last.moved}, "
              f"coordinator {last.coordinator}")
    for member in status.members:
        owned = status.assignments.get(member, [])
        shown = ", ".join(owned[:8]) + (f", … (+{len(owned) - 8})" if len(owned) > 8 else "")
        print(f"  {member:30s} {len(owned):6d}  {shown}")
    return 0


def owners(assignments: Mapping[str, Sequence[str]], resources: Sequence[str]) -> dict[str, str | None]:
    """Who owns each of ``resources`` in a full assignment (None: nobody)."""
    owner_of = {resource: member for member, owned in assignments.items() for resource in owned}
    return {resource: owner_of.get(resource) for resource in resources}


def pod_members(pods: Mapping[str, str], member_ids: Sequence[str], pod: str) -> list[str]:
    """The members that ``pod`` runs: those whose node records it, else a member whose id is ``pod``."""
    recorded = sorted(member for member, name in pods.items() if name == pod)
    return recorded or ([pod] if pod in member_ids else [])


def _print_owners(status: GroupStatus, resources: Sequence[str], members: Sequence[str], pods: Sequence[str],
                  *, as_json: bool) -> int:
    """``status --resource NAME`` / ``--member ID`` / ``--pod NAME``: answered from the group's own member
    and assignment znodes, complete however many resources there are (unlike a size-capped ResourceGroup
    status). Exit 1 when a named resource is unassigned or a named pod runs no member."""
    found = owners(status.assignments, resources)
    held = {member: sorted(status.assignments.get(member, [])) for member in members}
    of_pod = {pod: pod_members(status.pods, status.members, pod) for pod in pods}
    by_pod = {pod: {"members": ids, "resources": sorted(r for m in ids for r in status.assignments.get(m, []))}
              for pod, ids in of_pod.items()}
    if as_json:
        print(json.dumps({"path": status.path, "exists": status.exists, "owners": found, "members": held,
                          "pods": by_pod}))
    else:
        for resource, owner in found.items():
            print(f"{resource}\t{owner if owner is not None else '(unassigned)'}")
        for member, owned in held.items():
            print(f"{member}\t{len(owned)}\t{' '.join(owned)}")
        for pod, answer in by_pod.items():
            if not answer["members"]:
                print(f"{pod}\t(no member)")
                continue
            owned = answer["resources"]
            print(f"{pod}\t{','.join(answer['members'])}\t{len(owned)}\t{' '.join(owned)}")
    ok = all(owner is not None for owner in found.values()) and all(of_pod.values())
    return 0 if status.exists and ok else 1


def _connection_arguments(p: argparse.ArgumentParser) -> None:
    """``--zk``/``--group``, defaulting to ``$REBALANSER_ZK``/``$REBALANSER_GROUP`` (e.g. a pod's ``envFrom``),
    the ``--zk-tls*`` options (:func:`tls_options`), the digest credentials (:func:`_credentials`), the
    connect timeout and ``-v``."""
    zk, group = os.environ.get("REBALANSER_ZK"), os.environ.get("REBALANSER_GROUP")
    p.add_argument("--zk", required=zk is None, default=zk, metavar="HOSTS",
                   help="ZooKeeper connect string host:port[,host:port...][/chroot] (or $REBALANSER_ZK)")
    p.add_argument("--group", required=group is None, default=group, metavar="PATH",
                   help="group znode path (or $REBALANSER_GROUP)")
    p.add_argument("--connect-timeout", type=positive_seconds, default=CONNECT_TIMEOUT, metavar="SECONDS",
                   help="how long to wait for a ZooKeeper server to answer before giving up, exit 4 "
                        "(default: %(default)s)")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="log kazoo's connection messages too (quiet by default: a failure to connect is "
                        "reported in one line with its reason)")
    p.add_argument("--zk-tls", action="store_true",
                   help="connect over TLS (implied by the other --zk-tls options; or $REBALANSER_ZK_TLS=true)")
    p.add_argument("--zk-tls-dir", metavar="DIR",
                   help="directory with ca.crt, tls.crt, tls.key, each optional: a mounted TLS Secret "
                        "(or $REBALANSER_ZK_TLS_DIR)")
    p.add_argument("--zk-tls-ca", metavar="FILE",
                   help="PEM CA bundle that verifies the servers (default: the system's; or $REBALANSER_ZK_TLS_CA)")
    p.add_argument("--zk-tls-cert", metavar="FILE",
                   help="PEM client certificate, for mutual TLS (or $REBALANSER_ZK_TLS_CERT)")
    p.add_argument("--zk-tls-key", metavar="FILE", help="PEM key of the client certificate (or $REBALANSER_ZK_TLS_KEY)")
    p.add_argument("--zk-tls-verify-hostname", action="store_true",
                   help="the server certificate must name the host of the connect string "
                        "(or $REBALANSER_ZK_TLS_VERIFY_HOSTNAME=true)")
    p.add_argument("--zk-user", help="digest user (or REBALANSER_ZK_USERNAME)")
    p.add_argument("--zk-password-file",
                   help="file holding the digest password (or REBALANSER_ZK_PASSWORD_FILE; REBALANSER_ZK_PASSWORD "
                        "without one)")


WORKER_DESCRIPTION = """Joins the group and simulates work: every --tick it does one unit of work on each
resource it owns, each only after the library's ownership check passes. The group must exist
(rebalanser group create, or a ResourceGroup) unless --create-group is given. Runs until SIGTERM or
SIGINT (or a closed standard output), then stops its resources, leaves and exits 0. Exit codes: 1
failed, 2 bad input, 3 session expired under --expiry-policy shutdown, 4 ZooKeeper unreachable, 5 the
group does not exist or was deleted, 130/143 interrupted (SIGINT/SIGTERM) before it joined."""


def _worker_parser(sub: argparse._SubParsersAction[OneLineParser]) -> None:
    w = sub.add_parser("worker", help="join a group and simulate work on owned resources",
                       description=WORKER_DESCRIPTION)
    _connection_arguments(w)
    w.add_argument("--id", type=member_id, help="stable member id (default: $POD_NAME, else hostname-pid)")
    w.add_argument("--create-group", action="store_true",
                   help="create the group when it does not exist (default: refuse, exit 5)")
    w.add_argument("--algorithm", default="resource-barrier", choices=["resource-barrier", "global-barrier"],
                   help="how rebalances hand resources over, when the group has no G/config "
                        "(default: %(default)s)")
    w.add_argument("--session-timeout", type=positive_seconds, default=10.0, metavar="SECONDS",
                   help="requested ZooKeeper session timeout (default: %(default)s)")
    w.add_argument("--min-interval", type=non_negative_seconds, default=2.0, metavar="SECONDS",
                   help="least time between two rebalances (default: %(default)s)")
    w.add_argument("--tick", type=positive_seconds, default=0.1, metavar="SECONDS",
                   help="time between two units of work on each owned resource (default: %(default)s)")
    w.add_argument("--json", action="store_true",
                   help="one JSON event per line on stdout, every tick included (default: a line per change "
                        "and a summary every --summary-interval)")
    w.add_argument("--summary-interval", type=positive_seconds, default=SUMMARY_INTERVAL, metavar="SECONDS",
                   help="without --json, time between two summary lines (default: %(default)s)")
    w.add_argument("--expiry-policy", default="reconnect", choices=[p.value for p in ExpiryPolicy],
                   help="after a session expiry: rejoin, or end with exit 3 (default: %(default)s)")
    w.add_argument("--stop-timeout", type=positive_seconds, default=30.0, metavar="SECONDS",
                   help="how long a stop callback may run before its resources are released anyway "
                        "(default: %(default)s)")
    w.add_argument("--departure-grace", type=non_negative_seconds, default=0.0, metavar="SECONDS",
                   help="how long a departed member's resources wait for it to come back (default: %(default)s)")
    w.add_argument("--initial-quiet", type=non_negative_seconds, default=0.5, metavar="SECONDS",
                   help="the first assignment of a group with none waits until no member joined for this long "
                        "(default: %(default)s)")
    w.add_argument("--metrics-port", type=port, default=0, metavar="PORT",
                   help="serve Prometheus metrics on this port, 0 for none (default: %(default)s)")
    w.add_argument("--termination-log", metavar="PATH",
                   help="write this start's instance nonce here (a pod's /dev/termination-log) and record its "
                        "digest in the member node, for kubelet-confirmed failover (with POD_NAMESPACE, POD_NAME, "
                        "POD_UID and REBALANSER_CONTAINER set)")
    w.add_argument("--zk-password-poll", type=positive_seconds, default=5.0, metavar="SECONDS",
                   help="how often the password file is re-read (default: %(default)s)")
    w.add_argument("--zk-previous-password-grace", type=non_negative_seconds, default=120.0, metavar="SECONDS",
                   help="after the password file changed, nodes this worker creates also name the previous "
                        "password for this long (default: %(default)s)")
    # Fault simulation for the test suite and chaos runs: working, but not part of the documented surface.
    w.add_argument("--simulate-stop", default="normal", choices=["normal", "fail", "hang"], help=argparse.SUPPRESS)
    w.add_argument("--simulate-stop-delay", type=non_negative_seconds, default=0.0, help=argparse.SUPPRESS)
    w.add_argument("--simulate-start-delay", type=non_negative_seconds, default=0.0, help=argparse.SUPPRESS)
    w.add_argument("--simulate-oom", action="store_true", help=argparse.SUPPRESS)
    w.add_argument("--api", default="threads", choices=["threads", "asyncio"],
                   help="the client the worker runs on: rebalanser.Client or rebalanser.aio.Client "
                        "(default: %(default)s)")
    w.add_argument("--log-level", default="WARNING", choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                   help="the library's log level, on stderr (default: %(default)s)")


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="rebalanser", description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--version", action="version", version=f"rebalanser {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    _worker_parser(sub)
    s = sub.add_parser("status", help="print members, coordinator, epoch and the assignment")
    _connection_arguments(s)
    s.add_argument("--json", action="store_true")
    s.add_argument("--resource", action="append", metavar="NAME",
                   help="print who owns NAME (repeatable); exit 1 when one is unassigned")
    s.add_argument("--member", action="append", metavar="ID", help="print what member ID owns (repeatable)")
    s.add_argument("--pod", action="append", metavar="NAME",
                   help="print what pod NAME owns: the member whose node records that pod, else the member with "
                        "id NAME (repeatable); exit 1 when no member runs in it")
    admin_cli.add_parser(sub, _connection_arguments)
    return p


class KazooTrouble(logging.Handler):
    """Keeps the last reason kazoo gave for a failed connection attempt ("Connection refused", "Name or
    service not known"), so that a command that cannot connect says why in its one line; kazoo's own
    messages reach stderr only with ``--verbose``."""

    REASONS = ("Cannot resolve ", "Connection dropped: ", "Connection time-out: ", "AUTH_FAILED closing: ")

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.reason = ""

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        for prefix in self.REASONS:
            if message.startswith(prefix):
                self.reason = message.removeprefix("Connection dropped: ").removeprefix("socket connection error: ")


@contextlib.contextmanager
def quiet_kazoo(verbose: bool) -> Iterator[KazooTrouble]:
    """While the command runs, kazoo's logger keeps its reasons in a :class:`KazooTrouble` and passes
    its records on only when ``verbose``."""
    trouble = KazooTrouble()
    kazoo = logging.getLogger("kazoo")
    propagate, level = kazoo.propagate, kazoo.level
    kazoo.addHandler(trouble)
    kazoo.propagate = verbose  # its level follows the root's: INFO with -v, or the worker's --log-level
    if kazoo.level > logging.WARNING:
        kazoo.setLevel(logging.WARNING)
    try:
        yield trouble
    finally:
        kazoo.removeHandler(trouble)
        kazoo.propagate = propagate
        kazoo.setLevel(level)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    verbose = bool(getattr(args, "verbose", False))
    level = "INFO" if verbose and getattr(args, "log_level", "WARNING") == "WARNING" else getattr(
        args, "log_level", "WARNING")
    logging.basicConfig(level=level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    with quiet_kazoo(verbose) as trouble:
        return _outcome(args, trouble)


def _outcome(args: argparse.Namespace, trouble: KazooTrouble) -> int:
    """Runs the command; every way it can fail becomes one line on stderr and its exit code."""
    try:
        return _run(args)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except _Terminated:
        return EXIT_TERMINATED
    except BrokenPipeError:  # a status or group command whose reader went away: nothing to say to it
        _silence(sys.stdout)
        return 0
    except KazooTimeoutError:
        reason = trouble.reason or "no server answered"
        _fail(f"cannot connect to ZooKeeper at {args.zk} within {args.connect_timeout:g} s: {reason}")
        return EXIT_UNREACHABLE
    except InvalidInputError as exc:
        _fail(str(exc))
        return EXIT_USAGE
    except (GroupNotFoundError, GroupDeletedError) as exc:
        _fail(str(exc))
        return EXIT_NO_GROUP
    except RebalanserError as exc:
        _fail(str(exc))
        return EXIT_FAILED
    except NoAuthError:
        _fail(f"ZooKeeper refused access to {args.group}: its znodes need digest credentials "
              "(--zk-user with --zk-password-file, or REBALANSER_ZK_USERNAME/REBALANSER_ZK_PASSWORD*) "
              "that their ACL names")
        return EXIT_FAILED
    except (KazooException, TimeoutError) as exc:
        _fail(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
        return EXIT_FAILED


def _fail(message: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        print(f"rebalanser: {message}", file=sys.stderr)


def _run(args: argparse.Namespace) -> int:
    if args.command == "worker":
        return run_worker(args)
    if args.command == "group":
        return admin_cli.run_group(args, _credentials(args), tls_options(args))
    return run_status(args)


if __name__ == "__main__":
    sys.exit(main())
