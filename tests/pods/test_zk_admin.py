"""The local cluster's ZooKeeper administrator (Secret zookeeper/zk-admin, made by scripts/cluster.sh up).

The pod tests share one ensemble and one cluster that outlives a run: an interrupted run can leave a
subtree whose ACL names an identity nobody holds any more (an operator identity whose Secret is gone).
Only the ensemble's administrator can remove it, and :meth:`Tools.purge` acts as that administrator.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.support.kubectl import Kube, KubeError
from tests.support.podtools import PURGE_SCRIPT, Tools, admin_identity

pytestmark = [pytest.mark.pods, pytest.mark.timeout(600)]

ZK_CONNECT = "zk.zookeeper.svc.cluster.local:2181"
PARENT = "/rebalanser-admin-check"

#: argv: connect string, the subtree to plant. Makes it with the ACL of a random identity, which is then
#: forgotten, and one child under it: nobody but the administrator can list or delete either.
PLANT_SCRIPT = """
import secrets, sys
from kazoo.client import KazooClient
from kazoo.security import make_digest_acl
user, password = "gone", secrets.token_hex(16)
zk = KazooClient(hosts=sys.argv[1], timeout=10, auth_data=[("digest", f"{user}:{password}")])
zk.start(timeout=30)
acl = [make_digest_acl(user, password, all=True)]
zk.ensure_path(sys.argv[2].rsplit("/", 1)[0])
zk.create(sys.argv[2], b"left behind", acl=acl)
zk.create(sys.argv[2] + "/child", b"", acl=acl)
zk.stop()
"""

#: listed from its (open) parent: ``exists`` on the node itself needs its READ permission
EXISTS_SCRIPT = """
import sys
from kazoo.client import KazooClient
zk = KazooClient(hosts=sys.argv[1], timeout=10)
zk.start(timeout=30)
parent, name = sys.argv[2].rsplit("/", 1)
print("present" if name in zk.get_children(parent) else "absent")
zk.stop()
"""


@pytest.fixture
def tools(kube: Kube) -> Iterator[Tools]:
    pod = Tools(kube, "zk-admin-check")
    pod.create()
    try:
        yield pod
    finally:
        pod.purge(ZK_CONNECT, PARENT)
        pod.delete()


def test_the_administrator_removes_what_an_identity_nobody_holds_left(kube: Kube, tools: Tools) -> None:
    admin = admin_identity(kube)
    assert admin.startswith("super:"), "scripts/cluster.sh up made no Secret zookeeper/zk-admin"
    path = f"{PARENT}/{uuid.uuid4().hex[:10]}"
    tools.python(PLANT_SCRIPT, ZK_CONNECT, path)
    with pytest.raises(KubeError, match="NoAuth"):  # without the administrator: refused
        tools.python(PURGE_SCRIPT, ZK_CONNECT, "", path)
    assert tools.python(EXISTS_SCRIPT, ZK_CONNECT, path).strip() == "present"
    tools.purge(ZK_CONNECT, path)
    assert tools.python(EXISTS_SCRIPT, ZK_CONNECT, path).strip() == "absent", \
        "the administrator's purge left the subtree: the servers were not given its digest"
