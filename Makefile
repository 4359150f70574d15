# Rebalanser — every install step lives here (a clean clone needs nothing else).
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
CACHE ?= $(HOME)/.cache/rebalanser
export REBALANSER_CACHE := $(CACHE)

.PHONY: help setup venv zookeeper controlplane test unit lint typecheck crds demo demo-lite bench chaos \
        cluster-up cluster-down image docker clean

help:
	@echo "make demo          local demo: ZooKeeper, control plane, operator, workers, a ResourceGroup"
	@echo "make demo-lite     the demo without Kubernetes: ZooKeeper and workers only"
	@echo "make test          set everything up and run the whole suite (what CI runs)"
	@echo "make cluster-up    start a local kube-apiserver + etcd (.cluster/kubeconfig, .cluster/bin)"
	@echo "make cluster-down  stop it"
	@echo "make image         build the Dockerfile into rebalanser:dev (base image made here)"
	@echo "make bench         benchmarks -> bench/results.json, docs/benchmarks.md"
	@echo "make chaos         long randomised fault campaign -> docs/chaos-report.{md,json}"

$(VENV)/.stamp: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

venv: $(VENV)/.stamp
setup: venv zookeeper controlplane

zookeeper:
	@scripts/install-zookeeper.sh >/dev/null

controlplane:
	@scripts/build-controlplane.sh

lint: venv
	$(BIN)/ruff check worker_lib operator tests bench e2e
	$(BIN)/mypy worker_lib/rebalanser operator/rebalanser_operator

crds: venv
	$(BIN)/python -m rebalanser_operator.crdgen

test: setup lint
	$(BIN)/pytest -q tests

unit: venv
	$(BIN)/pytest -q tests/unit

demo: setup
	$(BIN)/python -m e2e.demo $(DEMO_ARGS)

# ZooKeeper and workers only (no Go toolchain needed)
demo-lite: venv zookeeper
	$(BIN)/python -m e2e.demo --no-cluster $(DEMO_ARGS)

bench: setup
	$(BIN)/python -m bench.run

chaos: setup
	$(BIN)/python -m tests.chaos.campaign --minutes $${CHAOS_MINUTES:-30}

# Debian's docker.io (and debootstrap) when missing, dockerd started when not answering.
docker:
	@scripts/install-docker.sh

image:
	@scripts/build-image.sh >/dev/null

cluster-up: controlplane
	@scripts/cluster.sh up

cluster-down:
	@scripts/cluster.sh down

clean:
	rm -rf $(VENV) .cluster .pytest_cache .mypy_cache .ruff_cache
