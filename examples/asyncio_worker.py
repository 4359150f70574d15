"""An asyncio consumer that works only on the resources its member owns.

    python examples/asyncio_worker.py --zk 127.0.0.1:2181 --group /rebalanser/demo [--id NAME]

Each owned resource gets a task that does one unit of work at a time, each only after ``client.token``
says the resource is still ours (and with that token, so a downstream system could fence it).
``on_revoked`` cancels the resources' tasks and waits for them: once it returns, nothing of ours runs on
them any more and the member may hand them on. Stop it with SIGTERM or Ctrl-C: it stops its resources
and leaves the group. One JSON line per event on stdout (``assigned``, ``revoked``, ``tick``, ``stopped``).
The group must exist (``rebalanser group create --zk ... --group ...``, or a ResourceGroup): the member
refuses a group that does not (``GroupNotFoundError``) rather than make one of its own.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import time
from collections.abc import Mapping, Sequence

import rebalanser
import rebalanser.aio


def emit(event: str, member: str, ts: int | None = None, **fields: object) -> None:
    record = {"event": event, "id": member, "ts": ts or time.monotonic_ns(), **fields}
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


class Consumer(rebalanser.aio.Handler):
    def __init__(self, member: str, period: float) -> None:
        self.member, self.period = member, period
        self.client: rebalanser.aio.Client | None = None
        self.tasks: dict[str, asyncio.Task[None]] = {}

    async def on_assigned(self, resources: Mapping[str, int]) -> None:
        emit("assigned", self.member, resources=sorted(resources))
        for name in resources:
            self.tasks[name] = asyncio.create_task(self.work(name))

    async def on_revoked(self, resources: Sequence[str]) -> None:
        stopping = [self.tasks.pop(name) for name in resources if name in self.tasks]
        for task in stopping:
            task.cancel()
        await asyncio.gather(*stopping, return_exceptions=True)
        emit("revoked", self.member, resources=list(resources))

    async def work(self, name: str) -> None:
        assert self.client is not None
        while True:
            started = time.monotonic_ns()
            token = self.client.token(name)  # None once the resource is no longer ours
            if token is not None:
                # ... one unit of work on `name`, tagged with `token` ...
                emit("tick", self.member, ts=started, resource=name, token=token)
            await asyncio.sleep(self.period)


async def main(args: argparse.Namespace) -> None:
    options = rebalanser.Options(hosts=args.zk, group=args.group, session_timeout=args.session_timeout,
                                 **({"member_id": args.id} if args.id else {}))
    consumer = Consumer(options.member_id, args.period)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    consumer.client = rebalanser.aio.Client(options, consumer)
    async with consumer.client:
        await stop.wait()
    emit("stopped", options.member_id)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--zk", required=True, help="ZooKeeper connect string")
    parser.add_argument("--group", required=True, help="group znode path")
    parser.add_argument("--id", help="stable member id (default: hostname-pid)")
    parser.add_argument("--session-timeout", type=float, default=10.0)
    parser.add_argument("--period", type=float, default=0.2, help="seconds between two units of work")
    asyncio.run(main(parser.parse_args()))
