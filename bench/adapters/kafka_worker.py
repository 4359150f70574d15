"""Kafka consumer-group members behind the bench worker's event contract (:mod:`bench.multiworker`).

Each member is a confluent-kafka ``Consumer`` (librdkafka) of the cell's topic, one partition per
resource (``res-<partition>``), in one consumer group per cell. Its group-membership callbacks become
the bench events: ``assigned`` (on_assign), ``revoked`` (on_revoke and on_lost); the first pass of its
poll loop after an assignment is its first unit of work on those partitions (``ticks``), gated by the
consumer's own ``assignment()``. ``session connected`` is reported once the member has reached the
broker (a metadata request answered), before it subscribes: the instant a join is measured from.

Protocols (the cell's ``algorithm``), T = the cell's session timeout:

* ``kafka-eager``: the classic protocol with the ``range`` assignor (every rebalance revokes every
  partition of every member first); ``session.timeout.ms`` T, ``heartbeat.interval.ms`` T/3.
* ``kafka-cooperative``: the classic protocol with ``cooperative-sticky`` (KIP-429: only the moved
  partitions are revoked, in a second round); the same timeouts.
* ``kafka-consumer``: the consumer protocol (KIP-848, ``group.protocol=consumer``): the broker
  computes the assignment (its default ``uniform`` assignor) and holds the session timeout and
  heartbeat interval (the bench's broker sets them to T and T/3, see :mod:`bench.kafka_broker`).
"""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Callable
from typing import Any

PROTOCOLS = ("kafka-eager", "kafka-cooperative", "kafka-consumer")

Emit = Callable[..., None]


def resource(partition: int) -> str:
    return f"res-{partition:05d}"


def consumer_config(protocol: str, bootstrap: str, group: str, member: str, session_timeout: float) -> dict[str, Any]:
    """The consumer's settings for ``protocol`` (see the module doc)."""
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap, "group.id": group, "client.id": member,
        "enable.auto.commit": False, "auto.offset.reset": "latest", "log_level": 2,
    }
    if protocol == "kafka-consumer":
        return {**config, "group.protocol": "consumer"}
    timeout_ms = int(session_timeout * 1000)
    strategy = "cooperative-sticky" if protocol == "kafka-cooperative" else "range"
    return {**config, "group.protocol": "classic", "session.timeout.ms": timeout_ms,
            "heartbeat.interval.ms": max(1, timeout_ms // 3), "partition.assignment.strategy": strategy}


class KafkaMember:
    def __init__(self, args: argparse.Namespace, member: str, emit: Emit) -> None:
        self.args, self.member, self.emit = args, member, emit
        self.stop = threading.Event()
        self.fresh: set[str] = set()  # assigned, not yet worked on

    def on_assign(self, consumer: Any, partitions: list[Any]) -> None:
        names = sorted(resource(p.partition) for p in partitions)
        if names:
            self.emit(self.member, "assigned", resources=names, token=0)
            self.fresh.update(names)

    def on_revoke(self, consumer: Any, partitions: list[Any]) -> None:
        names = sorted(resource(p.partition) for p in partitions)
        self.fresh.difference_update(names)
        if names:
            self.emit(self.member, "revoked", resources=names)

    def run(self) -> None:
        from confluent_kafka import Consumer

        topic = self.args.group
        config = consumer_config(self.args.algorithm, self.args.zk, topic, self.member, self.args.session_timeout)
        consumer = Consumer(config)
        consumer.list_topics(topic, timeout=60)  # reached the broker
        self.emit(self.member, "session", state="connected")
        self.emit(self.member, "role", role="follower", epoch=0)
        consumer.subscribe([topic], on_assign=self.on_assign, on_revoke=self.on_revoke, on_lost=self.on_revoke)
        try:
            while not self.stop.is_set():
                consumer.poll(self.args.tick)
                self.work(consumer)
        finally:
            consumer.close()  # leaves the group (on_revoke runs for what it held)

    def work(self, consumer: Any) -> None:
        if not self.fresh:
            return
        held = {resource(p.partition) for p in consumer.assignment()}
        done = sorted(self.fresh & held)
        if done:
            self.fresh.difference_update(done)
            self.emit(self.member, "ticks", ts=time.monotonic_ns(), resources=done, tokens=[0])


def run_kafka(args: argparse.Namespace, ids: list[str], emit: Emit) -> list[threading.Thread]:
    """Starts one consumer per member id (each in its own thread); returns the threads that stop them."""
    members = [KafkaMember(args, member, emit) for member in ids]
    runners = [threading.Thread(target=m.run, name=f"kafka-{m.member}", daemon=True) for m in members]
    for r in runners:
        r.start()

    def stopper(m: KafkaMember, r: threading.Thread) -> None:
        m.stop.set()
        r.join(60)

    return [threading.Thread(target=stopper, args=(m, r), daemon=True) for m, r in zip(members, runners, strict=True)]
