"""ZooKeeper digest credentials whose password lives in a file that may change while the member runs
(a mounted Kubernetes Secret: the kubelet swaps the files in place).

No password reaches a log or a repr: :class:`DigestState` hides its passwords, and importing this
module gives the ``kazoo.client`` logger (the one every client here logs through) a filter that
replaces the secret of each authentication packet kazoo logs at DEBUG level (``Auth(... auth='user:password')``)
with ``<redacted>`` (:func:`redact_kazoo_auth`).

:class:`PasswordFile` is what :class:`~rebalanser.options.Options` takes instead of a fixed
``(user, password)`` pair. The member then re-reads the file every ``poll_interval`` seconds
(:class:`PasswordWatcher`); when the content changes it adds the new password to its live session,
keeps it for every later session, and gives the nodes it creates from then on an ACL naming the new
password *and* the previous one for ``previous_grace`` seconds (:class:`DigestState`), so that members
that have not noticed the change yet can still write them. A file that becomes empty or unreadable is
reported (once per distinct problem) and the credentials in use are kept.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from kazoo.client import KazooClient
from kazoo.protocol.serialization import Auth
from kazoo.security import ACL, Id, Permissions, make_acl, make_digest_acl

from rebalanser.errors import InvalidInputError

__all__ = ["DigestState", "PasswordFile", "PasswordFileError", "PasswordWatcher", "operator_acl", "read_password",
           "redact_kazoo_auth", "session_record_acl"]

log = logging.getLogger(__name__)

REDACTED = "<redacted>"


class _AuthRedactor(logging.Filter):
    """Rewrites a log record's arguments so that no kazoo ``Auth`` packet shows its secret."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and any(isinstance(arg, Auth) for arg in args):
            record.args = tuple(_redacted(arg) for arg in args)
        elif isinstance(args, Auth):
            record.args = (_redacted(args),)
        return True


def _redacted(arg: object) -> object:
    if isinstance(arg, Auth):
        user = str(arg.auth).partition(":")[0] if arg.scheme == "digest" else ""
        return Auth(arg.auth_type, arg.scheme, f"{user}:{REDACTED}" if user else REDACTED)
    return arg


def redact_kazoo_auth(logger: logging.Logger | None = None) -> None:
    """Gives ``logger`` (default ``kazoo.client``) the redacting filter, once."""
    target = logger if logger is not None else logging.getLogger("kazoo.client")
    if not any(isinstance(f, _AuthRedactor) for f in target.filters):
        target.addFilter(_AuthRedactor())


redact_kazoo_auth()


class PasswordFileError(Exception):
    """The password file cannot be used (unreadable, empty, not UTF-8)."""


@dataclass(frozen=True)
class PasswordFile:
    """Digest credentials: ``username`` and the password held in ``path`` (surrounding whitespace is
    ignored), re-read every ``poll_interval`` seconds. After a change, nodes the member creates also
    name the previous password for ``previous_grace`` seconds (0: the new one only)."""

    username: str
    path: str
    poll_interval: float = 5.0
    previous_grace: float = 120.0

    def __post_init__(self) -> None:
        if not isinstance(self.username, str) or not self.username:
            raise InvalidInputError("PasswordFile needs a non-empty username")
        if not isinstance(self.path, str) or not self.path:
            raise InvalidInputError("PasswordFile needs a file path")
        if not isinstance(self.poll_interval, int | float) or not 0.05 <= self.poll_interval <= 3600:
            raise InvalidInputError(f"poll_interval must be a number in [0.05, 3600], got {self.poll_interval!r}")
        if not isinstance(self.previous_grace, int | float) or not 0 <= self.previous_grace <= 86400:
            raise InvalidInputError(f"previous_grace must be a number in [0, 86400], got {self.previous_grace!r}")


def read_password(path: str) -> str:
    """The password in ``path``, stripped; :class:`PasswordFileError` if there is none to use."""
    try:
        with open(path, encoding="utf-8") as f:
            password = f.read().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise PasswordFileError(f"cannot read the password file {path}: {exc}") from exc
    if not password:
        raise PasswordFileError(f"the password file {path} is empty")
    return password


@dataclass(frozen=True)
class DigestState:
    """The passwords of one member at one instant: the current one, and the previous one with the
    (monotonic) instant until which new nodes still name it. Pure: no I/O, no clock of its own."""

    username: str
    current: str = field(repr=False)
    previous: str | None = field(default=None, repr=False)
    previous_until: float = 0.0

    def rotated(self, password: str, now: float, grace: float) -> DigestState:
        """After the file changed to ``password`` at ``now`` (the same password: unchanged)."""
        if password == self.current:
            return self
        return DigestState(self.username, password, self.current, now + grace)

    def auth(self) -> str:
        """The credential of the current password for ``add_auth("digest", ...)``."""
        return f"{self.username}:{self.current}"

    def acl(self, now: float) -> list[ACL]:
        """The ACL of a node created at ``now``: all permissions for the current password, and for the
        previous one while its grace lasts."""
        entries = [make_digest_acl(self.username, self.current, all=True)]
        if self.previous is not None and now < self.previous_until:
            entries.append(make_digest_acl(self.username, self.previous, all=True))
        return entries


def operator_acl(operator_id: str) -> ACL:
    """Every permission for the operator's identity, given as ``digest:<user>:<hash>`` or, for an operator
    that authenticates with its TLS client certificate, ``x509:<subject>`` (the forms
    REBALANSER_ZK_OPERATOR_ID holds); :class:`InvalidInputError` for anything else."""
    scheme, _, ident = operator_id.partition(":")
    if scheme == "x509" and ident.strip():
        return ACL(Permissions.ALL, Id("x509", ident))
    user, _, digest = ident.partition(":")
    if scheme != "digest" or not user or not digest or ":" in digest:
        raise InvalidInputError(f"the operator's id {operator_id!r} is not digest:<user>:<hash> or x509:<subject>")
    return ACL(Permissions.ALL, Id("digest", ident))


def session_record_acl(group_acl: Sequence[ACL] | None, readers: Sequence[ACL] = ()) -> list[ACL]:
    """The ACL of a member's session record (``G/sessions/<guid>-<id>``, which holds its session's
    password): READ, and nothing else, for every digest and x509 identity of ``group_acl`` (the ACL the member
    gives the nodes it creates: its credentials, and during a rotation's grace the previous password too; or
    its client certificate's identity), and for ``readers``. Without such an identity (the quick start
    without credentials, where anybody may delete any claim anyway) the record is world-readable.

    ``readers`` is where the operator's own identity goes once it has one (a later issue): the record
    should then name that identity alone, and the group's entries can be dropped from it."""
    own = [make_acl(e.id.scheme, e.id.id, read=True) for e in group_acl or () if e.id.scheme in ("digest", "x509")]
    extra = [ACL(Permissions.READ, Id(e.id.scheme, e.id.id)) for e in readers]
    named = [*own, *(e for e in extra if e not in own)]
    return named or [make_acl("world", "anyone", read=True)]


class PasswordWatcher:
    """Polls a :class:`PasswordFile` for one KazooClient and moves the client to the new password when
    the file changes: ``add_auth`` on the live session (kazoo keeps it for every later connection) and
    a new ``default_acl`` for the nodes created from then on. ``on_rotated`` is called (from the
    watcher's thread) after each change has been applied."""

    def __init__(
        self, zk: KazooClient, source: PasswordFile, password: str,
        on_rotated: Callable[[DigestState], None] | None = None, extra_acl: Sequence[ACL] = (),
    ) -> None:
        self._zk, self._source, self._on_rotated = zk, source, on_rotated
        self._extra_acl = list(extra_acl)  # the operator's identity, named by every node created
        self._state = DigestState(source.username, password)
        self._reported: str | None = None  # the file problem last reported (each is reported once)
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rebalanser-password", daemon=True)
        self._apply_acl(time.monotonic())

    @property
    def state(self) -> DigestState:
        return self._state

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def check_once(self) -> bool:
        """Reads the file once; True if the password changed (and the client was moved to it)."""
        now = time.monotonic()
        try:
            password = read_password(self._source.path)
        except PasswordFileError as exc:
            if str(exc) != self._reported:
                self._reported = str(exc)
                log.warning("%s; keeping the credentials in use", exc)
            self._apply_acl(now)
            return False
        if self._reported is not None:
            log.info("the password file %s is readable again", self._source.path)
            self._reported = None
        state = self._state.rotated(password, now, self._source.previous_grace)
        if state is self._state:
            self._apply_acl(now)
            return False
        self._state = state
        try:
            self._zk.add_auth_async("digest", state.auth())  # also kept for every later connection
        except Exception as exc:  # the session is closed or closing: auth_data still holds it
            log.debug("add_auth not sent: %r", exc)
        self._apply_acl(now)
        log.warning(
            "ZooKeeper digest credentials of %s rotated (password file %s changed): new password added to "
            "the session; new nodes name it%s",
            self._source.username, self._source.path,
            f" and the previous one for {self._source.previous_grace:g}s" if self._source.previous_grace else "",
        )
        if self._on_rotated is not None:
            self._on_rotated(state)
        return True

    def _apply_acl(self, now: float) -> None:
        self._zk.default_acl = [*self._state.acl(now), *self._extra_acl]

    def _run(self) -> None:
        while not self._stopped.wait(self._source.poll_interval):
            try:
                self.check_once()
            except Exception:
                log.exception("checking the password file %s failed", self._source.path)
