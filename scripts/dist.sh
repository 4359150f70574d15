#!/usr/bin/env bash
# make dist: everything a release publishes, built here into DIST (default dist/):
#   rebalanser-VERSION-py3-none-any.whl, rebalanser-VERSION.tar.gz   the wheel and the sdist
#   rebalanser-operator-VERSION.tgz                                  the chart, with its README
#   rebalanser-image-VERSION.tar.gz, rebalanser-image-VERSION.cdx.json  the image (docker save) and its SBOM
#   SHA256SUMS
# The version is rebalanser.__version__; the chart is packaged with it as version and appVersion (a test
# keeps Chart.yaml equal to it). The image is built from PYTHON_IMAGE when set, else from the base made
# here (scripts/build-base-images.sh). Where Docker cannot run, the image is skipped with one line
# (DIST_REQUIRE_IMAGE=1 makes that an error); DIST_PYTHON_ONLY=1 stops after the wheel and the sdist.
# docs/release.md says what the release workflow does.
set -euo pipefail
NAME=dist
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/lib/build.sh
source "$ROOT/scripts/lib/build.sh"
DIST="$(mkdir -p "${1:-dist}" && cd "${1:-dist}" && pwd)"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
VERSION="$(sed -n 's/^__version__ = "\(.*\)".*/\1/p' "$ROOT/worker_lib/rebalanser/__init__.py")"
[[ -n "$VERSION" ]] || die "no __version__ in worker_lib/rebalanser/__init__.py"
IMAGE="${DIST_IMAGE:-rebalanser:$VERSION}"
STAGE="$(mktemp -d)"
trap 'rm -rf "$STAGE"' EXIT
rm -f "$DIST"/rebalanser-*

# 1. wheel and sdist, from a clean copy of the sources (the checkout stays clean). The sdist also
#    carries the tests and what they read (MANIFEST.in); the package index shows PACKAGE.md.
log "wheel and sdist $VERSION"
git -C "$ROOT" ls-files -z --cached --others --exclude-standard \
    | grep -zE '^(pyproject\.toml|README\.md|PACKAGE\.md|MANIFEST\.in|LICENSE|constraints\.txt|worker_lib/|operator/|tests/|e2e/|charts/|crds/|examples/)' \
    | xargs -0 cp --parents -t "$STAGE" --
(cd "$STAGE" && "$PYTHON" -m build --outdir "$DIST" . >"$STAGE/build.log" 2>&1) \
    || { tail -n 30 "$STAGE/build.log" >&2; die "python -m build failed"; }

if [[ "${DIST_PYTHON_ONLY:-0}" == 1 ]]; then ls -1 "$DIST"; exit 0; fi

# 2. the source chart, packaged at the package's version. Its README.md is the committed one (helm-docs
#    writes it from values.yaml, `make chart-readme`; a test keeps it current); .helmignore leaves out
#    its template, README.md.gotmpl.
HELM="$("$ROOT/scripts/build-controlplane.sh" --bin-dir 2>/dev/null)/helm"
[[ -x "$HELM" ]] || HELM="$(command -v helm || true)"
[[ -x "$HELM" ]] || die "helm not found: make controlplane builds it"
"$HELM" package "$ROOT/charts/rebalanser-operator" --version "$VERSION" --app-version "$VERSION" \
    --destination "$DIST" >/dev/null
log "chart rebalanser-operator-$VERSION.tgz"

# 3. the image, with OCI labels, saved as a tarball; its SBOM (made inside the build) beside it
if "$ROOT/scripts/install-docker.sh" >/dev/null 2>&1; then
    # shellcheck source=scripts/lib/docker.sh
    source "$ROOT/scripts/lib/docker.sh"
    BASE="${PYTHON_IMAGE:-$("$ROOT/scripts/build-base-images.sh")}"
    REVISION="$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)"
    CREATED="$(date -u -d "@$(git -C "$ROOT" log -1 --format=%ct 2>/dev/null || date +%s)" +%Y-%m-%dT%H:%M:%SZ)"
    log "docker build -t $IMAGE (PYTHON_IMAGE=$BASE)"
    "$DOCKER" build --build-arg "PYTHON_IMAGE=$BASE" --build-arg "VERSION=$VERSION" \
        --build-arg "REVISION=$REVISION" --build-arg "CREATED=$CREATED" -t "$IMAGE" "$ROOT" \
        >"$STAGE/image.log" 2>&1 || { tail -n 30 "$STAGE/image.log" >&2; die "docker build failed"; }
    container="$("$DOCKER" create "$IMAGE")"
    "$DOCKER" cp "$container:/usr/share/doc/rebalanser/sbom.cdx.json" "$DIST/rebalanser-image-$VERSION.cdx.json"
    "$DOCKER" rm "$container" >/dev/null
    "$DOCKER" save "$IMAGE" | gzip -1 >"$DIST/rebalanser-image-$VERSION.tar.gz"
    log "image $IMAGE -> rebalanser-image-$VERSION.tar.gz (+ .cdx.json)"
elif [[ "${DIST_REQUIRE_IMAGE:-0}" == 1 ]]; then
    die "Docker cannot run here: no image"
else
    log "Docker cannot run here: the image is skipped (scripts/install-docker.sh says why)"
fi

(cd "$DIST" && sha256sum rebalanser-* >SHA256SUMS)
ls -1 "$DIST"
