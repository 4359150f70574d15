#!/usr/bin/env bash
# The kind path: the operator and the workers as real Pods, for machines with Docker.
#
#   e2e/kind/run.sh [up]     docker build the repository image, create a kind cluster, load the image,
#                            install ZooKeeper (zookeeper.yaml), the chart, the ResourceGroup
#                            (resourcegroup.yaml) and the workers (workers.yaml), then wait until the
#                            ResourceGroup's status shows every resource assigned. The cluster is kept.
#   e2e/kind/run.sh status   the ResourceGroup, its status and the pods
#   e2e/kind/run.sh down     delete the kind cluster
#
# Needs docker (with a running engine), kind, kubectl and helm. kubectl and helm may also come from
# the repository's control-plane build (scripts/build-controlplane.sh). Environment:
#   KIND_CLUSTER     cluster name (default rebalanser-demo; the kubectl context is kind-NAME)
#   IMAGE_REPO       image repository (default rebalanser)   IMAGE_TAG   image tag (default dev)
#   KIND_NODE_IMAGE  optional node image for `kind create cluster --image`
#   WAIT_TIMEOUT     seconds to wait for each step (default 300)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
CLUSTER="${KIND_CLUSTER:-rebalanser-demo}"
IMAGE_REPO="${IMAGE_REPO:-rebalanser}"
IMAGE_TAG="${IMAGE_TAG:-dev}"
IMAGE="$IMAGE_REPO:$IMAGE_TAG"
TIMEOUT="${WAIT_TIMEOUT:-300}"
CONTEXT="kind-$CLUSTER"
NS=rebalanser-demo
OPERATOR_NS=rebalanser-system
RELEASE=rebalanser-operator
GROUP=orders

log() { printf 'kind-demo: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

# tool NAME: prints the path of NAME, from PATH or from the repository's control-plane build.
tool() {
    local name="$1" bin
    if command -v "$name" >/dev/null 2>&1; then
        command -v "$name"
    elif bin="$("$ROOT/scripts/build-controlplane.sh" --bin-dir 2>/dev/null)" && [[ -x "$bin/$name" ]]; then
        printf '%s\n' "$bin/$name"
    else
        die "$name not found on PATH (nor in the control-plane build: make controlplane)"
    fi
}

preflight() {
    command -v docker >/dev/null 2>&1 || die "docker not found: the kind path needs Docker"
    docker info >/dev/null 2>&1 || die "no Docker engine answers (docker info failed): the kind path needs Docker"
    command -v kind >/dev/null 2>&1 || die "kind not found: https://kind.sigs.k8s.io/docs/user/quick-start/#installation"
    KUBECTL="$(tool kubectl)"
    HELM="$(tool helm)"
}

k() { "$KUBECTL" --context "$CONTEXT" "$@"; }

build_image() {
    log "docker build -t $IMAGE $ROOT"
    docker build -t "$IMAGE" "$ROOT"
}

create_cluster() {
    if kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
        log "kind cluster $CLUSTER exists: reusing it"
    else
        log "kind create cluster --name $CLUSTER"
        kind create cluster --name "$CLUSTER" --wait "${TIMEOUT}s" ${KIND_NODE_IMAGE:+--image "$KIND_NODE_IMAGE"}
    fi
    log "kind load docker-image $IMAGE --name $CLUSTER"
    kind load docker-image "$IMAGE" --name "$CLUSTER"
}

ensure_namespace() {
    k get namespace "$1" >/dev/null 2>&1 || k create namespace "$1"
}

install_zookeeper() {
    log "ZooKeeper (zookeeper:3.9, one server) in namespace $NS"
    ensure_namespace "$NS"
    k -n "$NS" apply -f "$HERE/zookeeper.yaml"
    k -n "$NS" rollout status statefulset/zk --timeout="${TIMEOUT}s"
}

install_chart() {
    log "helm install $RELEASE charts/rebalanser-operator -n $OPERATOR_NS (image $IMAGE, serving $NS)"
    "$HELM" --kube-context "$CONTEXT" upgrade --install "$RELEASE" "$ROOT/charts/rebalanser-operator" \
        --namespace "$OPERATOR_NS" --create-namespace \
        --set "image.repository=$IMAGE_REPO" --set "image.tag=$IMAGE_TAG" --set image.pullPolicy=Never \
        --set "rbac.watchNamespaces={$NS}" \
        --wait --timeout "${TIMEOUT}s"
}

install_workload() {
    log "ResourceGroup $NS/$GROUP and the orders-worker Deployment"
    k -n "$NS" apply -f "$HERE/resourcegroup.yaml"
    sed "s|image: rebalanser:dev|image: $IMAGE|" "$HERE/workers.yaml" | k -n "$NS" apply -f -
    k -n "$NS" rollout status deployment/orders-worker --timeout="${TIMEOUT}s"
}

# rg_field JSONPATH: one field of the ResourceGroup (empty while unset).
rg_field() {
    k -n "$NS" get resourcegroup "$GROUP" -o "jsonpath={$1}" 2>/dev/null || true
}

wait_assigned() {
    local deadline=$((SECONDS + TIMEOUT)) phase members resources assigned
    log "waiting (up to ${TIMEOUT}s) for the ResourceGroup status to show every resource assigned"
    while :; do
        phase="$(rg_field .status.phase)"
        members="$(rg_field .status.members)"
        resources="$(rg_field .status.resources)"
        assigned="$(rg_field .status.assigned)"
        log "phase=${phase:--} members=${members:--} resources=${resources:--} assigned=${assigned:--}"
        if [[ "$phase" == Stable && "$members" == 3 && -n "$resources" && "$resources" != 0 \
              && "$assigned" == "$resources" ]]; then
            break
        fi
        ((SECONDS < deadline)) || { status; die "timed out: not every resource assigned after ${TIMEOUT}s"; }
        sleep 3
    done
    status
    log "done: $assigned of $resources resources assigned to $members worker pods"
    log "watch it: kubectl --context $CONTEXT -n $NS get rg -w"
    log "then, in another terminal, delete one worker pod and see its resources move:"
    log "  kubectl --context $CONTEXT -n $NS delete pod --grace-period=0 --force <an orders-worker pod>"
}

status() {
    k -n "$NS" get resourcegroup "$GROUP" -o wide || true
    # shellcheck disable=SC2016  # a go-template, not a shell expansion
    k -n "$NS" get resourcegroup "$GROUP" \
        -o go-template='{{range $member, $owned := .status.assignments}}{{$member}}: {{range $owned}}{{.}} {{end}}{{"\n"}}{{end}}' \
        || true
    k -n "$NS" get pods -o wide || true
    k -n "$OPERATOR_NS" get pods -o wide || true
}

up() {
    preflight
    build_image
    create_cluster
    install_zookeeper
    install_chart
    install_workload
    wait_assigned
}

down() {
    command -v kind >/dev/null 2>&1 || die "kind not found"
    log "kind delete cluster --name $CLUSTER"
    kind delete cluster --name "$CLUSTER"
}

case "${1:-up}" in
    up) up ;;
    status) preflight; status ;;
    down) down ;;
    *) echo "usage: $0 [up|status|down]" >&2; exit 2 ;;
esac
