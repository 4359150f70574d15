#!/usr/bin/env bash
# Make a Docker engine answer on this machine: installs Debian's docker.io (and debootstrap, which
# makes the local base images) with apt-get when they are missing, and starts dockerd in the
# background when no daemon answers. Idempotent; a second run costs well under a second.
#
#   scripts/install-docker.sh           install/start as needed; exit 0 when the engine answers
#   scripts/install-docker.sh --check   install nothing, start nothing: exit 0 when the engine answers
#
# When Docker cannot run here (not root, no apt-get, dockerd does not come up), it prints ONE line
# starting with "docker unavailable:" on stderr and exits 3, so callers can skip cleanly.
#
# The daemon started here logs to ${REBALANSER_CACHE}/dockerd.log and writes its pid to
# /var/run/docker.pid (dockerd's own default). Clients: use scripts/lib/docker.sh (it picks
# Debian's client and pins the API version the 20.10 daemon speaks).
#
# Where root's capability bounding set is not complete (on these machines CAP_SYS_RESOURCE is
# missing), Docker 20.10 cannot start any privileged container (runc: "unable to apply caps"), and
# kind's nodes are privileged containers. Such a daemon is started with scripts/lib/runc-bounded.py
# (copied to ${REBALANSER_CACHE}/docker/) as its default runtime: runc, minus the capabilities the
# host cannot grant. A daemon this script started earlier without it is restarted once.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/lib/docker.sh
source "$ROOT/scripts/lib/docker.sh"
CACHE="${REBALANSER_CACHE:-$HOME/.cache/rebalanser}"
WAIT="${REBALANSER_DOCKER_WAIT:-90}"

unavailable() { printf 'docker unavailable: %s\n' "$*" >&2; exit 3; }
log() { printf 'install-docker: %s\n' "$*" >&2; }

answers() { "$DOCKER" info >/dev/null 2>&1; }

if [[ "${1:-}" == "--check" ]]; then
    answers && exit 0
    unavailable "no Docker engine answers ($DOCKER info failed)"
elif [[ $# -gt 0 ]]; then
    echo "usage: $0 [--check]" >&2; exit 2
fi


missing=()
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
[[ -x /usr/bin/docker ]] || missing+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
if ((${#missing[@]})); then
    [[ "$(id -u)" == 0 ]] || unavailable "needs root to install ${missing[*]} (running as $(id -un))"
    command -v apt-get >/dev/null 2>&1 || unavailable "no apt-get to install ${missing[*]}"
    mapfile -t pkgs < <(printf '%s\n' "${missing[@]}" | sort -u)
    log "apt-get install ${pkgs[*]}"
    # Serialised with any other apt user on the machine (dpkg's own lock, waited for).
    if ! DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -q \
            --no-install-recommends "${pkgs[@]}" >"${TMPDIR:-/tmp}/rebalanser-apt.log" 2>&1; then
        tail -n 20 "${TMPDIR:-/tmp}/rebalanser-apt.log" >&2
        unavailable "apt-get install ${pkgs[*]} failed (log: ${TMPDIR:-/tmp}/rebalanser-apt.log)"
    fi
fi

# bounding_set_complete: every capability the kernel knows is in root's bounding set.
bounding_set_complete() {
    local last mask
    last="$(cat /proc/sys/kernel/cap_last_cap 2>/dev/null)" || return 0
    mask="$(sed -n 's/^CapBnd:[[:space:]]*//p' /proc/self/status)"
    (( 16#$mask == (1 << (last + 1)) - 1 ))
}

RUNTIME_ARGS=()
if ! bounding_set_complete; then
    RUNTIME_DIR="$CACHE/docker"
    mkdir -p "$RUNTIME_DIR"
    python="$(python3 -c 'import sys; print(sys.executable)' 2>/dev/null)" \
        || unavailable "python3 is needed for the runtime wrapper (root's capability bounding set is incomplete)"
    runc="$(command -v runc || echo /usr/sbin/runc)"
    # Several builds may run this at once (cluster-prereqs runs them side by side), and runc may be
    # executing the files meanwhile: each file is written under a name of this process, then renamed.
    tmp="$RUNTIME_DIR/.runc-bounded.$$"
    install -m 0644 "$ROOT/scripts/lib/runc-bounded.py" "$tmp.py"
    mv -f "$tmp.py" "$RUNTIME_DIR/runc-bounded.py"
    printf '#!/bin/sh\nRUNC_BOUNDED_RUNC=%s exec %s %s "$@"\n' "$runc" "$python" "$RUNTIME_DIR/runc-bounded.py" \
        > "$tmp"
    chmod 0755 "$tmp"
    mv -f "$tmp" "$RUNTIME_DIR/runc-bounded"
    RUNTIME_ARGS=(--add-runtime "runc-bounded=$RUNTIME_DIR/runc-bounded" --default-runtime runc-bounded)
fi

if answers; then
    ((${#RUNTIME_ARGS[@]})) || exit 0
    [[ "$("$DOCKER" info -f '{{.DefaultRuntime}}' 2>/dev/null)" == runc-bounded ]] && exit 0
    pid="$(cat /var/run/docker.pid 2>/dev/null || true)"
    if [[ -n "$pid" && -f "$CACHE/dockerd.started" && "$(cat "$CACHE/dockerd.started")" == "$pid" ]]; then
        log "restarting the dockerd started here (pid $pid) with the runtime wrapper for privileged containers"
        kill -TERM "$pid"
        for ((i = 0; i < 120; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    else
        log "warning: the running dockerd was not started here and lacks the runtime wrapper:" \
            "privileged containers (kind's nodes) will fail on this host"
        exit 0
    fi
fi

[[ "$(id -u)" == 0 ]] || unavailable "no Docker engine answers and dockerd needs root to start"
mkdir -p "$CACHE"
if ! pgrep -x dockerd >/dev/null 2>&1; then
    log "starting dockerd (log: $CACHE/dockerd.log)"
    # Its own session, no inherited descriptors: it outlives this script and make.
    setsid dockerd "${RUNTIME_ARGS[@]}" >"$CACHE/dockerd.log" 2>&1 </dev/null 9>&- 8>&- &
    started=1
fi
for ((i = 0; i < WAIT * 4; i++)); do
    if answers; then
        # Remembered so that a later run may restart this daemon (and no other) with new options.
        [[ -n "${started:-}" ]] && cat /var/run/docker.pid > "$CACHE/dockerd.started" 2>/dev/null
        log "dockerd answers ($("$DOCKER" version --format '{{.Server.Version}}' 2>/dev/null))"
        exit 0
    fi
    sleep 0.25
done
tail -n 20 "$CACHE/dockerd.log" >&2 2>/dev/null || true
unavailable "dockerd did not answer within ${WAIT}s (log: $CACHE/dockerd.log)"
