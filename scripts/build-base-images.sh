#!/usr/bin/env bash
# Local base images, made here because no public image registry is reachable:
#
#   rebalanser/bookworm:<hash>   Debian bookworm (debootstrap --variant=minbase), with this
#                                machine's CA bundle (containers reach the package registries
#                                through the same TLS interception as the host)
#   rebalanser/python:<hash>     the above + python3, python3-venv (bookworm's Python is 3.11)
#
# Both are also tagged :local. Prints the python image name (NAME:TAG) on stdout; progress on stderr.
#
#   scripts/build-base-images.sh             build what is missing
#   scripts/build-base-images.sh --bookworm  print the bookworm image name (building it if missing)
#
# Cache: ${REBALANSER_CACHE:-~/.cache/rebalanser}/images/bookworm-minbase-<hash>.tar.gz (the rootfs,
# ~30 MB) survives `docker system prune`, so a fresh engine re-imports it in seconds instead of
# running debootstrap again. <hash> covers RECIPE, the suite and the CA bundle.
set -euo pipefail

RECIPE=3
SUITE=bookworm
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/lib/docker.sh
source "$ROOT/scripts/lib/docker.sh"
CACHE="${REBALANSER_CACHE:-$HOME/.cache/rebalanser}"
CA_BUNDLE="${REBALANSER_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}"

log() { printf 'build-base-images: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

[[ -f "$CA_BUNDLE" ]] || die "no CA bundle at $CA_BUNDLE (set REBALANSER_CA_BUNDLE)"
"$ROOT/scripts/install-docker.sh"

HASH="$({ printf 'recipe=%s suite=%s\n' "$RECIPE" "$SUITE"; cat "$CA_BUNDLE"; } | sha256sum | cut -c1-12)"
BOOKWORM="rebalanser/bookworm:$HASH"
PY_HASH="$({ echo "$HASH"; cat "$ROOT/e2e/images/python/Dockerfile"; } | sha256sum | cut -c1-12)"
PYTHON="rebalanser/python:$PY_HASH"
TARBALL="$CACHE/images/bookworm-minbase-$HASH.tar.gz"

have_image() { "$DOCKER" image inspect "$1" >/dev/null 2>&1; }

mkdir -p "$CACHE/images"
exec 9>"$CACHE/images/.base.lock"
flock 9

if ! have_image "$BOOKWORM"; then
    if [[ ! -s "$TARBALL" ]]; then
        command -v debootstrap >/dev/null 2>&1 || die "debootstrap is missing (scripts/install-docker.sh installs it)"
        start=$SECONDS
        rootfs="$(mktemp -d "$CACHE/images/rootfs.XXXXXX")"
        trap 'rm -rf "$rootfs"' EXIT
        log "debootstrap --variant=minbase $SUITE (about 75 s; log: $CACHE/images/debootstrap.log)"
        if ! debootstrap --variant=minbase "$SUITE" "$rootfs" >"$CACHE/images/debootstrap.log" 2>&1; then
            tail -n 20 "$CACHE/images/debootstrap.log" >&2
            die "debootstrap failed (log: $CACHE/images/debootstrap.log)"
        fi
        # The host's apt sources (the same mirrors the host reaches), its CA bundle, lean apt.
        if compgen -G "/etc/apt/sources.list.d/*.sources" >/dev/null; then
            rm -f "$rootfs/etc/apt/sources.list"
            cp /etc/apt/sources.list.d/*.sources "$rootfs/etc/apt/sources.list.d/"
        fi
        # As the bundle, and as a local CA file, so that update-ca-certificates (which runs when a
        # later apt-get pulls in ca-certificates) keeps the machine's extra CAs in the bundle.
        install -D -m 0644 "$CA_BUNDLE" "$rootfs/etc/ssl/certs/ca-certificates.crt"
        install -D -m 0644 "$CA_BUNDLE" "$rootfs/usr/local/share/ca-certificates/rebalanser-host-bundle.crt"
        cat > "$rootfs/etc/apt/apt.conf.d/90rebalanser" <<'EOF'
APT::Install-Recommends "false";
APT::Install-Suggests "false";
Acquire::Check-Valid-Until "false";
EOF
        printf 'path-exclude /usr/share/doc/*\npath-exclude /usr/share/man/*\npath-exclude /usr/share/locale/*\n' \
            > "$rootfs/etc/dpkg/dpkg.cfg.d/90rebalanser-nodoc"
        # Files only: some packages' scripts expect the man directories (e.g. man1) to exist.
        rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
        find "$rootfs/usr/share/doc" "$rootfs/usr/share/man" -type f -delete
        tar -C "$rootfs" --numeric-owner -czf "$TARBALL.tmp" .
        mv -f "$TARBALL.tmp" "$TARBALL"
        rm -rf "$rootfs"
        trap - EXIT
        log "rootfs cached: $TARBALL ($((SECONDS - start))s)"
    fi
    log "docker import $TARBALL $BOOKWORM"
    "$DOCKER" import --change 'CMD ["/bin/bash"]' --change 'ENV LANG=C.UTF-8' \
        "$TARBALL" "$BOOKWORM" >/dev/null
    "$DOCKER" tag "$BOOKWORM" rebalanser/bookworm:local
fi

if [[ "${1:-}" == "--bookworm" ]]; then echo "$BOOKWORM"; exit 0; fi

if ! have_image "$PYTHON"; then
    start=$SECONDS
    log "docker build $PYTHON (python3 + python3-venv from $SUITE)"
    "$DOCKER" build -q --build-arg "BASE=$BOOKWORM" -t "$PYTHON" -t rebalanser/python:local \
        "$ROOT/e2e/images/python" >/dev/null
    log "built $PYTHON ($((SECONDS - start))s)"
fi
echo "$PYTHON"
