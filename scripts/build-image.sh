#!/usr/bin/env bash
# make image: build the repository's Dockerfile into rebalanser:dev from the Python base made here
# (scripts/build-base-images.sh; no public image registry is needed), and load it into the local
# cluster's container runtime when the cluster is up. Docker's layer cache makes a rebuild with
# unchanged sources take seconds. Prints the image name.
#
#   scripts/build-image.sh            build, and load into the cluster if it is up
#   scripts/build-image.sh --no-load  build only
# Environment: IMAGE (default $REBALANSER_IMAGE, else rebalanser:dev), PYTHON_IMAGE (a base to use instead of the local one).
set -euo pipefail
NAME=build-image
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/lib/build.sh
source "$ROOT/scripts/lib/build.sh"
# shellcheck source=scripts/lib/docker.sh
source "$ROOT/scripts/lib/docker.sh"
CACHE="${REBALANSER_CACHE:-$HOME/.cache/rebalanser}"
IMAGE="${IMAGE:-${REBALANSER_IMAGE:-rebalanser:dev}}"
LOAD=1
case "${1:-}" in
    "") ;;
    --no-load) LOAD=0 ;;
    *) echo "usage: $0 [--no-load]" >&2; exit 2 ;;
esac

"$ROOT/scripts/install-docker.sh"
BASE="${PYTHON_IMAGE:-$("$ROOT/scripts/build-base-images.sh")}"
start=$SECONDS
mkdir -p "$CACHE/images"
log "docker build -t $IMAGE (PYTHON_IMAGE=$BASE; log: $CACHE/images/rebalanser-build.log)"
if ! "$DOCKER" build --build-arg "PYTHON_IMAGE=$BASE" -t "$IMAGE" "$ROOT" >"$CACHE/images/rebalanser-build.log" 2>&1; then
    tail -n 30 "$CACHE/images/rebalanser-build.log" >&2
    die "docker build failed (log: $CACHE/images/rebalanser-build.log)"
fi
log "built $IMAGE ($((SECONDS - start))s)"
if ((LOAD)) && "$ROOT/scripts/cluster.sh" status >/dev/null 2>&1; then
    start=$SECONDS
    "$ROOT/scripts/cluster.sh" load "$IMAGE"
    log "loaded $IMAGE into the cluster ($((SECONDS - start))s)"
fi
echo "$IMAGE"
