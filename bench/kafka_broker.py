"""A throw-away Kafka broker for the bench's Kafka cells: one KRaft node (broker and controller in one
JVM) on 127.0.0.1, run from the released jars.

The jars are resolved once with Maven (a generated POM, ``mvn dependency:copy-dependencies``) and cached
under ``~/.cache/rebalanser/kafka-<version>``; later runs start offline. The storage directory is
formatted (``kafka.tools.StorageTool format``) and deleted with the broker.

Group settings that let the consumer groups run at the bench's session timeout (T = 2 s by default)
are broker settings: the classic protocol's ``group.min.session.timeout.ms`` and the consumer
protocol's (KIP-848) session timeout and heartbeat interval, which that protocol takes from the
broker, not from the consumer. ``group.initial.rebalance.delay.ms`` is 0 (the classic protocol would
otherwise hold the first rebalance of an empty group for 3 s).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

VERSION = "4.1.2"
SCALA = "2.13"
SLF4J = "2.0.17"
LOG4J = "2.25.3"
CACHE = Path(os.environ.get("REBALANSER_CACHE", Path.home() / ".cache" / "rebalanser")) / f"kafka-{VERSION}"
MODULES = ("kafka-server", "kafka-storage", "kafka-group-coordinator", "kafka-metadata", "kafka-raft", "kafka-tools")

POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.rebalanser.bench</groupId>
  <artifactId>kafka-broker-jars</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencyManagement><dependencies>
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-api</artifactId><version>{slf4j}</version></dependency>
  </dependencies></dependencyManagement>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_{scala}</artifactId><version>{version}</version></dependency>
{modules}
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j2-impl</artifactId><version>{log4j}</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-core</artifactId><version>{log4j}</version></dependency>
  </dependencies>
</project>
"""

LOG4J2 = """<Configuration status="WARN">
  <Appenders><Console name="err" target="SYSTEM_ERR"><PatternLayout pattern="%d %p %c{1}: %m%n"/></Console></Appenders>
  <Loggers><Root level="WARN"><AppenderRef ref="err"/></Root></Loggers>
</Configuration>
"""


class NoKafka(RuntimeError):
    """The broker cannot run here (no Java, or the jars cannot be resolved)."""


def jars() -> Path:
    """The directory of the broker's jars, resolved with Maven on first use."""
    lib = CACHE / "lib"
    if (CACHE / "complete").exists():
        return lib
    if shutil.which("java") is None or shutil.which("mvn") is None:
        raise NoKafka("Java and Maven are needed to run the Kafka broker")
    CACHE.mkdir(parents=True, exist_ok=True)
    modules = "\n".join(
        f"    <dependency><groupId>org.apache.kafka</groupId><artifactId>{m}</artifactId>"
        f"<version>{VERSION}</version></dependency>" for m in MODULES)
    (CACHE / "pom.xml").write_text(POM.format(slf4j=SLF4J, scala=SCALA, version=VERSION, modules=modules, log4j=LOG4J))
    done = subprocess.run(
        ["mvn", "-q", "-B", "-f", str(CACHE / "pom.xml"), "dependency:copy-dependencies",
         f"-DoutputDirectory={lib}", "-DincludeScope=runtime"],
        capture_output=True, text=True, timeout=1800,
    )
    if done.returncode != 0:
        raise NoKafka(f"resolving the Kafka jars failed: {done.stdout[-2000:]}{done.stderr[-2000:]}")
    (CACHE / "complete").write_text(VERSION + "\n")
    return lib


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Broker:
    workdir: Path
    session_timeout_ms: int
    heartbeat_ms: int
    port: int = 0
    controller_port: int = 0
    proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def settings(self) -> dict[str, str]:
        t, hb = str(self.session_timeout_ms), str(self.heartbeat_ms)
        return {
            "process.roles": "broker,controller", "node.id": "1",
            "controller.quorum.bootstrap.servers": f"127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER", "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.workdir / "data"), "num.partitions": "1",
            "offsets.topic.replication.factor": "1", "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": "1", "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            # classic protocol: the consumer asks for T; the broker's floor must allow it
            "group.min.session.timeout.ms": str(min(1000, self.session_timeout_ms)),
            # consumer protocol (KIP-848): session timeout and heartbeat are the broker's
            "group.consumer.session.timeout.ms": t, "group.consumer.min.session.timeout.ms": t,
            "group.consumer.heartbeat.interval.ms": hb, "group.consumer.min.heartbeat.interval.ms": hb,
        }

    def start(self, timeout: float = 120.0) -> Broker:
        lib = jars()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port, self.controller_port = free_port(), free_port()
        props = self.workdir / "server.properties"
        props.write_text("".join(f"{k}={v}\n" for k, v in self.settings().items()))
        (self.workdir / "log4j2.xml").write_text(LOG4J2)
        java = ["java", "-Xmx512m", "-Xms256m", f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.xml'}",
                "-cp", f"{lib}/*"]
        cluster_id = uuid.uuid4().hex[:22]
        formatted = subprocess.run(
            [*java, "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(props), "--standalone"],
            capture_output=True, text=True, timeout=180)
        if formatted.returncode != 0:
            raise NoKafka(f"formatting the Kafka storage failed: {formatted.stdout[-2000:]}{formatted.stderr[-2000:]}")
        err = open(self.workdir / "broker.err", "wb")  # noqa: SIM115 - owned by the child
        self.proc = subprocess.Popen([*java, "kafka.Kafka", str(props)], stdout=err, stderr=err,
                                     stdin=subprocess.DEVNULL)
        err.close()
        self._await_ready(timeout)
        return self

    def _await_ready(self, timeout: float) -> None:
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + timeout
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 2})
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise NoKafka(f"the broker exited ({self.proc.returncode}); see {self.workdir / 'broker.err'}")
            try:
                admin.list_topics(timeout=2)
                return
            except Exception:
                time.sleep(0.5)
        raise NoKafka(f"the broker did not answer within {timeout:.0f}s; see {self.workdir / 'broker.err'}")

    def create_topic(self, name: str, partitions: int, timeout: float = 120.0) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 2})
        futures = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])
        futures[name].result(timeout)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:  # every partition has a leader before members subscribe
            topic = admin.list_topics(name, timeout=10).topics.get(name)
            if topic is not None and len(topic.partitions) == partitions and all(
                    p.leader >= 0 for p in topic.partitions.values()):
                return
            time.sleep(0.2)
        raise NoKafka(f"topic {name} did not get {partitions} partitions with leaders within {timeout:.0f}s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
