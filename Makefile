# gputopo — the two commands a newcomer needs are `make demo` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
PIP ?= $(PYTHON) -m pip
export PATH := $(HOME)/.local/bin:$(PATH)
STAMP := .make/installed

.PHONY: help install k8s kueue browser crds check-crds lint unit integration e2e-deps e2e test demo bench sandbox-up sandbox-down clean

help:
	@echo "make demo     set everything up and run the local sandbox demo"
	@echo "make test     lint, unit, integration and kind end-to-end tests (builds what they need first)"
	@echo "make e2e      the kind end-to-end tests alone"
	@echo "make bench    run the benchmarks in bench/ and write bench/reports/"

$(STAMP): pyproject.toml
	$(PIP) install --quiet --disable-pip-version-check -e '.[test,probe]'
	@mkdir -p .make && touch $(STAMP)

install: $(STAMP)

k8s:
	bash hack/build-k8s.sh

# Kueue's manager, CRDs and webhook configurations, for the sandbox tests beside Kueue (`sandbox up --kueue`).
kueue:
	bash hack/build-kueue.sh

# Debian's headless Chromium, for the live map's browser test (installed when missing; needs root).
browser:
	bash hack/chromium.sh

crds: $(STAMP)
	$(PYTHON) -m gputopo.api.crdgen --out crds
	bash hack/sync-chart-crds.sh

check-crds: $(STAMP)
	$(PYTHON) -m gputopo.api.crdgen --out crds --check

lint: $(STAMP)
	ruff check .
	ruff format --check .
	mypy
	lint-imports

unit: $(STAMP)
	$(PYTHON) -m pytest tests/unit -q

integration: $(STAMP) k8s kueue browser
	GPUTOPO_REQUIRE_KUEUE=1 GPUTOPO_REQUIRE_BROWSER=1 $(PYTHON) -m pytest tests/integration -q

# What the kind end-to-end tests need, built here without a registry: a running Docker engine (installed from
# Debian and started when missing; needs root), kind's node image with the cluster images, and gputopo's images.
e2e-deps: $(STAMP)
	bash hack/docker-engine.sh
	bash hack/build-kind-node.sh
	bash hack/build-images.sh e2e

e2e: e2e-deps
	GPUTOPO_REQUIRE_KIND=1 $(PYTHON) -m pytest tests/e2e/kind -q

# One pytest run for unit, integration and kind end-to-end tests, so its closing line counts everything.
test: $(STAMP) k8s kueue browser lint e2e-deps
	GPUTOPO_REQUIRE_KIND=1 GPUTOPO_REQUIRE_KUEUE=1 GPUTOPO_REQUIRE_BROWSER=1 $(PYTHON) -m pytest tests -q

demo: $(STAMP) k8s
	gputopo demo

bench: $(STAMP) k8s
	$(PYTHON) -m bench

sandbox-up: $(STAMP) k8s
	gputopo sandbox up

sandbox-down: $(STAMP)
	gputopo sandbox down

clean:
	rm -rf .make .pytest_cache .mypy_cache .ruff_cache
