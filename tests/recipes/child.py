"""A separate process that takes part in a recipe, reports on stdout, and waits to be SIGKILLed.

Usage: python -m tests.recipes.child <hosts> <kind> <base path> <arg>
kinds: ``discovery`` (arg service/instance), ``bag`` (arg ephemeral item id), ``leader`` (arg identity),
``worker`` (arg identity; a RoleMatcher). Prints ``READY`` once set up, then ``ELECTED`` or
``ACQUIRED <job>`` as things happen. Its session timeout is 1 s so its death is noticed quickly.
"""

from __future__ import annotations

import sys
import threading

from kazoo.client import KazooClient
from rebalanser.recipes import Discovery, DistributedBag, LeaderQueue, RoleMatcher


def say(line: str) -> None:
    print(line, flush=True)


def run(client: KazooClient, kind: str, base: str, arg: str) -> object:
    if kind == "discovery":
        service, instance = arg.split("/")
        discovery = Discovery(client, base)
        discovery.register(service, instance, {"pid": "child"})
        return discovery
    if kind == "bag":
        bag = DistributedBag(client, base)
        bag.add(b"child", item_id=arg, ephemeral=True)
        return bag
    if kind == "leader":
        queue = LeaderQueue(client, base, identity=arg, on_elected=lambda: say("ELECTED"))
        queue.start()
        return queue
    if kind == "worker":
        matcher = RoleMatcher(client, base, identity=arg, on_job_acquired=lambda job: say(f"ACQUIRED {job}"))
        matcher.start()
        return matcher
    raise SystemExit(f"unknown kind {kind!r}")


def main() -> None:
    hosts, kind, base, arg = sys.argv[1:5]
    client = KazooClient(hosts=hosts, timeout=1.0)
    client.start(timeout=15)
    keep = run(client, kind, base, arg)
    say("READY")
    threading.Event().wait()
    del keep


if __name__ == "__main__":
    main()
