# One image for both entrypoints: `rebalanser` (worker library CLI) and `rebalanser-operator`.
# Built from the repository root: docker build -t rebalanser .
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY worker_lib ./worker_lib
COPY operator ./operator
# Every dependency is pinned in pyproject.toml; "." is this repository.
# hadolint ignore=DL3013
RUN pip install --prefix=/install ".[operator]"

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="rebalanser" \
      org.opencontainers.image.description="Rebalanser worker library CLI and Kubernetes operator" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
RUN groupadd --system --gid 10001 rebalanser \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin rebalanser
COPY --from=build /install /usr/local
USER 10001:10001
WORKDIR /tmp
EXPOSE 8080 8081
CMD ["rebalanser-operator", "--help"]
