#!/usr/bin/env bash
# Build the ZooKeeper image of the local cluster (e2e/cluster/zookeeper/Dockerfile) from the server
# jars the tests use (scripts/install-zookeeper.sh) and Debian's Java runtime, on the local bookworm
# base. Tagged rebalanser/zookeeper:<zookeeper version> (what e2e/cluster/zookeeper.yaml runs) and
# :<version>-<hash>; prints the versioned tag. A second run with the same inputs is a cache hit.
set -euo pipefail
NAME=build-zookeeper-image
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/lib/build.sh
source "$ROOT/scripts/lib/build.sh"
# shellcheck source=scripts/lib/docker.sh
source "$ROOT/scripts/lib/docker.sh"
CACHE="${REBALANSER_CACHE:-$HOME/.cache/rebalanser}"

"$ROOT/scripts/install-docker.sh"
LIB="$("$ROOT/scripts/install-zookeeper.sh")"
BOOKWORM="$("$ROOT/scripts/build-base-images.sh" --bookworm)"
jar="$(cd "$LIB" && ls zookeeper-[0-9]*.jar)"
VERSION="${jar#zookeeper-}"; VERSION="${VERSION%.jar}"
SRC="$ROOT/e2e/cluster/zookeeper"
HASH="$({ echo "$BOOKWORM $LIB"; find "$SRC" -type f -print0 | sort -z | xargs -0 sha256sum | sed "s|$ROOT/||"; } \
    | sha256sum | cut -c1-12)"
IMAGE="rebalanser/zookeeper:$VERSION-$HASH"

if ! "$DOCKER" image inspect "$IMAGE" >/dev/null 2>&1; then
    start=$SECONDS
    ctx="$(mktemp -d "$CACHE/images/zk-build.XXXXXX")"
    trap 'rm -rf "$ctx"' EXIT
    cp -a "$SRC/." "$ctx/"
    mkdir -p "$ctx/lib"
    # Only this platform's native libraries (the pom's netty brings every platform's).
    find "$LIB" -maxdepth 1 -name '*.jar' ! -name '*osx*' ! -name '*windows*' ! -name '*aarch_64*' \
        -exec cp {} "$ctx/lib/" \;
    log "docker build $IMAGE (zookeeper $VERSION + Debian's Java runtime; log: $CACHE/images/zk-build.log)"
    if ! "$DOCKER" build --build-arg "BASE=$BOOKWORM" -t "$IMAGE" "$ctx" >"$CACHE/images/zk-build.log" 2>&1; then
        tail -n 30 "$CACHE/images/zk-build.log" >&2
        die "docker build of $IMAGE failed"
    fi
    log "built $IMAGE ($((SECONDS - start))s)"
fi
"$DOCKER" tag "$IMAGE" "rebalanser/zookeeper:$VERSION"
echo "$IMAGE"
