"""Exceptions raised to users of the library."""


class RebalanserError(Exception):
    """Base class of every error the library raises."""


class StopTimeoutError(RebalanserError):
    """A stop (or start) callback outlived ``stop_timeout`` (``start_timeout``); the member stopped
    waiting for it: after a stop callback, the resources were released anyway."""


class InvalidInputError(RebalanserError, ValueError):
    """Options, names or paths that can never work; the message says which and why."""


class SessionExpiredError(RebalanserError):
    """The ZooKeeper session expired and the policy is ``shutdown``: the client has ended."""


class NotCoordinatorError(RebalanserError):
    """A coordinator write was fenced off: another member won a later epoch, or the coordinator's own
    member node is gone."""


class EpochLostError(NotCoordinatorError):
    """``G/epoch`` is gone: the coordinator resigns, and whoever takes office next re-creates it."""


class CorruptDataError(RebalanserError):
    """Data found in ZooKeeper that this library did not write (or cannot parse).

    ``kind`` names the record (``barrier``, ``state``, ``config``, ``assignment``, ``stopped``,
    ``owner``, ``member``), ``path`` the znode it was read from (when known), ``reason`` what is wrong with it.
    """

    def __init__(self, reason: str, *, path: str = "", kind: str = "") -> None:
        super().__init__(f"{path}: {reason}" if path else reason)
        self.reason, self.path, self.kind = reason, path, kind


class DuplicateMemberError(InvalidInputError):
    """Another live member of the group uses this member id (each id must be unique in its group)."""


class GroupNotFoundError(RebalanserError):
    """The group does not exist: ``rebalanser group create`` (or a ResourceGroup) makes it, or a member
    created with ``Options(create_group=True)`` makes it on its first join."""


class GroupDeletedError(RebalanserError):
    """The group was marked deleted (``rebalanser group delete``, :meth:`rebalanser.admin.GroupAdmin.delete`):
    the member left it and ended, and does not re-create it."""
