from kazoo.client import KazooClient

from tests.support.zk import ZkCluster


def test_single_server_accepts_writes(zk: KazooClient, group_path: str) -> None:
    zk.create(group_path + "/x", b"v", makepath=True)
    assert zk.get(group_path + "/x")[0] == b"v"


def test_ensemble_elects_a_leader_and_survives_losing_it(zk_ensemble: ZkCluster) -> None:
    client = KazooClient(hosts=zk_ensemble.hosts, timeout=10)
    client.start(timeout=20)
    try:
        client.create("/e", b"1")
        zk_ensemble.leader().kill()
        zk_ensemble.wait_serving()
        assert client.retry(client.get, "/e")[0] == b"1"
    finally:
        client.stop()
        client.close()
