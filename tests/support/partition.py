"""A 3-server ZooKeeper ensemble on loopback whose server-to-server links can be cut.

Every server gets its own ``zoo.cfg``. Its own ``server.N`` entry holds the real quorum and election
ports it binds; the entry of every *other* server points at a :class:`~tests.support.relay.Relay`
dedicated to that ordered pair (one for quorum traffic, one for election traffic). So every byte a
server sends to another one passes through the relay of that pair, and holding a pair's relays is a
silent network partition between the two servers. Client ports are untouched: clients still reach
every server while it is cut off from the others.

ZooKeeper's election handshake carries the connecting server's own election address, and the server
that accepts may dial back to it; the election relays rewrite that address to the relay of the
reverse pair, so the dial-back is relayed too.

API: :meth:`PartitionableEnsemble.isolate` cuts one server from all others (e.g. a follower from the
quorum while its clients still reach it), :meth:`PartitionableEnsemble.cut` cuts one pair, and
:meth:`PartitionableEnsemble.heal` restores every link.
"""

from __future__ import annotations

import itertools
import socket
import struct
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.relay import Relay, read_exact
from tests.support.zk import LOGBACK, ZkCluster, ZkServer, free_port, zookeeper_lib

# QuorumCnxManager's initial message: protocol version (negative since 3.5), sid, address length, address.
_MAX_ADDRESS = 4096


def rewrite_election_address(advertised: str) -> Callable[[socket.socket], bytes]:
    """A ``first`` function for an election relay: replaces the address in the initial message."""

    def first(sock: socket.socket) -> bytes:
        head = read_exact(sock, 8)
        (version,) = struct.unpack(">q", head)
        if version >= 0:  # pre-3.5 protocol: the first long is the sid and no address follows
            return head
        sid_and_len = read_exact(sock, 12)
        _sid, length = struct.unpack(">qi", sid_and_len)
        if not 0 <= length <= _MAX_ADDRESS:
            raise EOFError(f"implausible address length {length}")
        read_exact(sock, length)
        address = advertised.encode()
        return head + sid_and_len[:8] + struct.pack(">i", len(address)) + address

    return first


@dataclass
class PairRelays:
    """The relays that carry traffic from one server to another."""

    quorum: Relay
    election: Relay

    def hold(self) -> None:
        self.quorum.hold()
        self.election.hold()

    def release(self) -> None:
        self.quorum.release()
        self.election.release()

    @property
    def held(self) -> bool:
        return self.quorum.held or self.election.held

    def close(self) -> None:
        self.quorum.close()
        self.election.close()


@dataclass
class PartitionableEnsemble:
    cluster: ZkCluster
    relays: dict[tuple[int, int], PairRelays] = field(default_factory=dict)  # (from myid, to myid)
    tick_ms: int = 500
    sync_limit: int = 10

    @property
    def hosts(self) -> str:
        return self.cluster.hosts

    @property
    def servers(self) -> list[ZkServer]:
        return self.cluster.servers

    def server(self, myid: int) -> ZkServer:
        return next(s for s in self.cluster.servers if s.myid == myid)

    def leader(self) -> ZkServer:
        return self.cluster.leader()

    def followers(self) -> list[ZkServer]:
        return self.cluster.followers()

    def cut(self, a: int, b: int) -> None:
        """Silently drops all traffic between servers ``a`` and ``b`` (both directions)."""
        self.relays[(a, b)].hold()
        self.relays[(b, a)].hold()

    def isolate(self, myid: int) -> None:
        """Cuts server ``myid`` from every other server; its clients still reach it."""
        for other in self.cluster.servers:
            if other.myid != myid:
                self.cut(myid, other.myid)

    def heal(self) -> None:
        for pair in self.relays.values():
            pair.release()

    def cut_pairs(self) -> set[tuple[int, int]]:
        return {pair for pair, relays in self.relays.items() if relays.held}

    def start(self, timeout: float = 60.0) -> None:
        for server in self.cluster.servers:
            server.start()
        self.cluster.wait_serving(timeout)

    def stop(self) -> None:
        self.heal()
        for server in self.cluster.servers:
            server.resume()
        self.cluster.stop()
        for pair in self.relays.values():
            pair.close()


def make_partitionable_ensemble(
    base: Path, size: int = 3, tick_ms: int = 500, sync_limit: int = 10, init_limit: int = 10,
    lib: Path | None = None,
) -> PartitionableEnsemble:
    """Writes one config per server under ``base`` and starts the relays (the servers are not started)."""
    lib = lib or zookeeper_lib()
    ids = list(range(1, size + 1))
    ports = {i: (free_port(), free_port(), free_port()) for i in ids}  # client, quorum, election
    ensemble = PartitionableEnsemble(ZkCluster(), tick_ms=tick_ms, sync_limit=sync_limit)
    for a, b in itertools.permutations(ids, 2):
        _, quorum, _ = ports[b]
        ensemble.relays[(a, b)] = PairRelays(
            quorum=Relay(("127.0.0.1", quorum), name=f"q{a}-{b}"),
            election=Relay(("127.0.0.1", ports[b][2]), name=f"e{a}-{b}"),
        )
    for a, b in itertools.permutations(ids, 2):
        # a's handshake to b advertises the address b should dial back: the relay of the pair (b, a).
        ensemble.relays[(a, b)].election.first = rewrite_election_address(ensemble.relays[(b, a)].election.address)
    for i in ids:
        client, quorum, election = ports[i]
        data = base / f"zk{i}"
        data.mkdir(parents=True, exist_ok=True)
        (data / "myid").write_text(f"{i}\n")
        lines = [
            f"tickTime={tick_ms}", f"initLimit={init_limit}", f"syncLimit={sync_limit}",
            f"dataDir={data}", f"clientPort={client}", "clientPortAddress=127.0.0.1",
            "maxClientCnxns=0", f"minSessionTimeout={2 * tick_ms}", f"maxSessionTimeout={40 * tick_ms}",
            "forceSync=no", "autopurge.purgeInterval=0", "reconfigEnabled=false",
        ]
        for j in ids:
            if j == i:
                lines.append(f"server.{j}=127.0.0.1:{quorum}:{election}")
            else:
                relays = ensemble.relays[(i, j)]
                lines.append(f"server.{j}=127.0.0.1:{relays.quorum.port}:{relays.election.port}")
        cfg = data / "zoo.cfg"
        cfg.write_text("\n".join(lines) + "\n")
        (data / "logback.xml").write_text(LOGBACK.format(log=data / "zookeeper.log"))
        ensemble.cluster.servers.append(ZkServer(i, client, data, cfg, lib))
    return ensemble


@contextmanager
def partitionable_ensemble(
    base: Path, size: int = 3, tick_ms: int = 500, sync_limit: int = 10, init_limit: int = 10
) -> Iterator[PartitionableEnsemble]:
    """A started :class:`PartitionableEnsemble`; on exit every link is healed and every server stopped."""
    ensemble = make_partitionable_ensemble(base, size, tick_ms, sync_limit, init_limit)
    try:
        ensemble.start()
        yield ensemble
    finally:
        ensemble.stop()
