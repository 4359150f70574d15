#!/usr/bin/env bash
# shellcheck disable=SC2016  # the single-quoted `bash -c` scripts below get their values as "$1"...
# Build what the local cluster's node needs, besides the control plane of
# scripts/build-controlplane.sh, into a cache outside the work tree; prints the bin directory.
#
#   kubelet, kubeadm, kube-controller-manager, kube-scheduler, kube-proxy
#                  k8s.io/kubernetes, pinned by e2e/node/go.mod (same pins as e2e/controlplane)
#   kind           sigs.k8s.io/kind@$KIND_VERSION (go install, outside any module)
#   coredns        the cluster DNS server: CoreDNS $COREDNS_VERSION with the plugins the cluster uses
#                  (e2e/coredns, pinned by its go.mod)
#   pause          the sandbox process, build/pause/linux/pause.c of the k8s.io/kubernetes module
#                  source, compiled static with gcc
#
#   scripts/build-node.sh            build if needed; print the bin dir
#   scripts/build-node.sh --bin-dir  print the bin dir; exit 1 if it is not built yet
#
# Cache: ${REBALANSER_CACHE:-$HOME/.cache/rebalanser}/node-<hash>/bin/, where <hash> covers RECIPE,
# the versions below, the Go toolchain, e2e/node/go.{mod,sum} and e2e/coredns/. The Go build cache is shared with
# the control-plane build, so most Kubernetes packages are compiled once.
set -euo pipefail

# Bump RECIPE when the way the binaries are built changes (flags, ldflags, layout).
RECIPE=2
KIND_VERSION=v0.33.0
# The pause version that kubeadm of this Kubernetes version expects (its image tag).
PAUSE_VERSION=3.10.1

NAME=build-node
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/lib/build.sh
source "$ROOT/scripts/lib/build.sh"
MOD="$ROOT/e2e/node"
COREDNS_MOD="$ROOT/e2e/coredns"
CACHE="${REBALANSER_CACHE:-$HOME/.cache/rebalanser}"
find_go

K8S_VERSION="$(sed -nE 's/^(require)?[[:space:]]*k8s\.io\/kubernetes (v1\.[0-9]+\.[0-9]+).*/\2/p' "$MOD/go.mod" | head -n1)"
[[ "$K8S_VERSION" =~ ^v1\.([0-9]+)\.[0-9]+$ ]] || die "cannot read the k8s.io/kubernetes version from $MOD/go.mod"
K8S_MINOR="${BASH_REMATCH[1]}"
# The CoreDNS release that kubeadm of this Kubernetes version deploys (its image tag).
COREDNS_VERSION="$(sed -nE 's/^require github\.com\/coredns\/coredns (v[^ ]+)$/\1/p' "$COREDNS_MOD/go.mod")"
[[ -n "$COREDNS_VERSION" ]] || die "cannot read the CoreDNS version from $COREDNS_MOD/go.mod"
GO_VERSION="$("$GO" env GOVERSION GOOS GOARCH | tr '\n' ' ')"
HASH="$({
    printf 'recipe=%s kind=%s coredns=%s pause=%s go=%s\n' \
        "$RECIPE" "$KIND_VERSION" "$COREDNS_VERSION" "$PAUSE_VERSION" "$GO_VERSION"
    cat "$MOD/go.mod" "$MOD/go.sum" "$COREDNS_MOD/go.mod" "$COREDNS_MOD/go.sum" "$COREDNS_MOD/main.go"
} | sha256sum | cut -c1-16)"
DIR="$CACHE/node-$HASH"
BIN="$DIR/bin"
K8S_TOOLS=(kubelet kubeadm kube-controller-manager kube-scheduler kube-proxy)
TOOLS=("${K8S_TOOLS[@]}" kind coredns pause)

complete() {
    [[ -f "$DIR/.complete" ]] || return 1
    local t
    for t in "${TOOLS[@]}"; do [[ -x "$BIN/$t" ]] || return 1; done
}

if [[ "${1:-}" == "--bin-dir" ]]; then
    complete || { log "not built yet: $BIN (run scripts/build-node.sh)"; exit 1; }
    echo "$BIN"; exit 0
elif [[ $# -gt 0 ]]; then
    echo "usage: $0 [--bin-dir]" >&2; exit 2
fi
if complete; then echo "$BIN"; exit 0; fi

mkdir -p "$BIN"
lock_build "$DIR"
if complete; then echo "$BIN"; exit 0; fi

go_static_env
TMP="$DIR/tmp"
rm -rf "$TMP"
mkdir -p "$TMP"
total_start=$SECONDS
log "building the node (kubernetes $K8S_VERSION, kind $KIND_VERSION, coredns $COREDNS_VERSION) into $BIN"

missing_k8s=()
for t in "${K8S_TOOLS[@]}"; do [[ -x "$BIN/$t" ]] || missing_k8s+=("k8s.io/kubernetes/cmd/$t"); done
if ((${#missing_k8s[@]})); then
    K8S_LDFLAGS="-s -w"
    for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        K8S_LDFLAGS+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$K8S_MINOR"
        K8S_LDFLAGS+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
    done
    run_step "${missing_k8s[*]##*/}" "$DIR/build-k8s.log" \
        bash -c 'cd "$1" && "$2" build -v -ldflags="$3" -o "$4/" "${@:5}"' \
        _ "$MOD" "$GO" "$K8S_LDFLAGS" "$TMP" "${missing_k8s[@]}"
    for t in "${missing_k8s[@]}"; do mv -f "$TMP/${t##*/}" "$BIN/"; done
fi

if [[ ! -x "$BIN/kind" ]]; then
    run_step kind "$DIR/build-kind.log" \
        bash -c 'cd "$1" && GOBIN="$1" "$2" install -v -ldflags="-s -w" "sigs.k8s.io/kind@$3"' \
        _ "$TMP" "$GO" "$KIND_VERSION"
    mv -f "$TMP/kind" "$BIN/"
fi

if [[ ! -x "$BIN/coredns" ]]; then
    run_step coredns "$DIR/build-coredns.log" \
        bash -c 'cd "$1" && "$2" build -v -ldflags="-s -w" -o "$3/coredns" .' \
        _ "$COREDNS_MOD" "$GO" "$TMP"
    mv -f "$TMP/coredns" "$BIN/"
fi

if [[ ! -x "$BIN/pause" ]]; then
    command -v gcc >/dev/null 2>&1 || die "gcc is needed to build the pause binary"
    K8S_SRC="$(cd "$MOD" && "$GO" list -m -f '{{.Dir}}' k8s.io/kubernetes)"
    [[ -f "$K8S_SRC/build/pause/linux/pause.c" ]] || die "no build/pause/linux/pause.c in $K8S_SRC"
    run_step pause "$DIR/build-pause.log" \
        gcc -Os -Wall -Werror -static -DVERSION="v$PAUSE_VERSION-rebalanser" \
            -o "$TMP/pause" "$K8S_SRC/build/pause/linux/pause.c"
    strip "$TMP/pause"
    mv -f "$TMP/pause" "$BIN/"
fi

rm -rf "$TMP"
for t in "${TOOLS[@]}"; do [[ -x "$BIN/$t" ]] || die "build finished but $BIN/$t is missing"; done
printf 'kubernetes=%s\nkind=%s\ncoredns=%s\npause=%s\ngo=%s\nbuilt=%s\nseconds=%s\n' \
    "$K8S_VERSION" "$KIND_VERSION" "$COREDNS_VERSION" "$PAUSE_VERSION" "$GO_VERSION" \
    "$(date -u +%FT%TZ)" "$((SECONDS - total_start))" > "$DIR/.complete"
log "node binaries ready in $BIN ($((SECONDS - total_start))s)"
echo "$BIN"
