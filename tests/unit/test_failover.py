"""Confirmed-death failover, the pure rules: which terminated-container reports prove a member dead."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kazoo.protocol.states import ZnodeStat
from kazoo.security import ACL, OPEN_ACL_UNSAFE, Id, Permissions, make_acl, make_digest_acl
from rebalanser.credentials import session_record_acl
from rebalanser.errors import CorruptDataError, InvalidInputError
from rebalanser.instance import (
    begin_instance,
    instance_digest,
    is_digest,
    new_instance,
    parse_termination_message,
    termination_record,
)
from rebalanser.options import Options
from rebalanser.paths import GroupPaths
from rebalanser.wire import MemberRecord, SessionRecord, decode_member, encode_member, encode_session
from rebalanser_operator.failover.choice import EndedInstance, PodRef, ended_instances, members_to_end
from rebalanser_operator.failover.endmember import Aim, Outcome, aim
from rebalanser_operator.spec.models import FailoverMode, PodSelector, ResourceGroupSpec

A, B = new_instance(), new_instance()


UID = "0b1e6c5a-1111-4222-8333-444455556666"
POD = PodRef("shop", "w-0", UID)


def pod(*containers: dict[str, Any], name: str = "w-0") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "shop", "uid": UID},
            "status": {"containerStatuses": list(containers)}}


def member(nonce: str | None, *, uid: str | None = UID, namespace: str | None = "shop",
           container: str | None = "worker", joined: float = 1.0) -> MemberRecord:
    """A member node's record as the library writes it now: the nonce's digest, never the nonce."""
    return MemberRecord("w-0", joined, pod="w-0", pod_uid=uid, pod_namespace=namespace, container=container,
                        instance_digest=instance_digest(nonce) if nonce else None)


def terminated(message: str | None) -> dict[str, Any]:
    return {"terminated": {"exitCode": 137, "reason": "Error", **({"message": message} if message else {})}}


def test_a_nonce_is_128_random_bits_in_hex() -> None:
    assert len(A) == 32 and A != B and int(A, 16) >= 0


def test_only_an_exact_record_line_is_evidence() -> None:
    assert parse_termination_message(termination_record(A)) == A
    assert parse_termination_message(f"rebalanser-instance={A}") == A
    for message in (None, "", A, f"rebalanser-instance={A}\nTraceback...", f"x rebalanser-instance={A}",
                    f"rebalanser-instance={A.upper()}", f"rebalanser-instance={A}0", 42):
        assert parse_termination_message(message) is None, message


def test_ended_instances_reads_state_and_last_state_of_every_container() -> None:
    body = pod({"name": "worker", "state": terminated(termination_record(A)),
                "lastState": terminated(termination_record(B))})
    assert ended_instances(body) == {EndedInstance("worker", A), EndedInstance("worker", B)}
    restarted = pod({"name": "worker", "state": {"running": {}}, "lastState": terminated(termination_record(B))},
                    {"name": "sidecar", "state": terminated(termination_record(A))})
    assert ended_instances(restarted) == {EndedInstance("worker", B), EndedInstance("sidecar", A)}


@pytest.mark.parametrize("status", [
    {"state": {"running": {"startedAt": "x"}}},  # a paused or partitioned process is still running
    {"state": {"waiting": {"reason": "ContainerCreating"}}},
    {"state": terminated(None)},  # terminated but no message: ambiguous
    {"state": terminated("OOMKilled: tail of the log")},  # FallbackToLogsOnError text
    {},
])
def test_nothing_else_is_evidence(status: dict[str, Any]) -> None:
    assert ended_instances(pod({"name": "worker", **status})) == frozenset()
    assert ended_instances({"metadata": {"name": "x"}}) == frozenset()


def test_a_member_is_ended_only_for_its_own_pod_uid_namespace_container_and_nonce() -> None:
    """Issue 19 E and K: the pod's name (or a hostname) is no identity; the UID, namespace and container are."""
    members = {
        "g1-w-0-0000000001": member(A),  # the dead instance
        "g2-w-0-0000000002": member(B, joined=2.0),  # the restarted instance
        "g3-w-0-0000000003": member(A, uid="another-pod-of-the-same-name"),
        "g4-w-0-0000000004": member(A, namespace="victim"),  # the same UID can't be in two namespaces
        "g5-w-0-0000000005": member(A, container="sidecar"),
        "g6-w-0-0000000006": member(A, uid=None),  # no UID recorded: never ended
        "g7-w-0-0000000007": member(None),  # no nonce recorded
        "g8-w-0-0000000008": None,  # unreadable data
    }
    dead = EndedInstance("worker", A)
    assert members_to_end(POD, {dead}, members) == {"g1-w-0-0000000001": dead}
    assert members_to_end(POD, set(), members) == {}
    assert members_to_end(PodRef("victim", "w-0", UID), {dead}, members) == {"g4-w-0-0000000004": dead}
    assert members_to_end(POD, {EndedInstance("other", A)}, members) == {}
    assert members_to_end(PodRef("shop", "w-0", "x"), {dead}, members) == {}


def test_a_member_node_written_before_the_digest_is_matched_by_its_nonce_and_pod_uid() -> None:
    old = MemberRecord("w-0", 1.0, A, "w-0", UID)  # nonce in clear, no namespace or container recorded
    assert members_to_end(POD, {EndedInstance("worker", A)}, {"g": old}) == {"g": EndedInstance("worker", A)}
    assert members_to_end(POD, {EndedInstance("worker", B)}, {"g": old}) == {}
    assert members_to_end(POD, {EndedInstance("worker", A)}, {"g": MemberRecord("w-0", 1.0, A, "w-0")}) == {}


def test_a_pod_without_a_uid_is_no_evidence() -> None:
    body = pod({"name": "worker", "state": terminated(termination_record(A))})
    assert PodRef.of(body) == POD
    del body["metadata"]["uid"]
    assert PodRef.of(body) is None


def test_member_record_round_trip_and_compatibility() -> None:
    record = member(A)
    assert decode_member(encode_member(record)) == record
    assert A not in encode_member(record).decode() and instance_digest(A).encode() in encode_member(record)
    assert decode_member(b'{"id": "w-0", "joined": 3.0}') == MemberRecord("w-0", 3.0)  # written before the field
    assert decode_member(f'{{"id": "w-0", "joined": 3.0, "instance": "{A}"}}'.encode()).instance == A
    with pytest.raises(CorruptDataError):
        decode_member(b"[1]")
    with pytest.raises(CorruptDataError):
        decode_member(b'{"id": "w", "instance": 7}')


def test_the_library_draws_a_fresh_nonce_per_start_and_records_only_its_digest(tmp_path: Path) -> None:
    """Issue 19 H: the caller cannot choose the nonce; every start writes a new one to the file."""
    log = tmp_path / "termination-log"
    first = begin_instance(str(log))
    nonce = parse_termination_message(log.read_text())
    assert nonce is not None and first == instance_digest(nonce) and is_digest(first)
    second = begin_instance(str(log))
    assert second != first and second == instance_digest(parse_termination_message(log.read_text()) or "")
    assert begin_instance(None) is None
    with pytest.raises(TypeError):
        Options(hosts="h:1", group="/g", instance=A)  # type: ignore[call-arg]
    with pytest.raises(InvalidInputError):
        Options(hosts="h:1", group="/g", termination_log="")
    assert Options(hosts="h:1", group="/g", termination_log=str(log), pod_namespace="shop", container="worker")


def test_spec_failover_is_opt_in() -> None:
    base = {"zookeeper": {"connect": "zk:2181"}}
    assert ResourceGroupSpec.parse(base).failover is FailoverMode.SESSION_EXPIRY
    selector = {"matchLabels": {"app": "w"}}
    spec = ResourceGroupSpec.parse({**base, "failover": "KubeletConfirmed", "podSelector": selector})
    assert spec.failover is FailoverMode.KUBELET_CONFIRMED
    assert spec.pod_selector == PodSelector.model_validate({"matchLabels": {"app": "w"}})
    assert spec.pod_selector.selects({"app": "w", "x": "y"}) and not spec.pod_selector.selects({"app": "v"})
    assert not spec.pod_selector.selects(None)


def stat(owner: int) -> ZnodeStat:
    return ZnodeStat(1, 1, 0, 0, 0, 0, 0, owner, 0, 0, 1)


S, OTHER = 0x100000C8D20000C, -0x7000000000000001  # session ids are signed 64-bit numbers
PASSWORD = bytes(range(16))
GROUP = GroupPaths.of("/g")
NODE = "b1a7b21a9ab544eebc9705d6018bfc0d-w1-0000000000"


def test_the_operator_closes_only_a_session_whose_own_record_names_it_and_owns_the_member_node() -> None:
    def verdict(record: tuple[bytes, ZnodeStat] | None, member: ZnodeStat | None = None) -> object:
        return aim(GROUP, NODE, S, record, member if member is not None else stat(S))

    own = encode_session(SessionRecord(S, PASSWORD))
    assert verdict((own, stat(S))) == Aim(SessionRecord(S, PASSWORD))
    assert verdict(None) == (Outcome.NO_RECORD, "a worker of an older version?")
    assert aim(GROUP, NODE, S, None, None) == (None, "")  # the member node and its record went: S ended
    planted = encode_session(SessionRecord(OTHER, PASSWORD))
    for record in ((planted, stat(S)), (planted, stat(OTHER)), (own, stat(OTHER)), (own, stat(0))):
        outcome = verdict(record)
        assert isinstance(outcome, tuple) and outcome[0] is Outcome.REFUSED, record
    bad = verdict((b'{"version": 9}', stat(S)))
    assert isinstance(bad, tuple) and bad[0] is Outcome.REFUSED and "version" in bad[1]
    assert GROUP.session_record(NODE) == "/g/sessions/b1a7b21a9ab544eebc9705d6018bfc0d-w1"
    assert GROUP.session_record("b1a7b21a9ab544eebc9705d6018bfc0d-w1-") == GROUP.session_record(NODE)


def test_the_session_record_is_readable_by_the_groups_digest_and_x509_identities_only() -> None:
    current, previous = make_digest_acl("grp", "new", all=True), make_digest_acl("grp", "old", all=True)
    acl = session_record_acl([current, previous])
    assert [(a.id, a.perms) for a in acl] == [(current.id, Permissions.READ), (previous.id, Permissions.READ)]
    assert session_record_acl(None) == session_record_acl(OPEN_ACL_UNSAFE) == [make_acl("world", "anyone", read=True)]
    operator = make_digest_acl("operator", "pw", all=True)
    assert [a.id for a in session_record_acl([current], readers=[operator])] == [current.id, operator.id]
    assert all(a.perms == Permissions.READ for a in session_record_acl([current], readers=[operator]))
    certificate = ACL(Permissions.ALL, Id("x509", "CN=operator"))  # a member known by its client certificate
    assert session_record_acl([certificate]) == [ACL(Permissions.READ, Id("x509", "CN=operator"))]
