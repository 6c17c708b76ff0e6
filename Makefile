# gputopo — the two commands a newcomer needs are `make demo` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
PIP ?= $(PYTHON) -m pip
export PATH := $(HOME)/.local/bin:$(PATH)
STAMP := .make/installed

.PHONY: help install k8s crds check-crds lint unit integration test demo bench sandbox-up sandbox-down clean

help:
	@echo "make demo     set everything up and run the local sandbox demo"
	@echo "make test     lint, unit and integration tests (builds what they need first)"
	@echo "make bench    run the benchmarks in bench/ and write bench/reports/"

$(STAMP): pyproject.toml
	$(PIP) install --quiet --disable-pip-version-check -e '.[test,probe]'
	@mkdir -p .make && touch $(STAMP)

install: $(STAMP)

k8s:
	bash hack/build-k8s.sh

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

integration: $(STAMP) k8s
	$(PYTHON) -m pytest tests/integration -q

# One pytest run for unit and integration tests, so its closing line counts everything.
test: $(STAMP) k8s lint
	$(PYTHON) -m pytest tests -q

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
