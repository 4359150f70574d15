#!/usr/bin/env bash
# shellcheck disable=SC2016  # the single-quoted `bash -c` scripts below get their values as "$1"...
# The lightweight control plane (etcd + kube-apiserver) for the demo and the e2e tests, run as
# `scripts/cluster.sh controlplane up|down|status DIR` (scripts/cluster.sh is the one entry point),
# started the way controller-runtime's envtest does it: loopback only, free ports, TLS with
# a throw-away CA, RBAC, an admin client certificate (O=system:masters). No controller
# manager, scheduler or kubelet: Deployments never get Pods, and namespaces other than the
# built-in ones (default, kube-system, kube-public, kube-node-lease) must be created.
#
#   scripts/cluster.sh controlplane up     DIR   start (idempotent); writes DIR/kubeconfig, DIR/bin/{kubectl,helm}
#   scripts/cluster.sh controlplane down   DIR   stop (idempotent); removes the etcd data and the kubeconfig
#   scripts/cluster.sh controlplane status DIR   exit 0 when up and ready
#
# DIR is required (.cluster belongs to the real cluster of `make cluster-up`). Files in DIR: kubeconfig, cluster.env
# (SERVER, KUBECONFIG, ETCD_URL), bin/, pki/, etcd-data/, *.pid, *.log.
# Environment: REBALANSER_CLUSTER_TIMEOUT (readiness wait, seconds, default 180),
# REBALANSER_CACHE (binary cache, see scripts/build-controlplane.sh).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CMD="${1:-}"
DIR="${2:-}"
TIMEOUT="${REBALANSER_CLUSTER_TIMEOUT:-180}"
STOP_TIMEOUT=20

log() { printf 'cluster: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

case "$CMD" in
    up|down|status) [[ -n "$DIR" ]] || { echo "usage: scripts/cluster.sh controlplane up|down|status DIR" >&2; exit 2; } ;;
    *) echo "usage: scripts/cluster.sh controlplane up|down|status DIR" >&2; exit 2 ;;
esac
mkdir -p "$DIR"
DIR="$(cd "$DIR" && pwd)"
# One up/down at a time per DIR (the daemons are started with this descriptor closed).
exec 8>"$DIR/.lock"
flock 8

# pid_alive NAME: the pid in DIR/NAME.pid is running and is our NAME started for this DIR.
pid_alive() {
    local pidf="$DIR/$1.pid" pid cmdline
    [[ -f "$pidf" ]] || return 1
    pid="$(cat "$pidf" 2>/dev/null)" || return 1
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    [[ -r "/proc/$pid/cmdline" ]] || return 1
    cmdline="$(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null)" || return 1
    [[ "$cmdline" == *"$1"* && "$cmdline" == *"$DIR/"* ]]
}

# stop_proc NAME: SIGTERM, then SIGKILL after STOP_TIMEOUT seconds.
stop_proc() {
    local name="$1" pid i
    if pid_alive "$name"; then
        pid="$(cat "$DIR/$name.pid")"
        log "stopping $name (pid $pid)"
        kill -TERM "$pid" 2>/dev/null || true
        for ((i = 0; i < STOP_TIMEOUT * 10; i++)); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        if kill -0 "$pid" 2>/dev/null; then
            log "$name did not stop within ${STOP_TIMEOUT}s; sending SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
            for ((i = 0; i < 50; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        fi
    fi
    rm -f "$DIR/$name.pid"
}

server_url() { sed -n 's/^SERVER=//p' "$DIR/cluster.env" 2>/dev/null; }

readyz() {
    local server="$1"
    [[ -n "$server" && -f "$DIR/pki/admin.crt" ]] || return 1
    [[ "$(curl -sS --max-time 5 --cacert "$DIR/pki/ca.crt" --cert "$DIR/pki/admin.crt" \
        --key "$DIR/pki/admin.key" "$server/readyz" 2>/dev/null)" == "ok" ]]
}

do_down() {
    stop_proc kube-apiserver
    stop_proc etcd
    rm -rf "$DIR/etcd-data" "$DIR/pki" "$DIR/kubeconfig" "$DIR/cluster.env"
}

if [[ "$CMD" == "status" ]]; then
    if pid_alive etcd && pid_alive kube-apiserver && readyz "$(server_url)"; then
        echo "up: $(server_url) (KUBECONFIG=$DIR/kubeconfig)"; exit 0
    fi
    echo "down"; exit 1
fi

if [[ "$CMD" == "down" ]]; then
    do_down
    log "down ($DIR)"
    exit 0
fi

# ---- up ----
if pid_alive etcd && pid_alive kube-apiserver; then
    if readyz "$(server_url)"; then
        log "already up: $(server_url) (KUBECONFIG=$DIR/kubeconfig)"
        exit 0
    fi
fi
# Half-started or stale state: clean it first.
do_down

BUILT="$("$ROOT/scripts/build-controlplane.sh")"
for t in etcd kube-apiserver kubectl helm; do
    [[ -x "$BUILT/$t" ]] || die "missing $BUILT/$t (scripts/build-controlplane.sh failed?)"
done
mkdir -p "$DIR/bin"
ln -sfn "$BUILT/kubectl" "$DIR/bin/kubectl"
ln -sfn "$BUILT/helm" "$DIR/bin/helm"

# ---- PKI: a CA, the serving certificate, the admin client certificate, service-account keys
PKI="$DIR/pki"
rm -rf "$PKI"
mkdir -p "$PKI"
chmod 700 "$PKI"
(
    cd "$PKI"
    set -e
    q() { "$@" >/dev/null 2>&1 || { echo "cluster: openssl failed: $*" >&2; "$@"; exit 1; }; }
    q openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out ca.key
    q openssl req -x509 -new -key ca.key -sha256 -days 3650 -subj "/CN=rebalanser-local-ca" \
        -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
        -out ca.crt
    # sign NAME SUBJECT EXTENSIONS
    sign() {
        q openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$1.key"
        q openssl req -new -key "$1.key" -subj "$2" -out "$1.csr"
        printf '%b\n' "$3" > "$1.ext"
        q openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -set_serial "0x$(openssl rand -hex 8)" \
            -sha256 -days 3650 -extfile "$1.ext" -out "$1.crt"
        rm -f "$1.csr" "$1.ext"
    }
    sign apiserver "/CN=kube-apiserver" \
        "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=DNS:localhost,IP:127.0.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:10.0.0.1"
    sign admin "/O=system:masters/CN=rebalanser-admin" \
        "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth"
    q openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out sa.key
    q openssl pkey -in sa.key -pubout -out sa.pub
    chmod 600 ./*.key
)

# Free loopback ports (bound and released at once; a clash is retried below).
free_ports() {
    python3 - "$1" <<'EOF'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
}

fail_with_log() { # fail_with_log NAME MESSAGE
    log "$2"
    if [[ -f "$DIR/$1.log" ]]; then
        log "last lines of $DIR/$1.log:"
        tail -n 40 "$DIR/$1.log" >&2
    fi
    do_down
    exit 1
}

# start NAME ARGS...: detached (own session), pid file written by the process itself.
start() {
    local name="$1" i
    shift
    setsid bash -c 'echo $$ > "$1"; shift; exec "$@"' _ "$DIR/$name.pid" "$@" \
        > "$DIR/$name.log" 2>&1 < /dev/null 8>&- &
    for ((i = 0; i < 50; i++)); do [[ -s "$DIR/$name.pid" ]] && break; sleep 0.1; done
}

etcd_healthy() {
    [[ "$(curl -sS --max-time 2 "$ETCD_URL/health" 2>/dev/null)" == *'"health":"true"'* ]]
}

# wait_ready NAME SECONDS CHECK...: 0 when CHECK passes; 1 on timeout or when NAME exits.
wait_ready() {
    local name="$1" limit="$2" start=$SECONDS next=10
    shift 2
    while ((SECONDS - start < limit)); do
        "$@" && return 0
        pid_alive "$name" || { log "$name exited"; return 1; }
        if ((SECONDS - start >= next)); then
            log "waiting for $name ($((SECONDS - start))s)"
            next=$((next + 10))
        fi
        sleep 0.25
    done
    return 1
}

port_clash() { grep -q 'address already in use' "$DIR/$1.log" 2>/dev/null; }

start_t=$SECONDS
for attempt in 1 2 3; do
    read -r ETCD_PORT PEER_PORT API_PORT < <(free_ports 3)
    ETCD_URL="http://127.0.0.1:$ETCD_PORT"
    SERVER="https://127.0.0.1:$API_PORT"
    start etcd "$BUILT/etcd" \
        --name=rebalanser --data-dir="$DIR/etcd-data" \
        --listen-client-urls="$ETCD_URL" --advertise-client-urls="$ETCD_URL" \
        --listen-peer-urls="http://127.0.0.1:$PEER_PORT" \
        --initial-advertise-peer-urls="http://127.0.0.1:$PEER_PORT" \
        --initial-cluster="rebalanser=http://127.0.0.1:$PEER_PORT" \
        --unsafe-no-fsync=true --log-level=warn
    if ! wait_ready etcd 60 etcd_healthy; then
        if port_clash etcd && ((attempt < 3)); then
            log "etcd: port clash; retrying with other ports"; do_down; continue
        fi
        fail_with_log etcd "etcd did not become healthy at $ETCD_URL within 60s"
    fi

    start kube-apiserver "$BUILT/kube-apiserver" \
        --etcd-servers="$ETCD_URL" \
        --bind-address=127.0.0.1 --secure-port="$API_PORT" --advertise-address=127.0.0.1 \
        --cert-dir="$PKI" \
        --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
        --client-ca-file="$PKI/ca.crt" \
        --authorization-mode=Node,RBAC \
        --service-account-issuer=https://kubernetes.default.svc.cluster.local \
        --service-account-key-file="$PKI/sa.pub" \
        --service-account-signing-key-file="$PKI/sa.key" \
        --service-cluster-ip-range=10.0.0.0/24 \
        --disable-admission-plugins=ServiceAccount \
        --endpoint-reconciler-type=none \
        --allow-privileged=true \
        --profiling=false
    printf 'SERVER=%s\nKUBECONFIG=%s\nETCD_URL=%s\n' "$SERVER" "$DIR/kubeconfig" "$ETCD_URL" \
        > "$DIR/cluster.env"
    if ! wait_ready kube-apiserver "$TIMEOUT" readyz "$SERVER"; then
        if port_clash kube-apiserver && ((attempt < 3)); then
            log "kube-apiserver: port clash; retrying with other ports"; do_down; continue
        fi
        fail_with_log kube-apiserver \
            "kube-apiserver did not become ready at $SERVER/readyz within ${TIMEOUT}s"
    fi
    break
done

b64() { base64 -w0 < "$1"; }
umask 077
cat > "$DIR/kubeconfig.tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: rebalanser-local
  cluster:
    server: $SERVER
    certificate-authority-data: $(b64 "$PKI/ca.crt")
users:
- name: rebalanser-admin
  user:
    client-certificate-data: $(b64 "$PKI/admin.crt")
    client-key-data: $(b64 "$PKI/admin.key")
contexts:
- name: rebalanser-local
  context:
    cluster: rebalanser-local
    user: rebalanser-admin
    namespace: default
current-context: rebalanser-local
EOF
mv -f "$DIR/kubeconfig.tmp" "$DIR/kubeconfig"

# The apiserver creates the system namespaces and RBAC bootstrap roles itself.
system_namespaces() {
    "$DIR/bin/kubectl" --kubeconfig "$DIR/kubeconfig" --request-timeout=5s \
        get namespace default kube-system >/dev/null 2>&1
}
if ! wait_ready kube-apiserver 60 system_namespaces; then
    fail_with_log kube-apiserver "namespaces default/kube-system did not appear within 60s"
fi
log "up in $((SECONDS - start_t))s: $SERVER"
log "  export KUBECONFIG=$DIR/kubeconfig PATH=$DIR/bin:\$PATH"
