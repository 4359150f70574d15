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
COPY pyproject.toml README.md ./
COPY worker_lib ./worker_lib
COPY operator ./operator
# Every dependency is pinned in pyproject.toml; "." is this repository. A non-editable install
# compiles the bytecode now, so nothing is written at run time (read-only root filesystem).
# hadolint ignore=DL3013
RUN /opt/venv/bin/pip install ".[operator,metrics]" \
    && /opt/venv/bin/rebalanser --help >/dev/null \
    && /opt/venv/bin/rebalanser-operator --help >/dev/null

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="rebalanser" \
      org.opencontainers.image.description="Rebalanser worker library CLI and Kubernetes operator" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 VIRTUAL_ENV=/opt/venv PATH=/opt/venv/bin:$PATH
RUN groupadd --system --gid 10001 rebalanser \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin rebalanser
COPY --from=build /opt/venv /opt/venv
USER 10001:10001
WORKDIR /tmp
EXPOSE 8080 8081
CMD ["rebalanser-operator", "--help"]
