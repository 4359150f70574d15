"""ZooKeeper recipes for sharding work: service discovery, a distributed bag, a leader queue, role matching.

Each recipe takes an already-started :class:`kazoo.client.KazooClient` and a base znode path, does its
ZooKeeper work on its own threads (never on kazoo's connection or event threads) and documents, in its
module docstring, exactly what it guarantees and what those guarantees rest on.
"""

from .bag import BagItem, BagListener, DistributedBag, ItemExistsError
from .discovery import (
    Discovery,
    DiscoveryUnavailableError,
    DiscoveryWatch,
    InstanceConflictError,
    ServiceInstance,
    load_config,
)
from .leader_queue import Candidate, LeaderQueue
from .role_match import RoleMatcher

__all__ = [
    "BagItem",
    "BagListener",
    "Candidate",
    "Discovery",
    "DiscoveryUnavailableError",
    "DiscoveryWatch",
    "DistributedBag",
    "InstanceConflictError",
    "ItemExistsError",
    "LeaderQueue",
    "RoleMatcher",
    "ServiceInstance",
    "load_config",
]
