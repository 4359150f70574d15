# One image for both entrypoints: `rebalanser` (worker library CLI) and `rebalanser-operator`.
# Built from the repository root: docker build -t rebalanser .
# PYTHON_IMAGE may be any Debian-layout Python 3.11+ image (the official one by default; `make image`
# passes a base made locally). Everything is installed into a virtualenv, /opt/venv, copied whole, so
# the layout does not depend on where the base's Python keeps its site-packages.
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python3 -m venv /opt/venv
WORKDIR /src
COPY pyproject.toml README.md LICENSE constraints.txt ./
COPY worker_lib ./worker_lib
COPY operator ./operator
# pyproject.toml holds ranges, constraints.txt the exact versions; "." is this repository. A
# non-editable install compiles the bytecode now, so nothing is written at run time (read-only root
# filesystem).
# hadolint ignore=DL3013
RUN /opt/venv/bin/pip install -c constraints.txt ".[operator,metrics]" \
    && /opt/venv/bin/rebalanser --help >/dev/null \
    && /opt/venv/bin/rebalanser-operator --help >/dev/null
# The software bill of materials of /opt/venv (CycloneDX JSON), made by cyclonedx-py from its own
# virtualenv, which stays in this stage.
# hadolint ignore=DL3013
RUN python3 -m venv /opt/sbom \
    && /opt/sbom/bin/pip install -c constraints.txt "cyclonedx-bom" \
    && /opt/sbom/bin/cyclonedx-py environment --pyproject pyproject.toml --output-reproducible --of JSON \
       -o /opt/rebalanser.cdx.json /opt/venv/bin/python

FROM ${PYTHON_IMAGE}
# Set by `make dist` (scripts/dist.sh) and the release workflow; the defaults keep a plain build valid.
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=1970-01-01T00:00:00Z
ARG SOURCE=https://github.com/rebalanser/rebalanser
LABEL org.opencontainers.image.title="rebalanser" \
      org.opencontainers.image.description="Rebalanser worker library CLI and Kubernetes operator" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.url="${SOURCE}" \
      org.opencontainers.image.documentation="${SOURCE}/tree/main/docs" \
      org.opencontainers.image.vendor="The Rebalanser authors" \
      io.rebalanser.sbom="/usr/share/doc/rebalanser/sbom.cdx.json"
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 VIRTUAL_ENV=/opt/venv PATH=/opt/venv/bin:$PATH
RUN groupadd --system --gid 10001 rebalanser \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin rebalanser
COPY --from=build /opt/venv /opt/venv
COPY --from=build /opt/rebalanser.cdx.json /usr/share/doc/rebalanser/sbom.cdx.json
COPY LICENSE /usr/share/doc/rebalanser/LICENSE
USER 10001:10001
WORKDIR /tmp
EXPOSE 8080 8081
CMD ["rebalanser-operator", "--help"]
