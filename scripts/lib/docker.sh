# shellcheck shell=bash
# Sourced by the scripts that talk to Docker. Sets DOCKER to the client to call and pins the API
# version to what Debian's 20.10 engine speaks (1.41), so a newer client earlier on PATH (for
# example a 28.x in /usr/local/bin) still works against it. Override with DOCKER=... or
# DOCKER_API_VERSION=... in the environment.
if [[ -z "${DOCKER:-}" ]]; then
    if [[ -x /usr/bin/docker ]]; then DOCKER=/usr/bin/docker; else DOCKER=docker; fi
fi
export DOCKER
export DOCKER_API_VERSION="${DOCKER_API_VERSION:-1.41}"
