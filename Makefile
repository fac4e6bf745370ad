# Every target installs what it needs into $(VENV) first, so each works on a fresh clone.
VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-dev
PYTEST_ARGS ?=
# The local control plane of `make controlplane-up` keeps its state (etcd's data, keys,
# kubeconfig, logs) here.
CONTROLPLANE_STATE ?= $(CURDIR)/.controlplane

.PHONY: controlplane-build controlplane-up controlplane-down help install run test test-unit test-integration test-cluster resilience lint format typecheck crd e2e dev dev-down bench clean

help: ## List the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP) ## Create the virtualenv with the operator and its test and dev tools

run: $(STAMP) ## Run the operator on the current kube context; with none, on a local control plane
	@$(BIN)/python -m craft_operator.devtools.local --state "$(CONTROLPLANE_STATE)" \
		--build-script hack/controlplane/build.sh

controlplane-build: ## Build the local control plane's binaries from Kubernetes' Go modules (cached)
	@hack/controlplane/build.sh

controlplane-up: $(STAMP) ## Start a local control plane (etcd, kube-apiserver, controllers, kwok); prints KUBECONFIG=...
	@bin="$$(hack/controlplane/build.sh)" && \
	$(BIN)/python -m craft_operator.devtools.controlplane up --bin-dir "$$bin" --state "$(CONTROLPLANE_STATE)"

controlplane-down: $(STAMP) ## Stop every process of the local control plane
	@$(BIN)/python -m craft_operator.devtools.controlplane down --state "$(CONTROLPLANE_STATE)"

# The unit and integration tiers run on TEST_WORKERS processes (pytest-xdist; one per core,
# at most 4): each of their tests starts what it needs on free ports. The cluster and
# resilience tiers run after, in one process: each drives servers whose timing parallel
# workers would disturb. TEST_WORKERS=0 runs everything in one process.
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); if [ $$n -lt 2 ]; then echo 0; elif [ $$n -gt 4 ]; then echo 4; else echo $$n; fi)

# PYTEST_ARGS goes to both runs; one that selects nothing in a run (exit 5) is no failure,
# but selecting nothing in both is (exit 5): a typo in -k must not pass for a green run.
test: $(STAMP) ## Run every tier: unit, integration, cluster, resilience at CI size (e2e skips without Docker)
	@first=0; set -x; \
	$(BIN)/pytest tests/unit tests/integration -n $(TEST_WORKERS) $(PYTEST_ARGS) || first=$$?; \
	{ set +x; } 2>/dev/null; [ $$first -eq 0 ] || [ $$first -eq 5 ] || exit $$first; \
	second=0; set -x; \
	$(BIN)/pytest tests --ignore=tests/unit --ignore=tests/integration $(PYTEST_ARGS) || second=$$?; \
	{ set +x; } 2>/dev/null; [ $$second -eq 0 ] || [ $$second -eq 5 ] || exit $$second; \
	if [ $$first -eq 5 ] && [ $$second -eq 5 ]; then \
		echo "make test: PYTEST_ARGS selected no test in either run" >&2; exit 5; \
	fi

test-unit: $(STAMP) ## Run only the unit tests
	$(BIN)/pytest tests/unit -n $(TEST_WORKERS) $(PYTEST_ARGS)

test-integration: $(STAMP) ## Run only the integration tests (kopf against the KMock emulator)
	$(BIN)/pytest tests/integration -n $(TEST_WORKERS) $(PYTEST_ARGS)

test-cluster: $(STAMP) ## Run only the cluster tier (the operator on the local control plane)
	$(BIN)/pytest tests/cluster $(PYTEST_ARGS)

lint: $(STAMP) ## ruff (lint and format check) and mypy
	$(BIN)/ruff check operator tests bench examples
	$(BIN)/ruff format --check operator tests bench examples
	$(BIN)/mypy

format: $(STAMP) ## Apply ruff's fixes and formatting
	$(BIN)/ruff check --fix operator tests bench examples
	$(BIN)/ruff format operator tests bench examples

crd: $(STAMP) ## Regenerate crds/ from the pydantic models
	$(BIN)/craft-operator crd > crds/craftsandboxes.craft.onyx.app.yaml
	$(BIN)/craft-operator crd --policy > crds/craftsandboxpolicies.craft.onyx.app.yaml
	$(BIN)/craft-operator crd --pool > crds/craftsandboxpools.craft.onyx.app.yaml

resilience: $(STAMP) ## The resilience suite at full size (200 sandboxes, 20 kills, 30 s outages)
	RESILIENCE_SCALE=full $(BIN)/pytest tests/resilience -m resilience -s --timeout 1200 $(PYTEST_ARGS)

e2e: $(STAMP) ## End-to-end tests on kind (needs Docker)
	$(BIN)/pytest tests/e2e -m e2e $(PYTEST_ARGS)

dev: ## kind cluster with the dev overlay and a sample sandbox (needs Docker, kind, kubectl)
	hack/dev-up.sh

dev-down: ## Delete the kind development cluster
	hack/dev-up.sh down

clean: ## Remove the virtualenv and caches
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
