"""``rebalanser group``: :mod:`rebalanser.admin` on the command line (create, resources, config, delete).

    rebalanser group create --zk HOSTS --group PATH [--algorithm global-barrier]
    rebalanser group resources add --zk HOSTS --group PATH orders-0 orders-1
    rebalanser group resources list --zk HOSTS --group PATH          # one name per line
    rebalanser group config --zk HOSTS --group PATH --min-interval 5
    rebalanser group delete --zk HOSTS --group PATH

Each takes the worker's connection, credential and TLS options (``rebalanser worker --help``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable
from typing import Any

from rebalanser.admin import MEMBERS_LEAVE_WAIT, Credentials, Deletion, GroupAdmin, connect
from rebalanser.cli_args import OneLineParser, non_negative_seconds, positive_seconds
from rebalanser.config import Algorithm, GroupConfig
from rebalanser.errors import InvalidInputError
from rebalanser.tls import TlsOptions

__all__ = ["add_parser", "run_group"]

ALGORITHMS = ["resource-barrier", "global-barrier"]


def add_parser(sub: argparse._SubParsersAction[OneLineParser],
               connection: Callable[[argparse.ArgumentParser], None]) -> None:
    """Adds ``group`` and its subcommands; ``connection`` adds the shared connection options."""
    g = sub.add_parser("group", help="create a group, add and remove its resources, set its config, delete it")
    actions = g.add_subparsers(dest="group_command", required=True)
    create = actions.add_parser("create", help="make the group exist (writes G/config when a setting is given)")
    connection(create)
    _settings(create)
    resources = actions.add_parser("resources", help="add, remove or list the group's resources")
    verbs = resources.add_subparsers(dest="resources_command", required=True)
    for verb, text in (("add", "create G/resources/NAME for each name"), ("remove", "delete them")):
        v = verbs.add_parser(verb, help=text)
        connection(v)
        v.add_argument("names", nargs="*", metavar="NAME")
        v.add_argument("--from-file", metavar="FILE", help="also the names in FILE, one per line ('-': stdin)")
    connection(verbs.add_parser("list", help="print the group's resources, one name per line"))
    config = actions.add_parser("config", help="change G/config (the named settings only) and print it")
    connection(config)
    _settings(config)
    config.add_argument("--clear", action="store_true",
                        help="delete G/config: every worker goes back to its own options")
    delete = actions.add_parser(
        "delete", help="delete the group's znodes (refused while members are live, naming them)")
    connection(delete)
    delete.add_argument("--force", action="store_true",
                        help="delete it even while members are live: they leave the group and end first "
                             "(a worker exits 5)")
    delete.add_argument("--wait", type=positive_seconds, default=MEMBERS_LEAVE_WAIT, metavar="SECONDS",
                        help="with --force, how long to wait for the members to leave (default: %(default)s)")


def _settings(p: argparse.ArgumentParser) -> None:
    p.add_argument("--algorithm", choices=ALGORITHMS, help="how rebalances hand resources over")
    p.add_argument("--min-interval", type=non_negative_seconds, metavar="SECONDS",
                   help="least time between two rebalances")
    p.add_argument("--max-interval", type=positive_seconds, metavar="SECONDS",
                   help="the most the interval may be raised to")
    p.add_argument("--departure-grace", type=non_negative_seconds, metavar="SECONDS",
                   help="how long a departed member's resources wait for it to come back")


def run_group(args: argparse.Namespace, credentials: Credentials | None, tls: TlsOptions | None) -> int:
    """Runs one ``group`` subcommand; errors propagate to :func:`rebalanser.cli.main`."""
    if args.group_command == "resources" and args.resources_command != "list":
        args.names = list(args.names) + _read_names(args.from_file)  # a bad file fails before connecting
    with connect(args.zk, credentials=credentials, tls=tls, timeout=args.connect_timeout) as zk:
        group = GroupAdmin(zk, args.group)
        command = args.group_command
        if command == "create":
            return _create(group, args)
        if command == "resources":
            return _resources(group, args)
        if command == "config":
            return _config(group, args)
        return _delete(group, args)


def _delete(group: GroupAdmin, args: argparse.Namespace) -> int:
    deletion = group.delete(force=args.force, wait=args.wait)
    print(_deleted(group.paths.root, deletion))
    return 0


def _deleted(root: str, deletion: Deletion) -> str:
    if not deletion.deleted:
        return f"{root} does not exist"
    line = f"deleted {root} ({deletion.deleted} znodes)"
    left = len(deletion.members) - len(deletion.stayed)
    if deletion.members:
        line += f"; {left} of {len(deletion.members)} members left it first"
    if deletion.stayed:
        line += f" (not within --wait: {', '.join(deletion.stayed[:5])})"
    return line


def _changes(args: argparse.Namespace) -> dict[str, Any]:
    found = {"algorithm": Algorithm.parse(args.algorithm) if args.algorithm else None,
             "min_interval": args.min_interval, "max_interval": args.max_interval,
             "departure_grace": args.departure_grace}
    return {key: value for key, value in found.items() if value is not None}


def _create(group: GroupAdmin, args: argparse.Namespace) -> int:
    changes = _changes(args)
    created = group.create()
    if changes:
        group.update_config(**changes)
    print(f"{'created' if created else 'exists'} {group.paths.root}")
    return 0


def _resources(group: GroupAdmin, args: argparse.Namespace) -> int:
    verb = args.resources_command
    if verb == "list":
        for name in group.resources():
            print(name)
        return 0
    names = args.names
    if not names:
        print(f"rebalanser group resources {verb}: name at least one resource", file=sys.stderr)
        return 2
    changed = group.add_resources(names) if verb == "add" else group.remove_resources(names)
    done = "added" if verb == "add" else "removed"
    print(f"{done} {len(changed)} of {len(set(names))} in {group.paths.root}")
    return 0


def _read_names(path: str | None) -> list[str]:
    """The names in ``path`` ('-': stdin), one per line; :class:`InvalidInputError` when it cannot be read."""
    if not path:
        return []
    if path == "-":
        return _names(sys.stdin)
    try:
        with open(path, encoding="utf-8") as stream:
            return _names(stream)
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise InvalidInputError(f"--from-file {path}: {reason}") from None


def _names(stream: Iterable[str]) -> list[str]:
    return [line.strip() for line in stream if line.strip()]


def _config(group: GroupAdmin, args: argparse.Namespace) -> int:
    changes = _changes(args)
    if args.clear:
        group.clear_config()
    config: GroupConfig | None = group.update_config(**changes) if changes else group.config()
    print(json.dumps(config.to_json()) if config is not None else "{}")
    return 0
