# Two commands: `make serve` and `make test`. Both create .venv from the pinned requirements first.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# torch guesses /usr/local from the nvcc shim on PATH; linking then fails. Point it at the real toolkit.
export CUDA_HOME ?= /usr/local/cuda
export PYTHONUNBUFFERED := 1
export NO_MKDOCS_2_WARNING := 1
# phase 1 of make test: one worker per core (two on the machines this project is tested on)
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); [ $$n -gt 4 ] && n=4; echo $$n)

.PHONY: serve test test-core test-site build clean setup allocators
ALLOC_LIBS := /usr/lib/x86_64-linux-gnu/libjemalloc.so.2 /usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4

setup: $(STAMP)

$(STAMP): requirements.txt pyproject.toml site_hooks/node/package-lock.json
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip==26.3
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	# formulas are drawn at build time by MathJax in Node.js (site_hooks/mathsvg.py): pinned in package-lock.json
	npm ci --silent --no-audit --no-fund --prefix site_hooks/node
	touch $(STAMP)

serve: $(STAMP)
	$(VENV)/bin/mkdocs serve --dev-addr 127.0.0.1:8000

build: $(STAMP)
	$(VENV)/bin/mkdocs build --strict

# Phase 1 runs every test that does not touch the site and records the outcomes in build/test-results.json,
# in TEST_WORKERS pytest-xdist processes (a test file's tests stay together, in order, in one of them).
# Phase 2 builds the site strictly (the pages show phase 1's outcomes) and browses it in Chromium.
# The target fails when either phase fails or collects no test.
test: $(STAMP) allocators
	@mkdir -p build
	$(PY) -m pytest -m "not site" -n $(TEST_WORKERS) --dist loadfile ; core=$$? ; \
	$(PY) -m pytest -m site ; site=$$? ; \
	echo "make test: core tests exit $$core, site tests exit $$site" ; \
	test $$core -eq 0 -a $$site -eq 0

test-core: $(STAMP)
	$(PY) -m pytest -m "not site" -n $(TEST_WORKERS) --dist loadfile

test-site: $(STAMP)
	$(PY) -m pytest -m site

# jemalloc and tcmalloc (Debian packages) for the CPU benchmark's allocator comparison: installed when
# missing and apt-get can run (as root); otherwise a note, and the benchmark records and skips them.
allocators:
	@for f in $(ALLOC_LIBS); do test -e $$f || missing=1; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "make: installing Debian's libjemalloc2 and libtcmalloc-minimal4"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libjemalloc2 libtcmalloc-minimal4 >/dev/null; \
	  else echo "make: libjemalloc2 / libtcmalloc-minimal4 missing (apt-get install them as root); the benchmark skips them"; fi; \
	fi

clean:
	rm -rf build site
