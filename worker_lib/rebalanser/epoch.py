"""Taking an epoch: the coordinator's term number, which is ``G/epoch``'s version.

A new coordinator raises the version to above every epoch it knows of: one above the current version,
and above every epoch recorded in the group (``G/state``, ``G/barrier``, the assignments) and every one
its member has seen. When ``G/epoch`` is missing (deleted, or the whole group re-created) it creates it
and sets it as often as needed, in ``multi`` batches, each fenced by the coordinator's own member node.
So epochs keep growing across deletion and re-creation of ``G/epoch`` whenever any record of an earlier
epoch survives. When none does (the whole group was re-created), versions start again at 1, and the
member-node check of every fenced write (see :mod:`writer`) is what keeps an earlier coordinator out.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    KazooException,
    NodeExistsError,
    NoNodeError,
    RolledBackError,
)

from rebalanser.errors import CorruptDataError, NotCoordinatorError
from rebalanser.writer import MAX_OPS

log = logging.getLogger(__name__)

#: A recorded epoch further than this above ``G/epoch``'s version is taken for bad data and ignored:
#: reaching it would cost one write per step.
MAX_EPOCH_JUMP = 100_000


@dataclass(frozen=True)
class Step:
    """One ``multi`` of a bump: create ``G/epoch`` if ``create``, then set it at versions
    ``first .. target - 1`` (each set raises the version by one), so it ends at ``target``."""

    create: bool
    first: int
    target: int
    final: bool  # the bump is complete after this step

    @property
    def sets(self) -> int:
        return self.target - self.first


def target_epoch(version: int | None, floor: int, max_jump: int = MAX_EPOCH_JUMP) -> tuple[int, bool]:
    """The epoch to take when ``G/epoch`` is at ``version`` (None: missing) and ``floor`` is the highest
    epoch known elsewhere; the flag says the floor was ignored as out of reach."""
    base = 0 if version is None else version
    target = base + 1
    if floor >= target:
        if floor + 1 - base > max_jump:
            return target, True
        target = floor + 1
    return target, False


def next_step(version: int | None, target: int, max_sets: int = MAX_OPS - 2) -> Step:
    """The next batch towards ``target`` from ``version`` (None: missing)."""
    first = 0 if version is None else version
    end = min(target, first + max_sets)
    return Step(create=version is None, first=first, target=end, final=end == target)


def take_epoch(
    zk: KazooClient,
    epoch_path: str,
    member_path: str,
    floor: int,
    active: Callable[[], bool],
    report: Callable[[CorruptDataError], None],
) -> int:
    """Raises ``G/epoch``'s version to a new epoch above ``floor`` and returns it. A ConnectionLoss is
    resolved by reading back the data (a fresh nonce marks the final write). Raises
    NotCoordinatorError when our member node is gone or ``active()`` turned False."""
    nonce = json.dumps({"node": member_path.rsplit("/", 1)[-1], "term": uuid.uuid4().hex}).encode()
    reported = False
    delay = 0.1
    while active():
        try:
            stat = zk.exists(epoch_path)
            version = None if stat is None else int(stat.version)
            target, ignored = target_epoch(version, floor)
            if ignored and not reported:
                reported = True
                report(CorruptDataError(
                    f"a recorded epoch ({floor}) lies more than {MAX_EPOCH_JUMP} above the epoch node's version "
                    f"({version}); ignored", path=epoch_path, kind="epoch"))
            while True:
                step = next_step(version, target)
                _commit(zk, epoch_path, member_path, step, nonce)
                if step.final:
                    return target
                version = step.target
        except ConnectionLoss:
            try:
                data, stat = zk.retry(zk.get, epoch_path)
            except NoNodeError:
                continue
            if data == nonce:
                return int(stat.version)
        except (BadVersionError, NodeExistsError, NoNodeError):
            continue  # someone else moved it meanwhile: read it again
        except KazooException as exc:
            log.info("taking an epoch failed (%r); retrying in %.1fs", exc, delay)
            time.sleep(delay)
            delay = min(2 * delay, 5.0)
    raise NotCoordinatorError("stopped before taking office")


def _commit(zk: KazooClient, epoch_path: str, member_path: str, step: Step, nonce: bytes) -> None:
    txn = zk.transaction()
    txn.check(member_path, -1)
    if step.create:
        txn.create(epoch_path, b"")
    for version in range(step.first, step.target):
        txn.set_data(epoch_path, nonce if step.final and version == step.target - 1 else b"", version=version)
    results = txn.commit()
    failures = [r for r in results if isinstance(r, Exception) and not isinstance(r, RolledBackError)]
    if not failures:
        return
    if isinstance(results[0], NoNodeError):
        raise NotCoordinatorError(f"our member node {member_path} is gone")
    raise failures[0]
