#!/usr/bin/env bash
# shellcheck disable=SC2016  # the single-quoted `bash -c` scripts below get their values as "$1"...
# Build the local Kubernetes control plane (kube-apiserver, etcd, kubectl, helm) from Go
# modules into a cache outside the work tree, and print the bin directory on stdout.
#
#   scripts/build-controlplane.sh            build if needed; print the bin dir
#   scripts/build-controlplane.sh --bin-dir  print the bin dir; exit 1 if it is not built yet
#
# Cache: ${REBALANSER_CACHE:-$HOME/.cache/rebalanser}/controlplane-<hash>/bin/, where <hash>
# covers the pinned versions (e2e/controlplane/**/go.mod, go.sum, HELM_VERSION, the Go
# toolchain and RECIPE below). A `.complete` stamp marks a finished cache; a second run is a
# cache hit that costs well under a second. Progress goes to stderr (a cold build takes tens
# of minutes on 2 cores). See docs/controlplane.md.
set -euo pipefail

# Bump RECIPE when the way the binaries are built changes (flags, ldflags, layout).
RECIPE=1
HELM_VERSION=v3.19.5
# Kubernetes minor that helm v3.19 is built against (its client-go v0.34.x): used by
# `helm lint` / chartutil as the default cluster version, as helm's own Makefile stamps it.
HELM_K8S_MINOR=34

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CP="$ROOT/e2e/controlplane"
NAME=build-controlplane
# shellcheck source=scripts/lib/build.sh
source "$ROOT/scripts/lib/build.sh"
find_go
CACHE="${REBALANSER_CACHE:-$HOME/.cache/rebalanser}"

K8S_VERSION="$(sed -nE 's/^(require)?[[:space:]]*k8s\.io\/kubernetes (v1\.[0-9]+\.[0-9]+).*/\2/p' "$CP/go.mod" | head -n1)"
if [[ ! "$K8S_VERSION" =~ ^v1\.([0-9]+)\.[0-9]+$ ]]; then
    log "cannot read the k8s.io/kubernetes version from $CP/go.mod"; exit 1
fi
K8S_MINOR="${BASH_REMATCH[1]}"
ETCD_VERSION="$(sed -nE 's/^(require)?[[:space:]]*go\.etcd\.io\/etcd\/server\/v3 (v[^ ]+).*/\2/p' "$CP/etcd/go.mod" | head -n1)"

GO_VERSION="$("$GO" env GOVERSION GOOS GOARCH | tr '\n' ' ')"
HASH="$({
    printf 'recipe=%s helm=%s go=%s\n' "$RECIPE" "$HELM_VERSION" "$GO_VERSION"
    cat "$CP/go.mod" "$CP/go.sum" "$CP/etcd/go.mod" "$CP/etcd/go.sum"
} | sha256sum | cut -c1-16)"
DIR="$CACHE/controlplane-$HASH"
BIN="$DIR/bin"
TOOLS=(kube-apiserver etcd kubectl helm)

complete() {
    [[ -f "$DIR/.complete" ]] || return 1
    local t
    for t in "${TOOLS[@]}"; do [[ -x "$BIN/$t" ]] || return 1; done
}

if [[ "${1:-}" == "--bin-dir" ]]; then
    complete || { log "not built yet: $BIN (run scripts/build-controlplane.sh)"; exit 1; }
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
log "building the control plane (kubernetes $K8S_VERSION, etcd $ETCD_VERSION, helm $HELM_VERSION) into $BIN"
log "a cold build takes a long time (tens of minutes on 2 cores); later runs are cache hits"

if [[ ! -x "$BIN/kube-apiserver" || ! -x "$BIN/kubectl" ]]; then
    K8S_LDFLAGS="-s -w"
    for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        K8S_LDFLAGS+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$K8S_MINOR"
        K8S_LDFLAGS+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
    done
    run_step "kube-apiserver+kubectl" "$DIR/build-k8s.log" \
        bash -c 'cd "$1" && "$2" build -v -ldflags="$3" -o "$4/" \
                 k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubectl' \
        _ "$CP" "$GO" "$K8S_LDFLAGS" "$TMP"
    mv -f "$TMP/kube-apiserver" "$TMP/kubectl" "$BIN/"
fi

if [[ ! -x "$BIN/etcd" ]]; then
    run_step "etcd" "$DIR/build-etcd.log" \
        bash -c 'cd "$1/etcd" && "$2" build -v -ldflags="-s -w" -o "$3/etcd" go.etcd.io/etcd/server/v3' \
        _ "$CP" "$GO" "$TMP"
    mv -f "$TMP/etcd" "$BIN/"
fi

if [[ ! -x "$BIN/helm" ]]; then
    HELM_LDFLAGS="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
    HELM_LDFLAGS+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
    for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
        HELM_LDFLAGS+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$HELM_K8S_MINOR"
    done
    # Outside any module, so this go.mod cannot interfere; pinned by @version.
    run_step "helm" "$DIR/build-helm.log" \
        bash -c 'cd "$1" && GOBIN="$2" "$3" install -v -ldflags="$4" "helm.sh/helm/v3/cmd/helm@$5"' \
        _ "$TMP" "$TMP" "$GO" "$HELM_LDFLAGS" "$HELM_VERSION"
    mv -f "$TMP/helm" "$BIN/"
fi

rm -rf "$TMP"
complete_ok=1
for t in "${TOOLS[@]}"; do [[ -x "$BIN/$t" ]] || complete_ok=0; done
if [[ $complete_ok -ne 1 ]]; then log "build finished but $BIN is incomplete"; exit 1; fi
printf 'kubernetes=%s\netcd=%s\nhelm=%s\ngo=%s\nbuilt=%s\nseconds=%s\n' \
    "$K8S_VERSION" "$ETCD_VERSION" \
    "$HELM_VERSION" "$GO_VERSION" "$(date -u +%FT%TZ)" "$((SECONDS - total_start))" > "$DIR/.complete"
log "control plane ready in $BIN ($((SECONDS - total_start))s)"
echo "$BIN"
