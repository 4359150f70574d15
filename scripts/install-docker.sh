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

if answers && command -v debootstrap >/dev/null 2>&1; then exit 0; fi

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

if answers; then exit 0; fi

[[ "$(id -u)" == 0 ]] || unavailable "no Docker engine answers and dockerd needs root to start"
mkdir -p "$CACHE"
if ! pgrep -x dockerd >/dev/null 2>&1; then
    log "starting dockerd (log: $CACHE/dockerd.log)"
    # Its own session, no inherited descriptors: it outlives this script and make.
    setsid dockerd >"$CACHE/dockerd.log" 2>&1 </dev/null 9>&- 8>&- &
fi
for ((i = 0; i < WAIT * 4; i++)); do
    answers && { log "dockerd answers ($("$DOCKER" version --format '{{.Server.Version}}' 2>/dev/null))"; exit 0; }
    sleep 0.25
done
tail -n 20 "$CACHE/dockerd.log" >&2 2>/dev/null || true
unavailable "dockerd did not answer within ${WAIT}s (log: $CACHE/dockerd.log)"
