#!/usr/bin/env bash
# The one script for a local cluster. The cluster of make cluster-up / cluster-down: one kind node,
# from the node image assembled here (scripts/build-node-image.sh), with a 3-server ZooKeeper
# StatefulSet in namespace zookeeper.
#
#   scripts/cluster.sh up                 build what is missing, create the cluster (idempotent: a
#                                         healthy cluster from the same node image is kept), load
#                                         the images, deploy ZooKeeper and wait for its quorum
#   scripts/cluster.sh down          delete the cluster, its network and the files in .cluster
#   scripts/cluster.sh status        exit 0 when the cluster answers and its node is Ready
#   scripts/cluster.sh load IMAGE... load local Docker images into the node's containerd
#
# Files: .cluster/kubeconfig (admin, context kind-rebalanser), .cluster/bin/{kubectl,helm,kind},
# .cluster/kind.env (NODE_IMAGE, CLUSTER, SERVER). Environment: REBALANSER_KIND_CLUSTER (cluster
# name, default rebalanser), REBALANSER_IMAGE (the project image, default rebalanser:dev),
# REBALANSER_CLUSTER_TIMEOUT (each wait, seconds, default 300).
# When Docker cannot run here, `up` prints one line starting with "docker unavailable:" and exits 3.
#
# The e2e tests and the demo need only an API server, started in a directory of their own:
#   scripts/cluster.sh controlplane up|down|status DIR   etcd + kube-apiserver as host processes
#                                                        (scripts/lib/controlplane.sh; no kubelet)
set -euo pipefail

NAME="cluster"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ "${1:-}" == controlplane ]]; then
    shift
    exec "$ROOT/scripts/lib/controlplane.sh" "$@"
fi
# shellcheck source=scripts/lib/build.sh
source "$ROOT/scripts/lib/build.sh"
# shellcheck source=scripts/lib/docker.sh
source "$ROOT/scripts/lib/docker.sh"
CMD="${1:-}"
DIR="$ROOT/.cluster"
CLUSTER="${REBALANSER_KIND_CLUSTER:-rebalanser}"
TIMEOUT="${REBALANSER_CLUSTER_TIMEOUT:-300}"
CONFIG="$ROOT/e2e/cluster/kind.yaml"
ZK_MANIFEST="$ROOT/e2e/cluster/zookeeper.yaml"
KUBECONFIG_FILE="$DIR/kubeconfig"
# kind runs `docker` from PATH: make it Debian's client (API pinned in scripts/lib/docker.sh).
PATH="$(dirname "$DOCKER"):$PATH"
export PATH

case "$CMD" in
    up|down|status|load) ;;
    *) echo "usage: $0 up|down|status|load IMAGE... | controlplane up|down|status DIR" >&2; exit 2 ;;
esac

mkdir -p "$DIR/bin"
exec 8>"$DIR/.kind.lock"
flock 8

kind_bin() {
    if [[ -x "$DIR/bin/kind" ]]; then echo "$DIR/bin/kind"; else "$ROOT/scripts/build-node.sh" | sed 's|$|/kind|'; fi
}
node() { echo "$CLUSTER-control-plane"; }
k() { "$DIR/bin/kubectl" --kubeconfig "$KUBECONFIG_FILE" --request-timeout=30s "$@"; }

cluster_exists() {
    "$DOCKER" info >/dev/null 2>&1 || return 1
    [[ -n "$("$DOCKER" ps -aq --filter "label=io.x-k8s.kind.cluster=$CLUSTER")" ]]
}

healthy() {
    [[ -f "$KUBECONFIG_FILE" && -x "$DIR/bin/kubectl" ]] || return 1
    [[ "$("$DOCKER" inspect -f '{{.State.Running}}' "$(node)" 2>/dev/null)" == true ]] || return 1
    [[ "$(k get --raw /readyz 2>/dev/null)" == ok ]] || return 1
    [[ "$(k get node "$(node)" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" == True ]]
}

# node_has IMAGE: the node's containerd holds IMAGE with the same image ID as Docker's. (kind's own
# check needs crictl, which the node does not carry, so `kind load` alone would always reload.)
node_has() {
    local id ref
    id="$("$DOCKER" image inspect -f '{{.Id}}' "$1" 2>/dev/null)" || return 1
    ref="$1"  # as containerd names it: NAME -> docker.io/library/NAME, USER/NAME -> docker.io/USER/NAME
    if [[ "$ref" != */* ]]; then ref="docker.io/library/$ref"
    elif [[ "${ref%%/*}" != *[.:]* && "${ref%%/*}" != localhost ]]; then ref="docker.io/$ref"
    fi
    # shellcheck disable=SC2016  # the script runs in the node, with the reference as $1
    [[ "$("$DOCKER" exec "$(node)" sh -c \
        'd="$(ctr -n k8s.io images ls "name==$1" | awk "NR == 2 {print \$3}")" && [ -n "$d" ] &&
         ctr -n k8s.io content get "$d" | jq -r .config.digest' _ "$ref" 2>/dev/null)" == "$id" ]]
}

# load_images IMAGE...: into the node, unless it already has them.
load_images() {
    local image
    for image in "$@"; do
        if node_has "$image"; then continue; fi
        log "loading $image into the node"
        "$DIR/bin/kind" load docker-image "$image" --name "$CLUSTER" >/dev/null
        node_has "$image" || die "$image is not in the node's containerd after kind load"
    done
}

do_down() {
    local kind
    if cluster_exists; then
        kind="$(kind_bin)"
        log "kind delete cluster --name $CLUSTER"
        "$kind" delete cluster --name "$CLUSTER" >&2
    fi
    # kind leaves its network behind; remove it when no other kind cluster uses it.
    if "$DOCKER" network inspect kind >/dev/null 2>&1 \
            && [[ "$("$DOCKER" network inspect -f '{{len .Containers}}' kind)" == 0 ]]; then
        "$DOCKER" network rm kind >/dev/null
    fi
    # Docker creates the /lib/modules bind source when the host has none; drop it if we caused it
    # and no other kind node still mounts it.
    if [[ -f "$DIR/created-lib-modules" ]]; then
        if [[ -z "$("$DOCKER" ps -aq --filter label=io.x-k8s.kind.role 2>/dev/null)" ]]; then
            rmdir /lib/modules 2>/dev/null || true
        fi
        rm -f "$DIR/created-lib-modules"
    fi
    rm -f "$KUBECONFIG_FILE" "$DIR/kind.env" "$DIR/kind-create.log"
}

case "$CMD" in
    status)
        if healthy; then echo "up: $CLUSTER (KUBECONFIG=$KUBECONFIG_FILE)"; exit 0; fi
        echo "down"; exit 1 ;;
    down)
        do_down
        rm -f "$DIR/bin/kind"
        log "down"
        exit 0 ;;
    load)
        shift
        (($#)) || die "load: name at least one image"
        healthy || die "the cluster is not up (make cluster-up)"
        load_images "$@"
        exit 0 ;;
esac

# ---- up ----
start_t=$SECONDS
"$ROOT/scripts/install-docker.sh"
NODE_IMAGE="$("$ROOT/scripts/build-node-image.sh")"
CP_BIN="$("$ROOT/scripts/build-controlplane.sh")"
NODE_BIN="$("$ROOT/scripts/build-node.sh")"
ZK_IMAGE="$("$ROOT/scripts/build-zookeeper-image.sh")"
ln -sfn "$CP_BIN/kubectl" "$DIR/bin/kubectl"
ln -sfn "$CP_BIN/helm" "$DIR/bin/helm"
ln -sfn "$NODE_BIN/kind" "$DIR/bin/kind"
KIND="$DIR/bin/kind"

if cluster_exists; then
    running_image="$("$DOCKER" inspect -f '{{.Config.Image}}' "$(node)" 2>/dev/null || true)"
    if [[ "$running_image" == "$NODE_IMAGE" ]] && "$KIND" get kubeconfig --name "$CLUSTER" \
            >"$KUBECONFIG_FILE.tmp" 2>/dev/null && mv -f "$KUBECONFIG_FILE.tmp" "$KUBECONFIG_FILE" && healthy; then
        log "cluster $CLUSTER is up (node image $NODE_IMAGE): keeping it"
    else
        log "cluster $CLUSTER is stale or unhealthy (node image ${running_image:-?}): recreating it"
        do_down
    fi
fi

if ! healthy; then
    [[ -e /lib/modules ]] || touch "$DIR/created-lib-modules"
    rm -f "$KUBECONFIG_FILE"
    log "kind create cluster --name $CLUSTER --image $NODE_IMAGE (log: $DIR/kind-create.log)"
    if ! "$KIND" create cluster --name "$CLUSTER" --image "$NODE_IMAGE" --config "$CONFIG" \
            --kubeconfig "$KUBECONFIG_FILE" --wait "${TIMEOUT}s" --retain -v 1 >"$DIR/kind-create.log" 2>&1; then
        tail -n 40 "$DIR/kind-create.log" >&2
        log "node logs: docker logs $(node); docker exec $(node) journalctl -u kubelet -u containerd"
        die "kind create cluster failed (the node is kept for inspection; make cluster-down removes it)"
    fi
    chmod 600 "$KUBECONFIG_FILE"
fi

SERVER="$(k config view --minify -o 'jsonpath={.clusters[0].cluster.server}')"
printf 'CLUSTER=%s\nNODE_IMAGE=%s\nSERVER=%s\nKUBECONFIG=%s\n' "$CLUSTER" "$NODE_IMAGE" "$SERVER" "$KUBECONFIG_FILE" \
    > "$DIR/kind.env"

# ensure_zk_admin: the ensemble administrator's identity, Secret zookeeper/zk-admin (username super, a
# random password, and the digest the servers are given), made once per cluster and kept after. Only
# the cluster's owner reads it: the tests use it to remove what an interrupted run left behind.
ensure_zk_admin() {
    k get namespace zookeeper >/dev/null 2>&1 || k create namespace zookeeper >/dev/null
    k -n zookeeper get secret zk-admin >/dev/null 2>&1 && return 0
    local password digest
    password="$(head -c 24 /dev/urandom | base64 | tr -d '/+=')"
    digest="$(python3 -c 'import base64, hashlib, sys; print(base64.b64encode(hashlib.sha1(sys.argv[1].encode()).digest()).decode())' "super:$password")"
    k -n zookeeper create secret generic zk-admin --from-literal=username=super \
        --from-literal=password="$password" --from-literal=digest="super:$digest" >/dev/null
}

# wait_for WHAT SECONDS CMD...: retry CMD until it succeeds; die after SECONDS.
wait_for() {
    local what="$1" limit="$2" t0=$SECONDS next=15
    shift 2
    until "$@" >/dev/null 2>&1; do
        ((SECONDS - t0 < limit)) || die "timed out after ${limit}s waiting for $what"
        if ((SECONDS - t0 >= next)); then log "waiting for $what ($((SECONDS - t0))s)"; next=$((next + 15)); fi
        sleep 1
    done
}
# Images the cluster runs from this machine: ZooKeeper, and ours when it has been built. The
# manifest names ZooKeeper's version tag; the exact build's tag is applied, so a changed image
# rolls out.
# ZooKeeper first, so that its servers start while ours loads.
load_images "$ZK_IMAGE"
log "ZooKeeper: 3 servers in namespace zookeeper ($ZK_IMAGE)"
ensure_zk_admin
sed -E "s|image: rebalanser/zookeeper:[^[:space:]]+|image: $ZK_IMAGE|" "$ZK_MANIFEST" | k apply -f - >/dev/null
APP_IMAGE="${REBALANSER_IMAGE:-rebalanser:dev}"
if "$DOCKER" image inspect "$APP_IMAGE" >/dev/null 2>&1; then load_images "$APP_IMAGE"; fi
wait_for "CoreDNS" "$TIMEOUT" k -n kube-system rollout status deployment/coredns --timeout=10s
wait_for "the ZooKeeper StatefulSet" "$TIMEOUT" k -n zookeeper rollout status statefulset/zk --timeout=10s
quorum() {
    local modes
    modes="$(for i in 0 1 2; do
        k -n zookeeper exec "zk-$i" -- bash -c 'exec 3<>/dev/tcp/127.0.0.1/2181; printf srvr >&3; timeout 5 cat <&3' \
            | sed -n 's/^Mode: //p'
    done | sort | tr '\n' ' ')"
    [[ "$modes" == "follower follower leader " ]]
}
wait_for "a ZooKeeper quorum (one leader, two followers)" "$TIMEOUT" quorum
log "up in $((SECONDS - start_t))s: $SERVER (node image $NODE_IMAGE)"
log "  export KUBECONFIG=$KUBECONFIG_FILE PATH=$DIR/bin:\$PATH"
