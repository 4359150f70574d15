"""What the ``rebalanser`` commands share: a parser whose errors are one line, the argument types that
reject a bad value there (durations, ports, member ids), and the exit codes (README, "The worker CLI")."""

from __future__ import annotations

import argparse
import math
import sys
from typing import NoReturn

from rebalanser.errors import InvalidInputError
from rebalanser.paths import validate_member_id

__all__ = [
    "EXIT_EXPIRED",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_NO_GROUP",
    "EXIT_TERMINATED",
    "EXIT_UNREACHABLE",
    "EXIT_USAGE",
    "OneLineParser",
    "member_id",
    "non_negative_seconds",
    "port",
    "positive_seconds",
]

EXIT_FAILED = 1  # refused or failed (the reason on stderr)
EXIT_USAGE = 2  # bad input: an argument, an option, a connect string, a file
EXIT_EXPIRED = 3  # the session expired under the 'shutdown' policy
EXIT_UNREACHABLE = 4  # no ZooKeeper server answered within the connect timeout
EXIT_NO_GROUP = 5  # the group does not exist, or it was deleted under the worker
EXIT_INTERRUPTED = 130  # Ctrl-C (SIGINT) before the worker joined, or during a status or group command
EXIT_TERMINATED = 143  # SIGTERM before the worker joined


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line on stderr, exit 2 (argparse prints the whole
    usage first)."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: {message} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(EXIT_USAGE)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number of seconds")
    return value


def positive_seconds(text: str) -> float:
    """A duration that must be more than 0 (a tick of 0 would loop without pause)."""
    value = _seconds(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text!r}")
    return value


def non_negative_seconds(text: str) -> float:
    """A duration for which 0 means "none" (a grace, a quiet window)."""
    value = _seconds(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or a positive number of seconds, got {text!r}")
    return value


def port(text: str) -> int:
    """A TCP port, or 0 for none."""
    if not text.isdigit() or not 0 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port from 1 to 65535 (0: none), got {text!r}")
    return int(text)


def member_id(text: str) -> str:
    """A member id as given (never replaced by a default when empty)."""
    try:
        return validate_member_id(text)
    except InvalidInputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
