#!/usr/bin/env bash
# Everything the real cluster needs that can be built ahead of time (make test runs this before
# pytest, so a clean clone builds it all): the Docker engine, the node binaries and the kind node
# image, the ZooKeeper image and rebalanser:dev. Each step is a cache hit when nothing changed.
# Where Docker cannot run here, prints one line and exits 0: the pod tests then skip themselves.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
rc=0
"$ROOT/scripts/install-docker.sh" 2>/tmp/rebalanser-docker-check.$$ || rc=$?
if ((rc == 3)); then
    echo "cluster prerequisites skipped: $(grep '^docker unavailable:' /tmp/rebalanser-docker-check.$$ | tail -n1)" >&2
    rm -f /tmp/rebalanser-docker-check.$$
    exit 0
fi
cat /tmp/rebalanser-docker-check.$$ >&2
rm -f /tmp/rebalanser-docker-check.$$
((rc == 0)) || exit "$rc"
start=$SECONDS
"$ROOT/scripts/build-node-image.sh" >/dev/null
"$ROOT/scripts/build-zookeeper-image.sh" >/dev/null
"$ROOT/scripts/build-image.sh" --no-load >/dev/null
((SECONDS - start < 5)) || echo "cluster prerequisites ready ($((SECONDS - start))s)" >&2
