# servelab — `make lab` runs the lab, `make test` runs the tests. Both set up everything on a fresh machine.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.servelab-installed
TEST_STAMP := $(VENV)/.servelab-test-installed
PYTEST_ARGS ?=
# Byte-code caches stay on for everything make starts: an environment that sets PYTHONDONTWRITEBYTECODE (many
# container images and sandboxes do) makes every kernel, server, Triton python-backend stub and test process compile
# what it imports from source again, several CPU-seconds each on 2 cores (torch, pandas, onnxruntime); with caches,
# each module is compiled once, on first use, into the checkout's and .venv's __pycache__ (ignored by git and Docker).
unexport PYTHONDONTWRITEBYTECODE

.PHONY: help setup lock lint export stage lab test test-fast serve triton-up triton-down browser prometheus perf-analyzer wrk clean rehearse-node

help:
	@echo "make lab    run the lab: notebooks -> results/<run-id>/ (CPU, no Docker)"
	@echo "make test   run every test (unit, integration on loopback, notebooks, browser)"
	@echo "make setup  create $(VENV) and install the pinned CPU lab set"
	@echo "make lock   re-resolve requirements.lock and regenerate requirements*.txt from pyproject.toml"
	@echo "make rehearse-node  the GPU node's bootstrap, stacks and lab, rehearsed on this CPU machine (Docker)"

# requirements*.txt are generated from requirements.lock (`make lock` after changing pyproject's dependencies).
# --no-compile: pip would byte-compile every installed module (a minute of a fresh 2-core set-up, most of it
# torch files no lab imports); Python compiles the ones that are imported, once, on first use.
# --no-deps: each file is already the whole closure of its packages in the lock, so pip's resolver has nothing to
# add (it took ten seconds of a fresh set-up to find that out); `pip check` then confirms that nothing is missing.
# --require-hashes: every line carries the sha256 of the wheels it may be (pip would check them anyway; this says so).
# PyTorch's CPU index, where it answers: requirements.txt lists only the CPU build of torch (hash), which it serves;
# elsewhere pip's own find-links folder must hold that wheel. Probed, because an unreachable index costs pip's
# retries for every package.
TORCH_CPU_INDEX = $(shell $(PYTHON) -c "import urllib.request as u; u.urlopen('https://download.pytorch.org/whl/cpu/torch/', timeout=10); print('https://download.pytorch.org/whl/cpu')" 2>/dev/null)
$(STAMP): requirements.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m servelab.setup_guard requirements.txt
	$(PIP) install --disable-pip-version-check -q --no-compile --no-deps --require-hashes \
	  $(if $(TORCH_CPU_INDEX),--extra-index-url $(TORCH_CPU_INDEX)) -r requirements.txt
	$(PIP) install --disable-pip-version-check -q --no-deps --no-build-isolation -e .
	$(PIP) check --disable-pip-version-check -q
	$(PY) -m ipykernel install --sys-prefix --name servelab --display-name "servelab (.venv)" >/dev/null
	touch $@

setup: $(STAMP)

$(TEST_STAMP): $(STAMP) requirements-test.txt
	$(PIP) install --disable-pip-version-check -q --no-compile --no-deps --require-hashes -r requirements-test.txt
	$(PIP) check --disable-pip-version-check -q
	touch $@

lock:
	$(PY) scripts/lock.py

# Headless Chromium for the review-UI tests (Debian packages; Playwright's own browser download fails offline).
browser:
	@command -v chromium >/dev/null || { \
	  echo "installing Debian chromium for the browser tests"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium >/dev/null; }

# wrk, the C load generator of `servelab bench frontend` and its test (Debian package; best effort: the test skips).
wrk:
	@command -v wrk >/dev/null || { \
	  echo "installing Debian wrk for the frontend benchmark"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  { $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq wrk >/dev/null; } || \
	  echo "wrk could not be installed: the frontend benchmark's test is skipped"; }

# Prometheus + promtool for 06c's monitoring view and its tests (Debian package; best effort, skipped where present).
prometheus:
	@bash scripts/prometheus.sh

# NVIDIA's perf_analyzer for notebook 04 and its test (from the tritonclient wheel; best effort: 04 shows the command
# instead where it cannot be fetched)
perf-analyzer: setup
	@$(VENV)/bin/servelab triton get-perf-analyzer >/dev/null 2>&1 || \
	  echo "perf_analyzer could not be fetched (servelab triton get-perf-analyzer): notebook 04 shows its command instead"

export: setup
	$(VENV)/bin/servelab export

stage: export
	$(VENV)/bin/servelab triton stage

serve: export
	$(VENV)/bin/servelab serve

triton-up: stage
	$(VENV)/bin/servelab triton up

triton-down:
	$(VENV)/bin/servelab triton down

# The lab also installs the test tools: notebooks 02 and 08 run the repository's offline deploy checks with pytest.
lab: export $(TEST_STAMP) prometheus perf-analyzer
	$(VENV)/bin/servelab lab run $(LAB_ARGS)

# JupyterLab on the notebooks, with the `servelab` kernel (start the servers first: `make serve`, `make triton-up`)
.PHONY: jupyter
jupyter: export
	$(VENV)/bin/jupyter lab --notebook-dir=notebooks $(JUPYTER_ARGS)

lint: $(TEST_STAMP)
	$(VENV)/bin/ruff check .

# A Docker engine for the container tests: one that answers is used as it is; as root with none (CI), one is
# installed and started, and stopped again after the tests (scripts/docker_engine.sh).
# Where an engine answers, its base images (the real ones, or labelled stand-ins where no registry answers) are made
# before the tests start: the smoke lab's notebook 02 builds an image too, on the other worker, and on a machine that
# has none yet it would otherwise race the container tests that make them (Docker Hub unreachable: its build failed).
test: export browser prometheus perf-analyzer wrk lint
	@bash scripts/docker_engine.sh start
	@if timeout 10 docker info >/dev/null 2>&1; then bash scripts/standin_images.sh || \
	  echo "[standin] base images not made: the container tests will say why"; fi
	@PY=$(PY) bash scripts/run_tests.sh $(PYTEST_ARGS); rc=$$?; bash scripts/docker_engine.sh stop; exit $$rc

test-fast: export lint
	$(PY) -m pytest -m "not notebooks and not browser and not docker" $(PYTEST_ARGS)

# The GPU node rehearsed on this CPU machine: bootstrap, stacks and the smoke lab at place=node (needs Docker).
rehearse-node: setup
	bash scripts/rehearse_node.sh

clean:
	rm -rf results models artifacts .pytest_cache
