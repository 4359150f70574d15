# Rebalanser — every install step lives here (a clean clone needs nothing else).
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
CACHE ?= $(HOME)/.cache/rebalanser
export REBALANSER_CACHE := $(CACHE)

.PHONY: help setup venv zookeeper controlplane node cluster-prereqs test unit lint typecheck crds demo demo-lite bench bench-kafka chaos docs \
        cluster-up cluster-down image docker clean model model-negative model-deep

help:
	@echo "make demo          the demo on the local cluster: operator and workers as pods (host processes without it)"
	@echo "make demo-lite     the demo without Kubernetes: ZooKeeper and workers only"
	@echo "make test          set everything up and run the whole suite (what CI runs)"
	@echo "make cluster-up    start the local cluster: a kind node built here + 3-server ZooKeeper (.cluster/)"
	@echo "make cluster-down  remove it (node container, network, kubeconfig)"
	@echo "make image         build the Dockerfile into rebalanser:dev (base image made here)"
	@echo "make bench         benchmarks -> bench/results.json, docs/benchmarks.md, docs/figures/bench-*.svg"
	@echo "make bench-kafka   Kafka consumer groups (eager, cooperative-sticky, KIP-848) beside rebalanser and kazoo at N=10, R=1,000 (Java, Maven) -> the same report"
	@echo "make chaos         long randomised fault campaign, then failover faults on the real cluster -> docs/chaos-report.{md,json}, docs/chaos-cluster.json, docs/figures/chaos-timeline.svg"
	@echo "make docs          the documentation site (MkDocs, API reference from the docstrings) -> .site/"

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

# kubelet, kubeadm, kube-controller-manager, kube-scheduler, kube-proxy, kind, CoreDNS, pause
node:
	@scripts/build-node.sh >/dev/null

# Docker, the control-plane and node binaries, the kind node image, the ZooKeeper image and
# rebalanser:dev (the images build while Go compiles); where Docker cannot run it says so in one
# line and the rest goes on (the pod tests skip)
cluster-prereqs:
	@scripts/cluster-prereqs.sh

lint: venv
	$(BIN)/ruff check worker_lib operator tests bench e2e scripts examples
	$(BIN)/mypy worker_lib/rebalanser operator/rebalanser_operator examples/asyncio_worker.py

crds: venv
	$(BIN)/python -m rebalanser_operator.crdgen

test: venv zookeeper cluster-prereqs setup lint model model-negative
	$(BIN)/pytest -q tests

# The protocol's model (model/, docs/protocol.md "What is checked"): bounded exhaustive checks with
# every rule on; each protected rule removed in turn (a counterexample each); deeper bounds (chaos).
model:
	cd model && cargo run --release --locked -q -- check

model-negative:
	cd model && cargo test --release --locked -q --test negative -- --nocapture --test-threads=1

model-deep:
	cd model && cargo run --release --locked -q -- deep

unit: venv
	$(BIN)/pytest -q tests/unit

# On the real cluster (the operator and the workers as pods); host processes when it cannot start.
demo: setup
	@if $(MAKE) --no-print-directory cluster-up image; then \
		$(BIN)/python -m e2e.demo --pods $(DEMO_ARGS); \
	else \
		echo "make demo: the cluster could not start (see above); running the demo with host processes instead"; \
		$(BIN)/python -m e2e.demo $(DEMO_ARGS); \
	fi

# ZooKeeper and workers only (no Go toolchain needed)
demo-lite: venv zookeeper
	$(BIN)/python -m e2e.demo --no-cluster $(DEMO_ARGS)

bench: setup
	$(BIN)/python -m bench.run

# opt-in: a KRaft broker from the released jars (Maven, cached in $(CACHE)) and confluent-kafka consumers;
# the N=10, R=1,000 cells of every implementation from one run, merged into the report
bench-kafka: setup
	$(BIN)/pip install -q -e '.[bench]'
	$(BIN)/python -m bench.run --kafka --only "N=10 R=1000" --merge

# the campaign on ZooKeeper and worker processes, then kubelet-confirmed failover faults on the real
# cluster (tests/chaos/realcluster.py; its section goes into the same report)
chaos: setup image cluster-up model-deep
	$(BIN)/python -m tests.chaos.campaign --minutes $${CHAOS_MINUTES:-30}
	$(BIN)/python -m tests.chaos.realcluster --minutes $${CHAOS_CLUSTER_MINUTES:-12}
	$(BIN)/python -m tests.chaos.explore --all --report

# strict: a warning (a broken link, an unresolvable reference) fails the build
docs: venv
	$(BIN)/mkdocs build --strict -d .site

# Debian's docker.io (and debootstrap) when missing, dockerd started when not answering.
docker:
	@scripts/install-docker.sh

image:
	@scripts/build-image.sh >/dev/null

cluster-up: controlplane node
	@scripts/kind-cluster.sh up

cluster-down:
	@scripts/kind-cluster.sh down

clean:
	rm -rf $(VENV) .site .cluster .pytest_cache .mypy_cache .ruff_cache
