#!/usr/bin/env bash
# Everything the real cluster needs that can be built ahead of time (make test runs this before
# pytest, so a clean clone builds it all): the Docker engine, the node binaries and the kind node
# image, the ZooKeeper image and rebalanser:dev. Each step is a cache hit when nothing changed.
# The images that wait mostly on the network and the disk (base images, ZooKeeper, rebalanser:dev)
# are built while the Go builds compile. Where Docker cannot run here, prints one line and exits 0:
# the pod tests then skip themselves.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${REBALANSER_CACHE:-$HOME/.cache/rebalanser}"
mkdir -p "$CACHE"
check="$(mktemp)"
trap 'rm -f "$check"' EXIT
rc=0
"$ROOT/scripts/install-docker.sh" 2>"$check" || rc=$?
if ((rc == 3)); then
    echo "cluster prerequisites skipped: $(grep '^docker unavailable:' "$check" | tail -n1)" >&2
    exit 0
fi
cat "$check" >&2
((rc == 0)) || exit "$rc"

start=$SECONDS
images_log="$CACHE/cluster-prereqs-images.log"
(
    "$ROOT/scripts/build-base-images.sh" >/dev/null
    "$ROOT/scripts/build-image.sh" --no-load >/dev/null
    "$ROOT/scripts/build-zookeeper-image.sh" >/dev/null
) 2>"$images_log" &
images=$!
node_rc=0
"$ROOT/scripts/build-node-image.sh" >/dev/null || node_rc=$?
images_rc=0
wait "$images" || images_rc=$?
cat "$images_log" >&2
((node_rc == 0)) || { echo "cluster prerequisites: the node image failed" >&2; exit "$node_rc"; }
((images_rc == 0)) || { echo "cluster prerequisites: the images failed (log: $images_log)" >&2; exit "$images_rc"; }
((SECONDS - start < 5)) || echo "cluster prerequisites ready ($((SECONDS - start))s)" >&2
