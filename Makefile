# Rebalanser — every install step lives here (a clean clone needs nothing else).
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
CACHE ?= $(HOME)/.cache/rebalanser
export REBALANSER_CACHE := $(CACHE)
VERSION = $(shell sed -n 's/^__version__ = "\(.*\)".*/\1/p' worker_lib/rebalanser/__init__.py)
DIST ?= dist
# every test that needs no server: no ZooKeeper, no API server, no cluster
PURE := -m "not zk and not ensemble and not e2e and not pods and not slow" tests/unit tests/operator tests/recipes tests/docs

.PHONY: help setup venv constraints zookeeper controlplane node helm-docs cluster-prereqs test unit lint typecheck crds \
        chart-readme \
        demo demo-lite bench bench-kafka bench-compare bench-failover chaos docs cluster-up cluster-down image docker dist clean \
        model model-negative model-deep model-conform kazoo-range

# `make help` prints the "##" line of every target (tests/docs/test_makefile.py checks none is missing)
help: ## this list
	@awk -F':.*## ' '/^[a-z][a-z-]*:.*## /{printf "make %-16s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(VENV)/.stamp: pyproject.toml constraints.txt
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c constraints.txt -e '.[dev]'
	touch $@

venv: $(VENV)/.stamp ## .venv with the package (editable) and every extra, at the versions of constraints.txt
setup: venv zookeeper controlplane helm-docs ## venv, ZooKeeper, the control-plane binaries and helm-docs

# The exact versions of constraints.txt: the newest that pyproject.toml's ranges allow, resolved in a
# fresh virtualenv (review the diff before committing it).
constraints: ## regenerate constraints.txt from pyproject.toml's ranges
	rm -rf .constraints-venv && $(PY) -m venv .constraints-venv
	.constraints-venv/bin/pip install -q '.[dev]'
	{ sed -n '/^#/p' constraints.txt; .constraints-venv/bin/pip freeze --exclude-editable | grep -v '^rebalanser'; } > constraints.txt.new
	mv constraints.txt.new constraints.txt && rm -rf .constraints-venv

zookeeper: ## the ZooKeeper server jars (cached)
	@scripts/install-zookeeper.sh >/dev/null

controlplane: ## etcd, kube-apiserver and kubectl built from Go modules (cached)
	@scripts/build-controlplane.sh

helm-docs: ## helm-docs, the generator of the chart's README, built from its Go module (cached)
	@scripts/install-helm-docs.sh >/dev/null

# kubelet, kubeadm, kube-controller-manager, kube-scheduler, kube-proxy, kind, CoreDNS, pause
node: ## the node binaries for the local cluster (cached)
	@scripts/build-node.sh >/dev/null

# Docker, the control-plane and node binaries, the kind node image, the ZooKeeper image and
# rebalanser:dev (the images build while Go compiles); where Docker cannot run it says so in one
# line and the rest goes on (the pod tests skip)
cluster-prereqs: ## Docker, the node image, the ZooKeeper image and rebalanser:dev
	@scripts/cluster-prereqs.sh

lint: venv typecheck ## ruff over everything, then typecheck
	$(BIN)/ruff check worker_lib operator tests bench e2e scripts examples

typecheck: venv ## mypy (strict) over both packages and the examples
	$(BIN)/mypy worker_lib/rebalanser operator/rebalanser_operator examples/asyncio_worker.py

crds: venv ## regenerate the CRD YAML from the pydantic models
	$(BIN)/python -m rebalanser_operator.spec.crdgen

# README.md.gotmpl, Chart.yaml and values.yaml (each key's "# --" comment) -> the chart's README.md;
# tests/operator/test_chart_values.py fails when it is not current. CHART_README_FLAGS=--dry-run prints it.
chart-readme: ## regenerate charts/rebalanser-operator/README.md from its values.yaml (helm-docs)
	@helm_docs="$$(scripts/install-helm-docs.sh)" && "$$helm_docs" --chart-search-root charts/rebalanser-operator \
		--sort-values-order file --log-level warning $(CHART_README_FLAGS)

test: venv zookeeper cluster-prereqs setup lint model model-negative kazoo-range ## set everything up and run the whole suite (what CI runs)
	$(BIN)/pytest -q tests

# The contract with kazoo's private surface and a short real-ZooKeeper subset, run against the lowest and the
# highest kazoo that pyproject.toml allows, each in a throwaway virtualenv (docs/release.md "Which kazoo").
# KAZOO_VERSIONS="2.12.0" tries another release before the range is widened to it.
KAZOO_VERSIONS ?= $(shell $(PY) scripts/kazoo_range.py)
kazoo-range: zookeeper ## the kazoo contract test and a real-ZooKeeper subset at both ends of the allowed kazoo range
	@PY=$(PY) scripts/kazoo-range.sh $(KAZOO_VERSIONS)

# The protocol's model (model/, docs/protocol.md "What is checked"): bounded exhaustive checks with
# every rule on; each protected rule removed in turn (a counterexample each); deeper bounds (chaos).
model: ## the protocol's model, checked exhaustively within bounds (stateright); exit 0 when every invariant holds
	cd model && cargo run --release --locked -q -- check
	cd model && cargo test --release --locked -q --test conform

model-negative: ## each protected rule of the model removed in turn; exit 0 only when every one gives a counterexample
	cd model && cargo test --release --locked -q --test negative -- --nocapture --test-threads=1

# recorded runs (worker event streams) checked against the model: docs/protocol.md "Conformance".
# Every explorer run; CONFORM_SAMPLE steps of each campaign target found under CONFORM_CAMPAIGN.
CONFORM_RUNS ?= .chaos-explore
CONFORM_CAMPAIGN ?= .chaos-campaign
CONFORM_SAMPLE ?= 20
# states per resource before a trace is called undecided; a new coordinator whose connection flapped
# dozens of times before it took office needs about 20 million (1.3 GB, about a minute); most need few
export CONFORM_MAX_STATES ?= 20000000
model-conform: ## recorded explorer runs and a sample of campaign steps checked as behaviours of the model (part of make chaos)
	rm -rf $(CONFORM_RUNS)/traces $(CONFORM_CAMPAIGN)/traces
	$(BIN)/python -m tests.chaos.trace $(CONFORM_RUNS)/runs/* --out $(CONFORM_RUNS)/traces
	cd model && cargo run --release --locked -q -- conform $(abspath $(CONFORM_RUNS))/traces/*.trace
	@if ls $(CONFORM_CAMPAIGN)/*/steps.jsonl >/dev/null 2>&1; then \
		$(BIN)/python -m tests.chaos.trace --out $(CONFORM_CAMPAIGN)/traces --sample $(CONFORM_SAMPLE) \
			$(patsubst %,--campaign %,$(dir $(wildcard $(CONFORM_CAMPAIGN)/*/steps.jsonl))) && \
		cd model && cargo run --release --locked -q -- conform --campaign $(abspath $(CONFORM_CAMPAIGN))/traces/*.trace; \
	else echo "model-conform: no campaign steps under $(CONFORM_CAMPAIGN)"; fi

model-deep: ## the model at deeper bounds (part of make chaos)
	cd model && cargo run --release --locked -q -- deep

unit: venv ## every pure test (library and operator): no ZooKeeper, no API server, no cluster
	$(BIN)/pytest -q $(PURE)

# On the real cluster (the operator and the workers as pods); host processes when it cannot start.
demo: setup ## the demo on the local cluster: operator and workers as pods (host processes without it)
	@if $(MAKE) --no-print-directory cluster-up image; then \
		$(BIN)/python -m e2e.demo --pods $(DEMO_ARGS); \
	else \
		echo "make demo: the cluster could not start (see above); running the demo with host processes instead"; \
		$(BIN)/python -m e2e.demo $(DEMO_ARGS); \
	fi

# ZooKeeper and workers only (no Go toolchain needed)
demo-lite: venv zookeeper ## the demo without Kubernetes: ZooKeeper and workers only
	$(BIN)/python -m e2e.demo --no-cluster $(DEMO_ARGS)

bench: setup ## benchmarks -> bench/results.json, docs/benchmarks.md, docs/figures/bench-*.svg
	$(BIN)/python -m bench.run

# opt-in: a KRaft broker from the released jars (Maven, cached in $(CACHE)) and confluent-kafka consumers;
# the N=10, R=1,000 cells of every implementation and KIP-848 beside rebalanser at N=50, R=1,000, from one
# run, merged into the report
bench-kafka: setup ## Kafka consumer groups beside rebalanser and kazoo (N=10, R=1,000; KIP-848 at N=50) -> the same report
	$(BIN)/pip install -q -e '.[bench]'
	$(BIN)/python -m bench.run --kafka --only "N=10 R=1000 ,N=50 R=1000 " --merge

# REF's library in a throwaway virtualenv (a git worktree of REF) beside this tree's, the same cells for both
# alternately in one run (bench/compare.py): join, leave, kill at N = 10 and 50, the claim book's claim, re-take
# and release; COMPARE_ARGS=--quick for small cells, COMPARE_ARGS="--quiet-below 2" to wait for a quiet machine before each measurement
bench-compare: venv zookeeper ## this tree's library beside REF's in one run (REF=<git ref>) -> bench/before-after/compare-*.md
	@test -n "$(REF)" || { echo "make bench-compare: give the ref to compare with, e.g. REF=main" >&2; exit 2; }
	$(BIN)/python -m bench.compare $(REF) $(COMPARE_ARGS)

# on the real cluster (make cluster-up, make image): kill -> worked again right after a group formed, during a
# rollout and in a calm group, KubeletConfirmed and SessionExpiry (also part of make bench); then the operator
# replicas' cells (bench/failover_replicas.py: a replica killed and a worker of its group right after, a rolling
# update of the operator; BENCH_FAILOVER_ARGS=--replicas-only for those alone); merged into the report
bench-failover: setup ## failover on the real cluster alone (kill -> worked again, bench/failover.py) -> the same report
	$(BIN)/python -m bench.failover --merge $(BENCH_FAILOVER_ARGS)

# the campaign on ZooKeeper and worker processes, then kubelet-confirmed failover faults on the real
# cluster (tests/chaos/realcluster.py; its section goes into the same report). The explorer's every point
# is resumable: a make chaos interrupted in it goes on from where it stopped (.chaos-explore/points*.jsonl;
# EXPLORE_ARGS=--fresh starts over), and its report counts the points of every sitting. CHAOS_EXPLORE_SHARDS=N
# runs N explorers in parallel (a point is mostly waiting: about 15 % of a core each).
chaos: setup image cluster-up model-deep ## long randomised fault campaign, the every-request explorer, failover faults on the real cluster -> docs/chaos-report.*
	$(BIN)/python -m tests.chaos.campaign --minutes $${CHAOS_MINUTES:-30} --workdir $(CONFORM_CAMPAIGN)
	$(BIN)/python -m tests.chaos.realcluster --minutes $${CHAOS_CLUSTER_MINUTES:-12}
	$(BIN)/python -m tests.chaos.explore --all --report --workdir $(CONFORM_RUNS) --shards $${CHAOS_EXPLORE_SHARDS:-1} $(EXPLORE_ARGS)
	$(MAKE) model-conform

# strict: a warning (a broken link, an unresolvable reference) fails the build
docs: venv ## the documentation site (MkDocs, API reference from the docstrings) -> .site/
	$(BIN)/mkdocs build --strict -d .site

# Debian's docker.io (and debootstrap) when missing, dockerd started when not answering.
docker: ## Debian's docker.io when missing, dockerd started when not answering
	@scripts/install-docker.sh

image: ## build the Dockerfile into rebalanser:dev (base image made here), load it into the cluster when up
	@scripts/build-image.sh >/dev/null

# Everything a release publishes, built here (docs/release.md): wheel, sdist, chart, image + SBOM.
dist: venv ## wheel, sdist, chart .tgz (with its README) and the image tarball with its SBOM -> dist/
	@scripts/dist.sh "$(DIST)"

cluster-up: controlplane node ## start the local cluster: a kind node built here + 3-server ZooKeeper (.cluster/)
	@scripts/cluster.sh up

cluster-down: ## remove it (node container, network, kubeconfig)
	@scripts/cluster.sh down

clean: ## remove the virtualenv, the site, the cluster state, dist/ and the caches
	rm -rf $(VENV) .site .cluster $(DIST) .pytest_cache .mypy_cache .ruff_cache
