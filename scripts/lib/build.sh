# shellcheck shell=bash
# Helpers for the build scripts (sourced). The caller sets NAME (the log prefix).
# shellcheck disable=SC2153  # NAME is set by the sourcing script

log() { printf '%s: %s\n' "$NAME" "$*" >&2; }
die() { log "$*"; exit 1; }

# find_go: sets GO to the Go toolchain (GO=..., PATH, or /usr/local/go).
find_go() {
    GO="${GO:-}"
    if [[ -z "$GO" ]]; then
        if command -v go >/dev/null 2>&1; then GO="$(command -v go)"
        elif [[ -x /usr/local/go/bin/go ]]; then GO=/usr/local/go/bin/go
        else die "no Go toolchain found (install Go >= 1.24 or set GO=...)"
        fi
    fi
}

# lock_build DIR: holds DIR/.lock on fd 9 for the rest of the script, so one build per cache dir runs
# at a time (make and a pytest fixture may race); waits, saying so, while another holds it.
lock_build() {
    exec 9>"$1/.lock"
    if ! flock -n 9; then
        log "another build of $1 is running; waiting for it"
        flock 9
    fi
}

# go_static_env: the environment of every Go build here (needs GO): static binaries, no local paths or
# VCS stamps in them, and this toolchain only (no download of another).
go_static_env() {
    export CGO_ENABLED=0 GOTOOLCHAIN=local
    GOFLAGS="$("$GO" env GOFLAGS)"
    export GOFLAGS="${GOFLAGS:+$GOFLAGS }-trimpath -buildvcs=false"
}

# run_step NAME LOGFILE CMD...: runs CMD in the background, prints a progress line every 30 s,
# and on failure prints the tail of its log and exits with its status.
run_step() {
    local name="$1" logf="$2"; shift 2
    local start=$SECONDS pid rc=0
    log "$name: started (log: $logf)"
    "$@" >"$logf" 2>&1 &
    pid=$!
    # shellcheck disable=SC2064  # the pid is meant to be expanded now
    trap "kill $pid 2>/dev/null || true" EXIT INT TERM
    while kill -0 "$pid" 2>/dev/null; do
        for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
        if kill -0 "$pid" 2>/dev/null; then
            log "$name: still building ($((SECONDS - start))s elapsed, $(grep -vc "^go: " "$logf" || true) packages compiled)"
        fi
    done
    wait "$pid" || rc=$?
    trap - EXIT INT TERM
    if [[ $rc -ne 0 ]]; then
        log "$name: FAILED (exit $rc) after $((SECONDS - start))s; last lines of $logf:"
        tail -n 40 "$logf" >&2
        exit "$rc"
    fi
    log "$name: done in $((SECONDS - start))s"
}
