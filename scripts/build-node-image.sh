#!/usr/bin/env bash
# Assemble the kind node image from what is built here (no image registry needed), the way kind's
# own `build node-image` does it, minus the pulls:
#
#   1. the images kubeadm deploys, built from local binaries on the local bookworm base:
#      registry.k8s.io/{kube-apiserver,kube-controller-manager,kube-scheduler,kube-proxy}:<k8s>,
#      registry.k8s.io/etcd:<etcd>-0, registry.k8s.io/coredns/coredns:<coredns>,
#      registry.k8s.io/pause:<pause>
#   2. the node: bookworm + systemd + Debian's containerd, runc and CNI plugins + kind's node files
#      (from the kind module source) + kubelet, kubeadm, kubectl (e2e/cluster/node/Dockerfile)
#   3. the images of step 1 imported into the node's containerd (ctr -n k8s.io images import),
#      then `docker commit`.
#
#   scripts/build-node-image.sh            build if missing; print the node image name
#   scripts/build-node-image.sh --name     print the name it would have (builds the binaries if needed)
#
# The image is named rebalanser/kind-node:<k8s>-<hash>, <hash> covering RECIPE, the binaries' cache
# dirs (their own hashes cover the versions), the base image and e2e/cluster/{node,images}/.
set -euo pipefail

RECIPE=1
NAME=build-node-image
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/lib/build.sh
source "$ROOT/scripts/lib/build.sh"
# shellcheck source=scripts/lib/docker.sh
source "$ROOT/scripts/lib/docker.sh"
CACHE="${REBALANSER_CACHE:-$HOME/.cache/rebalanser}"
find_go

"$ROOT/scripts/install-docker.sh"
CP_BIN="$("$ROOT/scripts/build-controlplane.sh")"
NODE_BIN="$("$ROOT/scripts/build-node.sh")"
BOOKWORM="$("$ROOT/scripts/build-base-images.sh" --bookworm)"

meta() { sed -n "s/^$1=//p" "$2/../.complete"; }
K8S_VERSION="$(meta kubernetes "$NODE_BIN")"
KIND_VERSION="$(meta kind "$NODE_BIN")"
COREDNS_VERSION="$(meta coredns "$NODE_BIN")"
PAUSE_VERSION="$(meta pause "$NODE_BIN")"
ETCD_VERSION="$(meta etcd "$CP_BIN")"
ETCD_TAG="${ETCD_VERSION#v}-0"
grep -q "imageTag: \"$ETCD_TAG\"" "$ROOT/e2e/cluster/kind.yaml" \
    || die "e2e/cluster/kind.yaml must set kubeadm's etcd imageTag to \"$ETCD_TAG\" (the etcd built here)"

HASH="$({
    printf 'recipe=%s cp=%s node=%s base=%s\n' "$RECIPE" "$CP_BIN" "$NODE_BIN" "$BOOKWORM"
    find "$ROOT/e2e/cluster/node" "$ROOT/e2e/cluster/images" -type f -print0 | sort -z \
        | xargs -0 sha256sum | sed "s|$ROOT/||"
} | sha256sum | cut -c1-12)"
IMAGE="rebalanser/kind-node:$K8S_VERSION-$HASH"

if [[ "${1:-}" == "--name" ]]; then echo "$IMAGE"; exit 0
elif [[ $# -gt 0 ]]; then echo "usage: $0 [--name]" >&2; exit 2
fi

have_image() { "$DOCKER" image inspect "$1" >/dev/null 2>&1; }
if have_image "$IMAGE"; then echo "$IMAGE"; exit 0; fi

mkdir -p "$CACHE/images"
exec 9>"$CACHE/images/.node.lock"
flock 9
if have_image "$IMAGE"; then echo "$IMAGE"; exit 0; fi

total_start=$SECONDS
WORK="$(mktemp -d "$CACHE/images/node-build.XXXXXX")"
BUILDER=""
cleanup() {
    [[ -n "$BUILDER" ]] && "$DOCKER" rm -f -v "$BUILDER" >/dev/null 2>&1
    rm -rf "$WORK"
}
trap cleanup EXIT

# build_image TAG DOCKERFILE FILE...: docker build with a context holding only FILE...
build_image() {
    local tag="$1" dockerfile="$2" ctx
    shift 2
    ctx="$WORK/ctx-${tag//[\/:]/_}"
    mkdir -p "$ctx"
    cp -a "$@" "$ctx/"
    "$DOCKER" build -q --build-arg "BASE=$BOOKWORM" --build-arg "BINARY=$(basename "$1")" \
        -f "$dockerfile" -t "$tag" "$ctx" >/dev/null
}

IMAGES_DIR="$ROOT/e2e/cluster/images"
COMPONENTS=()
start=$SECONDS
log "component images (kubernetes $K8S_VERSION, etcd $ETCD_VERSION, coredns $COREDNS_VERSION, pause $PAUSE_VERSION)"
for c in kube-apiserver kube-controller-manager kube-scheduler; do
    bin="$NODE_BIN/$c"; [[ -x "$bin" ]] || bin="$CP_BIN/$c"
    build_image "registry.k8s.io/$c:$K8S_VERSION" "$IMAGES_DIR/binary.Dockerfile" "$bin"
    COMPONENTS+=("registry.k8s.io/$c:$K8S_VERSION")
done
build_image "registry.k8s.io/etcd:$ETCD_TAG" "$IMAGES_DIR/binary.Dockerfile" "$CP_BIN/etcd"
build_image "registry.k8s.io/kube-proxy:$K8S_VERSION" "$IMAGES_DIR/kube-proxy.Dockerfile" \
    "$NODE_BIN/kube-proxy" "$IMAGES_DIR/select-iptables"
build_image "registry.k8s.io/coredns/coredns:$COREDNS_VERSION" "$IMAGES_DIR/coredns.Dockerfile" "$NODE_BIN/coredns"
build_image "registry.k8s.io/pause:$PAUSE_VERSION" "$IMAGES_DIR/pause.Dockerfile" "$NODE_BIN/pause"
COMPONENTS+=("registry.k8s.io/etcd:$ETCD_TAG" "registry.k8s.io/kube-proxy:$K8S_VERSION"
             "registry.k8s.io/coredns/coredns:$COREDNS_VERSION" "registry.k8s.io/pause:$PAUSE_VERSION")
log "component images built ($((SECONDS - start))s)"

# The node's build context: kind's node files, ours, and the node binaries.
start=$SECONDS
KIND_SRC="$(cd "$WORK" && GOFLAGS=-mod=mod "$GO" mod download -json "sigs.k8s.io/kind@$KIND_VERSION" \
    | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
[[ -d "$KIND_SRC/images/base/files" ]] || die "no images/base/files in the kind module source ($KIND_SRC)"
CTX="$WORK/node"
mkdir -p "$CTX/bin"
cp -a "$KIND_SRC/images/base/files" "$CTX/kind"
chmod -R u+w "$CTX/kind"
cp -a "$ROOT/e2e/cluster/node/overlay" "$CTX/overlay"
cp -a "$NODE_BIN/kubelet" "$NODE_BIN/kubeadm" "$CP_BIN/kubectl" "$CTX/bin/"
STAGE="rebalanser/kind-node-stage:$K8S_VERSION-$HASH"
log "node stage $STAGE (bookworm + systemd + containerd + kind's node files; log: $WORK/node-build.log)"
if ! "$DOCKER" build --build-arg "BASE=$BOOKWORM" --build-arg "K8S_VERSION=$K8S_VERSION" \
        -f "$ROOT/e2e/cluster/node/Dockerfile" -t "$STAGE" "$CTX" >"$CACHE/images/node-build.log" 2>&1; then
    tail -n 30 "$CACHE/images/node-build.log" >&2
    die "docker build of the node stage failed (log: $CACHE/images/node-build.log)"
fi
log "node stage built ($((SECONDS - start))s)"

# Import the component images into the node's containerd, as kind's node-image build does.
start=$SECONDS
BUILDER="$("$DOCKER" run -d --privileged --entrypoint sleep "$STAGE" infinity)"
"$DOCKER" exec "$BUILDER" bash -c 'nohup containerd >/tmp/containerd.log 2>&1 &'
for ((i = 0; i < 100; i++)); do
    "$DOCKER" exec "$BUILDER" ctr version >/dev/null 2>&1 && break
    sleep 0.2
done
"$DOCKER" exec "$BUILDER" ctr version >/dev/null || die "containerd did not start in the build container"
"$DOCKER" save "${COMPONENTS[@]}" \
    | "$DOCKER" exec -i "$BUILDER" ctr --namespace=k8s.io images import \
        --label=io.cri-containerd.pinned=pinned --all-platforms --no-unpack --digests - >/dev/null
imported="$("$DOCKER" exec "$BUILDER" ctr --namespace=k8s.io images list -q)"
for c in "${COMPONENTS[@]}"; do
    grep -qx "$c" <<<"$imported" || die "image $c missing from the node's containerd after import"
done
"$DOCKER" exec "$BUILDER" pkill -x containerd || true
for ((i = 0; i < 50; i++)); do
    "$DOCKER" exec "$BUILDER" pgrep -x containerd >/dev/null 2>&1 || break
    sleep 0.2
done
"$DOCKER" commit --change 'ENTRYPOINT [ "/usr/local/bin/entrypoint", "/sbin/init" ]' --change 'CMD []' \
    "$BUILDER" "$IMAGE" >/dev/null
log "images imported and committed ($((SECONDS - start))s)"
log "node image $IMAGE ready ($((SECONDS - total_start))s)"
echo "$IMAGE"
