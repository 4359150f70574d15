#!/usr/bin/env bash
# shellcheck disable=SC2016  # the single-quoted `bash -c` script below gets its values as "$1"...
# Build helm-docs (the generator of the chart's README from values.yaml and README.md.gotmpl) from
# its Go module into the shared cache, and print the binary's path on stdout.
#
#   scripts/install-helm-docs.sh          build if needed; print the path
#   scripts/install-helm-docs.sh --path   print the path; exit 1 if it is not built yet
#
# Cache: ${REBALANSER_CACHE:-$HOME/.cache/rebalanser}/helm-docs-<hash>/bin/helm-docs, where <hash>
# covers HELM_DOCS_VERSION, the Go toolchain and RECIPE below. A `.complete` stamp marks a finished
# build; a second run is a cache hit. Progress goes to stderr (a cold build takes about a minute on
# 2 cores: helm-docs compiles part of Helm). `make chart-readme` regenerates the README with it.
set -euo pipefail

# Bump RECIPE when the way the binary is built changes (flags, ldflags, layout).
RECIPE=1
HELM_DOCS_VERSION=v1.14.2

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NAME=install-helm-docs
# shellcheck source=scripts/lib/build.sh
source "$ROOT/scripts/lib/build.sh"
CACHE="${REBALANSER_CACHE:-$HOME/.cache/rebalanser}"

if [[ $# -gt 1 || ( $# -eq 1 && "$1" != "--path" ) ]]; then
    echo "usage: $0 [--path]" >&2; exit 2
fi
find_go
GO_VERSION="$("$GO" env GOVERSION GOOS GOARCH | tr '\n' ' ')"
HASH="$(printf 'recipe=%s helm-docs=%s go=%s\n' "$RECIPE" "$HELM_DOCS_VERSION" "$GO_VERSION" \
    | sha256sum | cut -c1-16)"
DIR="$CACHE/helm-docs-$HASH"
BIN="$DIR/bin/helm-docs"

complete() { [[ -f "$DIR/.complete" && -x "$BIN" ]]; }

if [[ "${1:-}" == "--path" ]]; then
    complete || { log "not built yet: $BIN (run scripts/install-helm-docs.sh)"; exit 1; }
    echo "$BIN"; exit 0
fi
if complete; then echo "$BIN"; exit 0; fi

mkdir -p "$DIR/bin"
lock_build "$DIR"
if complete; then echo "$BIN"; exit 0; fi

go_static_env

TMP="$DIR/tmp"
rm -rf "$TMP"
mkdir -p "$TMP"
start=$SECONDS
log "building helm-docs $HELM_DOCS_VERSION into $DIR/bin"
# Outside any module, so no go.mod of this repository can interfere; pinned by @version (and go.sum
# checked against the checksum database). main.version is what `helm-docs --version` prints.
run_step "helm-docs" "$DIR/build.log" \
    bash -c 'cd "$1" && GOBIN="$1" "$2" install -v -ldflags="-s -w -X main.version=${3#v}" \
             "github.com/norwoodj/helm-docs/cmd/helm-docs@$3"' \
    _ "$TMP" "$GO" "$HELM_DOCS_VERSION"
mv -f "$TMP/helm-docs" "$BIN"
rm -rf "$TMP"
printf 'helm-docs=%s\ngo=%s\nbuilt=%s\nseconds=%s\n' \
    "$HELM_DOCS_VERSION" "$GO_VERSION" "$(date -u +%FT%TZ)" "$((SECONDS - start))" >"$DIR/.complete"
log "helm-docs ready: $BIN ($((SECONDS - start))s)"
echo "$BIN"
