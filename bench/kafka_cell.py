"""A bench cell run against a Kafka consumer group instead of a ZooKeeper group (``make bench-kafka``).

The same :class:`bench.scenarios.CellRun` drives it: the same faults, waits and evidence (the members'
JSON events), the same N, R and T. Only the group differs: a topic of R partitions on the bench's
broker (:mod:`bench.kafka_broker`), created before the members start, and members that are Kafka
consumers (:mod:`bench.adapters.kafka_worker`). ZooKeeper request counts do not apply (they read 0).
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient

from bench.fleet import Fleet, FleetConfig
from bench.kafka_broker import Broker
from bench.scenarios import Cell, CellRun
from tests.support.zk import ZkCluster


class KafkaCellRun(CellRun):
    def __init__(self, cell: Cell, cluster: ZkCluster, admin: KazooClient, log_dir: Path, log: Any,
                 broker: Broker) -> None:
        super().__init__(cell, cluster, admin, log_dir, log)
        self.broker = broker
        self.group = f"bench-{cell.algorithm}-n{cell.members}-r{cell.resources}-{uuid.uuid4().hex[:6]}"
        self.result["group"] = self.group
        self.fleet = Fleet(FleetConfig(
            impl="kafka", hosts=broker.bootstrap, group=self.group, algorithm=cell.algorithm,
            session_timeout=cell.session_timeout, min_interval=cell.min_interval, log_dir=log_dir,
        ))

    def _create(self) -> None:
        started = time.monotonic()
        self.broker.create_topic(self.group, self.cell.resources)
        self.result["create_resources_s"] = round(time.monotonic() - started, 2)
