"""Real ZooKeeper servers for tests and demos: a single server or an ensemble on free loopback ports.

The jars come from ``scripts/install-zookeeper.sh`` (Maven Central, cached). Every server is a real JVM
process; ``stop``/``start``/``kill`` act on it so tests can inject server faults.
"""

from __future__ import annotations

import random
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError, NotEmptyError

REPO = Path(__file__).resolve().parents[2]
TICK_MS = 250  # min session timeout = 2 ticks (0.5 s), max = 40 s (configured below)


#: Below Linux's ephemeral range (32768-60999 by default): no outgoing connection's source port is taken
#: from here, so a port handed out stays free until the server given it binds it.
_PORT_RANGE = (20000, 32000)
_given: set[int] = set()


def free_port() -> int:
    """A loopback port free now. Not one the kernel would pick for an ephemeral bind: a ZooKeeper
    server whose election port an outgoing connection took in the meantime exits ("Address already in
    use"), and an ensemble test then failed before it began. Never the same port twice in a process."""
    for _ in range(2000):
        port = random.randrange(*_PORT_RANGE)
        if port in _given:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _given.add(port)
        return port
    raise RuntimeError(f"no free loopback port in {_PORT_RANGE}")


def zookeeper_lib() -> Path:
    out = subprocess.run(
        [str(REPO / "scripts" / "install-zookeeper.sh")], check=True, capture_output=True, text=True
    )
    return Path(out.stdout.strip())


def four_letter(port: int, cmd: str, timeout: float = 2.0) -> str:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(cmd.encode())
        chunks = []
        while True:
            data = s.recv(65536)
            if not data:
                break
            chunks.append(data)
    return b"".join(chunks).decode(errors="replace")


@dataclass
class ZkServer:
    """One ZooKeeper server process (standalone or an ensemble member)."""

    myid: int
    client_port: int
    data_dir: Path
    config: Path
    lib: Path
    proc: subprocess.Popen[bytes] | None = None
    secure_port: int | None = None  # TLS clients (Netty), with ServerTls

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    @property
    def secure_address(self) -> str:
        assert self.secure_port is not None, "this server was made without TLS"
        return f"127.0.0.1:{self.secure_port}"

    def start(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            return
        log = open(self.data_dir / "server.log", "ab")  # noqa: SIM115 - owned by the child
        java = shutil.which("java") or "java"
        self.proc = subprocess.Popen(
            [
                java, "-Xmx1g", "-XX:+ExitOnOutOfMemoryError", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                "-Dzookeeper.admin.enableServer=false",
                "-Dzookeeper.4lw.commands.whitelist=*",
                f"-Dlogback.configurationFile={self.data_dir / 'logback.xml'}",
                "-cp", f"{self.lib}/*",
                "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(self.config),
            ],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
        )

    def serving(self) -> bool:
        try:
            stat = four_letter(self.client_port, "srvr", timeout=0.5)
        except OSError:
            return False
        return "Mode:" in stat

    def mode(self) -> str:
        try:
            for line in four_letter(self.client_port, "srvr", timeout=0.5).splitlines():
                if line.startswith("Mode:"):
                    return line.split(":", 1)[1].strip()
        except OSError:
            pass
        return "down"

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout)

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, chars: int = 3000) -> str:
        parts = [(self.data_dir / name) for name in ("server.log", "zookeeper.log")]
        return "\n".join(f"--- {p.name} ---\n{p.read_text(errors='replace')[-chars:]}" for p in parts if p.exists())

    def pause(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGCONT)


@dataclass
class ZkCluster:
    """A standalone server (size 1) or an ensemble of real ZooKeeper servers."""

    servers: list[ZkServer] = field(default_factory=list)

    @property
    def hosts(self) -> str:
        return ",".join(s.address for s in self.servers)

    @property
    def secure_hosts(self) -> str:
        """The connect string of the TLS ports (servers made with :class:`ServerTls`)."""
        return ",".join(s.secure_address for s in self.servers)

    def wait_serving(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            dead = [s for s in self.servers if s.proc is not None and s.proc.poll() is not None]
            if dead and len(self.servers) == 1:
                break
            up = [s for s in self.servers if s.proc is not None and s.proc.poll() is None]
            if up and all(s.serving() for s in up) and self.quorum():
                return
            time.sleep(0.1)
        logs = "\n".join(
            f"--- server {s.myid} ---\n" + (s.data_dir / "server.log").read_text()[-2000:]
            for s in self.servers if (s.data_dir / "server.log").exists()
        )
        raise TimeoutError(f"ZooKeeper not serving within {timeout}s\n{logs}")

    def quorum(self) -> bool:
        modes = [s.mode() for s in self.servers]
        if len(self.servers) == 1:
            return modes[0] == "standalone"
        return "leader" in modes

    def leader(self) -> ZkServer:
        for s in self.servers:
            if s.mode() == "leader":
                return s
        raise LookupError("no leader")

    def followers(self) -> list[ZkServer]:
        return [s for s in self.servers if s.mode() == "follower"]

    def start(self) -> None:
        for s in self.servers:
            s.start()
        self.wait_serving()

    def stop(self) -> None:
        for s in self.servers:
            s.stop()

    def mntr(self, server: int = 0) -> dict[str, str]:
        out = four_letter(self.servers[server].client_port, "mntr")
        return dict(line.split("\t", 1) for line in out.splitlines() if "\t" in line)


LOGBACK = """<configuration>
  <appender name="F" class="ch.qos.logback.core.FileAppender">
    <file>{log}</file><encoder><pattern>%d %-5level [%thread] %logger{{20}} - %msg%n</pattern></encoder>
  </appender>
  <root level="WARN"><appender-ref ref="F"/></root>
</configuration>
"""
#: With TLS: the x509 identity of every authenticated connection ("Authenticated Id 'CN=...'").
TLS_LOGGER = '<logger name="org.apache.zookeeper.server.auth.X509AuthenticationProvider" level="INFO"/>'


def _logback(log: Path, tls: bool) -> str:
    text = LOGBACK.format(log=log)
    return text.replace("<root ", f"{TLS_LOGGER}\n  <root ") if tls else text


@dataclass(frozen=True)
class ServerTls:
    """A TLS client port besides the plain one (which the fixtures' health checks and admin use).

    PEM files (ZooKeeper reads PEM stores itself): ``key_store`` holds the server's certificate and
    key, ``trust_store`` the CAs whose client certificates it accepts. ``client_auth``: ``need``
    (mutual TLS: a client without a trusted certificate is refused) or ``none``. Both files are read
    when the server starts: rewrite them, then restart the server, to rotate.
    """

    key_store: Path
    trust_store: Path
    client_auth: str = "need"

    def config_lines(self, port: int) -> list[str]:
        return [
            f"secureClientPort={port}", "secureClientPortAddress=127.0.0.1",
            "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory",
            f"ssl.keyStore.location={self.key_store}", "ssl.keyStore.type=PEM",
            f"ssl.trustStore.location={self.trust_store}", "ssl.trustStore.type=PEM",
            f"ssl.clientAuth={self.client_auth}",
            # a client certificate's subject becomes the session's x509 identity (logged at INFO)
            "authProvider.x509=org.apache.zookeeper.server.auth.X509AuthenticationProvider",
        ]


def make_cluster(base: Path, size: int = 1, lib: Path | None = None, tls: ServerTls | None = None) -> ZkCluster:
    """Writes configs for ``size`` servers under ``base`` (not started); with ``tls``, each also serves
    a TLS client port (``ZkServer.secure_port``, ``ZkCluster.secure_hosts``)."""
    lib = lib or zookeeper_lib()
    ports = [(free_port(), free_port(), free_port()) for _ in range(size)]
    cluster = ZkCluster()
    for i, (client, _peer, _election) in enumerate(ports, start=1):
        data = base / f"zk{i}"
        data.mkdir(parents=True, exist_ok=True)
        lines = [
            f"tickTime={TICK_MS}", "initLimit=40", "syncLimit=8",
            f"dataDir={data}", f"clientPort={client}", "clientPortAddress=127.0.0.1",
            "maxClientCnxns=0", "minSessionTimeout=500", "maxSessionTimeout=40000",
            "forceSync=no", "autopurge.purgeInterval=0",
        ]
        secure_port = free_port() if tls is not None else None
        if tls is not None and secure_port is not None:
            lines.extend(tls.config_lines(secure_port))
        if size > 1:
            (data / "myid").write_text(f"{i}\n")
            for j, (_, p, e) in enumerate(ports, start=1):
                lines.append(f"server.{j}=127.0.0.1:{p}:{e}")
        cfg = data / "zoo.cfg"
        cfg.write_text("\n".join(lines) + "\n")
        (data / "logback.xml").write_text(_logback(data / "zookeeper.log", tls is not None))
        cluster.servers.append(ZkServer(i, client, data, cfg, lib, secure_port=secure_port))
    return cluster


def purge(client: KazooClient, path: str, batch: int = 500) -> None:
    """Deletes ``path`` and everything under it, children first, in multi batches.

    Best effort: nodes that vanish meanwhile (ephemerals of ending sessions) are skipped, and nodes that
    appear meanwhile are retried once more on the next pass.
    """
    for _ in range(3):
        try:
            doomed = _subtree_postorder(client, path)
        except NoNodeError:
            return
        for start in range(0, len(doomed), batch):
            txn = client.transaction()
            for node in doomed[start : start + batch]:
                txn.delete(node)
            if any(isinstance(r, Exception) for r in txn.commit()):
                for node in doomed[start : start + batch]:  # one bad node fails the whole multi
                    try:
                        client.delete(node)
                    except (NoNodeError, NotEmptyError):
                        pass
        if not client.exists(path):
            return


def _subtree_postorder(client: KazooClient, path: str) -> list[str]:
    nodes: list[str] = []
    for child in client.get_children(path):
        try:
            nodes.extend(_subtree_postorder(client, f"{path.rstrip('/')}/{child}"))
        except NoNodeError:
            continue
    nodes.append(path)
    return nodes


@contextmanager
def serving_cluster(base: Path, size: int = 1, tls: ServerTls | None = None) -> Iterator[ZkCluster]:
    """Starts ``size`` real servers under ``base``; on exit resumes any paused one and stops them all."""
    cluster = make_cluster(base, size, tls=tls)
    cluster.start()
    try:
        yield cluster
    finally:
        for server in cluster.servers:
            server.resume()
        cluster.stop()


@contextmanager
def admin_client(hosts: str, start_timeout: float = 15, **options: object) -> Iterator[KazooClient]:
    """A connected administrator's client, stopped and closed on exit."""
    client = KazooClient(hosts=hosts, timeout=10, **options)
    client.start(timeout=start_timeout)
    try:
        yield client
    finally:
        client.stop()
        client.close()
