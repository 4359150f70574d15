"""Confirmed-death failover, the pure rules: which terminated-container reports prove a member dead."""

from __future__ import annotations

from typing import Any

import pytest
from rebalanser.errors import CorruptDataError, InvalidInputError
from rebalanser.instance import new_instance, parse_termination_message, termination_record
from rebalanser.options import Options
from rebalanser.wire import MemberRecord, decode_member, encode_member
from rebalanser_operator.failover import ended_instances, members_to_end
from rebalanser_operator.models import FailoverMode, PodSelector, ResourceGroupSpec

A, B = new_instance(), new_instance()


def pod(*containers: dict[str, Any], name: str = "w-0") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "shop"}, "status": {"containerStatuses": list(containers)}}


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
    assert ended_instances(body) == {A, B}
    restarted = pod({"name": "worker", "state": {"running": {}}, "lastState": terminated(termination_record(B))})
    assert ended_instances(restarted) == {B}


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


def test_a_member_is_ended_only_for_its_own_pod_and_nonce() -> None:
    members = {
        "g1-w-0-0000000001": MemberRecord("w-0", 1.0, A, "w-0"),  # the dead instance
        "g2-w-0-0000000002": MemberRecord("w-0", 2.0, B, "w-0"),  # the restarted instance
        "g3-w-1-0000000003": MemberRecord("w-1", 3.0, A, "w-1"),  # the nonce under another pod's name
        "g4-w-0-0000000004": MemberRecord("w-0", 4.0),  # no nonce recorded
        "g5-w-0-0000000005": None,  # unreadable data
    }
    assert members_to_end("w-0", {A}, members) == ["g1-w-0-0000000001"]
    assert members_to_end("w-0", set(), members) == []
    assert members_to_end("w-9", {A, B}, members) == []


def test_member_record_round_trip_and_compatibility() -> None:
    record = MemberRecord("w-0", 12.5, A, "w-0")
    assert decode_member(encode_member(record)) == record
    assert decode_member(b'{"id": "w-0", "joined": 3.0}') == MemberRecord("w-0", 3.0)  # written before the field
    with pytest.raises(CorruptDataError):
        decode_member(b"[1]")
    with pytest.raises(CorruptDataError):
        decode_member(b'{"id": "w", "instance": 7}')


def test_options_validate_the_instance() -> None:
    assert Options(hosts="h:1", group="/g", instance=A, pod="w-0").instance == A
    with pytest.raises(InvalidInputError):
        Options(hosts="h:1", group="/g", instance="not-a-nonce")


def test_spec_failover_is_opt_in() -> None:
    base = {"zookeeper": {"connect": "zk:2181"}}
    assert ResourceGroupSpec.parse(base).failover is FailoverMode.SESSION_EXPIRY
    selector = {"matchLabels": {"app": "w"}}
    spec = ResourceGroupSpec.parse({**base, "failover": "KubeletConfirmed", "podSelector": selector})
    assert spec.failover is FailoverMode.KUBELET_CONFIRMED
    assert spec.pod_selector == PodSelector.model_validate({"matchLabels": {"app": "w"}})
    assert spec.pod_selector.selects({"app": "w", "x": "y"}) and not spec.pod_selector.selects({"app": "v"})
    assert not spec.pod_selector.selects(None)
