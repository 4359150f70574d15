#!/usr/bin/env bash
# Resolves the ZooKeeper server jars (pinned in scripts/zookeeper-pom.xml) into a cache outside the
# work tree; re-resolves only when the pom changes. Prints the lib directory.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${REBALANSER_CACHE:-$HOME/.cache/rebalanser}"
sum="$(sha256sum "$here/zookeeper-pom.xml" | cut -c1-12)"
dest="$cache/zookeeper-$sum"
if [[ ! -f "$dest/.complete" ]]; then
  command -v java >/dev/null || { echo "java is required to run ZooKeeper" >&2; exit 1; }
  command -v mvn >/dev/null || { echo "mvn is required to fetch the ZooKeeper jars" >&2; exit 1; }
  rm -rf "$dest"; mkdir -p "$dest/lib"
  mvn -q -B -f "$here/zookeeper-pom.xml" dependency:copy-dependencies -DoutputDirectory="$dest/lib" >&2
  touch "$dest/.complete"
fi
ln -sfn "$dest" "$cache/zookeeper"
echo "$dest/lib"
