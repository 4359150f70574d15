from kazoo.client import KazooClient

from tests.support.zk import ZkCluster, admin_client


def test_single_server_accepts_writes(zk: KazooClient, group_path: str) -> None:
    zk.create(group_path + "/x", b"v", makepath=True)
    assert zk.get(group_path + "/x")[0] == b"v"


def test_ensemble_elects_a_leader_and_survives_losing_it(zk_ensemble: ZkCluster) -> None:
    with admin_client(zk_ensemble.hosts, start_timeout=20) as client:
        client.create("/e", b"1")
        zk_ensemble.leader().kill()
        zk_ensemble.wait_serving()
        assert client.retry(client.get, "/e")[0] == b"1"
