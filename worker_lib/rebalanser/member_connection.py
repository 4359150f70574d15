"""The member's ZooKeeper client and what hangs off it: the member's storage (:mod:`member_store`), the
claim book (:mod:`claims`), the roster (:mod:`membership`), the claims' re-check (:mod:`claimcheck`),
the lease prober and the password watcher (:mod:`session`). Opened, connected, begun and closed in that
order, by the member (:mod:`rebalanser.member_loop`)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from kazoo.client import KazooClient

from rebalanser.claimcheck import Rechecker, Verified
from rebalanser.claims import ClaimBook
from rebalanser.errors import RebalanserError
from rebalanser.lease import Lease
from rebalanser.member_store import Identity, KazooMemberStore
from rebalanser.membership import Roster
from rebalanser.options import Options
from rebalanser.paths import GroupPaths
from rebalanser.session import LeaseProber, handshakes, make_client, password_watcher, session_timeout

log = logging.getLogger("rebalanser.client")  # the member's log, as before this was split out


class Opened:
    """What exists once the client is made (before it connects)."""

    def __init__(self, zk: KazooClient, store: KazooMemberStore, book: ClaimBook, roster: Roster,
                 rechecker: Rechecker) -> None:
        self.zk, self.store, self.book, self.roster, self.rechecker = zk, store, book, roster, rechecker


class MemberConnection:
    def __init__(self, options: Options, paths: GroupPaths, lease: Lease) -> None:
        self._options, self._paths, self._lease = options, paths, lease
        self.opened: Opened | None = None
        self.prober: LeaseProber | None = None

    def open(self, instance_digest: str | None, on_state: Callable[[str], None],
             on_lost: Callable[[str, int], None], on_fake: Callable[[str], None]) -> Opened:
        """Makes the client (not connected yet): ``on_state`` is its connection listener, ``on_lost``
        the claim book's (a claim of ours seen deleted), ``on_fake`` told of a persistent node found
        where only ephemeral ones belong."""
        opts = self._options
        zk = make_client(opts)
        store = KazooMemberStore(zk, self._paths, Identity(
            opts.member_id, instance_digest, opts.pod, opts.pod_uid, opts.pod_namespace, opts.container))
        shakes = handshakes(zk)
        book = ClaimBook(zk, self._paths, opts.member_id, on_fake=on_fake, on_lost=on_lost,
                         verified=Verified(lambda: shakes.connection))
        rechecker = Rechecker(zk, book, lambda: session_timeout(zk))
        zk.add_listener(rechecker.on_state)
        roster = Roster(zk, self._paths, on_fake=on_fake)
        zk.add_listener(on_state)
        self.opened = Opened(zk, store, book, roster, rechecker)
        return self.opened

    def connect(self, timeout: float, stopped: Callable[[], bool]) -> None:
        """kazoo's ``start``, also ended once ``stopped()`` (the client stopped from another thread,
        say an asyncio caller interrupted while connecting): kazoo's own waits for the whole timeout."""
        assert self.opened is not None
        zk = self.opened.zk
        connected = zk.start_async()
        deadline = time.monotonic() + timeout
        while not connected.wait(min(0.1, max(0.0, deadline - time.monotonic()))):
            if stopped():
                raise RebalanserError("stopped while connecting to ZooKeeper")
            if time.monotonic() >= deadline:
                raise zk.handler.timeout_exception("Connection time-out")

    def begin(self, on_lease_expired: Callable[[], None]) -> None:
        """Connected: the lease prober, the password watcher and the claims' re-check start."""
        assert self.opened is not None
        zk = self.opened.zk
        self.prober = LeaseProber(zk, self._paths.root, self._lease, on_lease_expired)
        self.prober.start()
        watcher = password_watcher(zk)
        if watcher is not None:
            watcher.start()
        self.opened.rechecker.start()

    def close(self) -> None:
        """Stops everything begun, then the client (its session ends: every ephemeral node of it goes)."""
        if self.prober is not None:
            self.prober.stop()
        if self.opened is None:
            return
        self.opened.rechecker.stop()
        zk = self.opened.zk
        watcher = password_watcher(zk)
        if watcher is not None:
            watcher.stop()
        try:
            zk.stop()
            zk.close()
        except Exception:
            log.debug("error closing the ZooKeeper client", exc_info=True)
