"""Confirmed-death failover: which member nodes a pod's status proves dead (``choice``, pure), ending
closing their sessions in ZooKeeper (``endmember``, ``sessionclose``); the pod watch's glue is
:mod:`rebalanser_operator.podwatch`, in the layer above."""

from rebalanser_operator.failover.choice import EndedInstance, PodRef, ended_instances, members_to_end

__all__ = ["EndedInstance", "PodRef", "ended_instances", "members_to_end"]
