# Two entry points for people and CI: `make demo` and `make test` (see README).
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEBIAN_PACKAGES := $(shell grep -v '^\#' .ci/debian-packages.txt 2>/dev/null)

.PHONY: demo test check lint typecheck pytest bench lock debian clean

$(STAMP): pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r requirements.lock
	$(BIN)/pip install --quiet --no-deps -e .
	touch $(STAMP)

## demo: create the environment and run the simulated GPU cluster (Ctrl-C to stop)
demo: $(STAMP)
	$(BIN)/sits-observe demo $(DEMO_ARGS)

## test: environment + Debian packages + ruff + mypy + import contracts + pytest
test: $(STAMP) debian check

check: lint typecheck pytest

lint: $(STAMP)
	$(BIN)/ruff format --check sits_observe tests bench dashboards
	$(BIN)/ruff check sits_observe tests bench dashboards

typecheck: $(STAMP)
	$(BIN)/mypy
	$(BIN)/lint-imports

pytest: $(STAMP)
	$(BIN)/pytest $(PYTEST_ARGS)

## debian: install the Debian packages the tests and benchmarks talk to
debian:
	@missing=""; for p in $(DEBIAN_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi

## bench: run every benchmark in bench/ and print figures
bench: $(STAMP) debian
	for b in bench/bench_*.py; do $(BIN)/python $$b || exit 1; done

## lock: re-resolve requirements.lock from pyproject.toml
lock:
	rm -rf /tmp/sits-lock && $(PYTHON) -m venv /tmp/sits-lock
	/tmp/sits-lock/bin/pip install --quiet '.[dev]'
	/tmp/sits-lock/bin/pip freeze --exclude sits-observe > requirements.lock

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
