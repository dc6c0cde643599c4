# Two entry points for people and CI: `make demo` and `make test` (see README).
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEBIAN_PACKAGES := $(shell grep -v '^\#' .ci/debian-packages.txt 2>/dev/null)

# Interpreters the agent is smoke-tested on (the suite itself runs on $(PYTHON), 3.11): found
# under pyenv, else on PATH as pythonX.Y.
SMOKE_VERSIONS ?= 3.12 3.13
PYENV_ROOT ?= $(HOME)/.pyenv
smoke_python = $(firstword $(wildcard $(PYENV_ROOT)/versions/$(1).*/bin/python$(1)) $(shell command -v python$(1)))
# One cached venv per version, inside .venv/ (ignored, removed by `make clean`).
SMOKE_STAMPS := $(foreach v,$(SMOKE_VERSIONS),$(VENV)/smoke-$(v)/.installed)

.PHONY: demo test check lint typecheck pytest smoke bench lock debian clean

$(STAMP): pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r requirements.lock
	$(BIN)/pip install --quiet --no-deps -e .
	touch $(STAMP)

## demo: create the environment and run the simulated GPU cluster (Ctrl-C to stop)
demo: $(STAMP)
	$(BIN)/sits-observe demo $(DEMO_ARGS)

## test: environment + Debian packages + ruff + mypy + import contracts + pytest (3.11),
## then the agent's install and a real agent run on 3.12 and 3.13 (smoke)
test: $(STAMP) debian check smoke

check: lint typecheck pytest

lint: $(STAMP)
	$(BIN)/ruff format --check sits_observe tests bench dashboards
	$(BIN)/ruff check sits_observe tests bench dashboards

typecheck: $(STAMP)
	$(BIN)/mypy
	$(BIN)/lint-imports

# Test files spread over PYTEST_WORKERS processes (pytest-xdist, one file per worker at a time
# so module fixtures are built once); PYTEST_WORKERS=0 runs them in this process.
PYTEST_WORKERS ?= 2
pytest: $(STAMP)
	$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

# The agent extra alone, as a GPU node installs it: no test tools, no store, no service.
$(VENV)/smoke-%/.installed: pyproject.toml requirements-agent.lock
	@py="$(call smoke_python,$*)"; \
	if [ -z "$$py" ]; then echo "no Python $* (looked in $(PYENV_ROOT)/versions and PATH)"; exit 1; fi; \
	rm -rf $(VENV)/smoke-$*; "$$py" -m venv $(VENV)/smoke-$*
	$(VENV)/smoke-$*/bin/pip install --quiet -r requirements-agent.lock
	$(VENV)/smoke-$*/bin/pip install --quiet --no-deps -e .
	touch $@

## smoke: on each of SMOKE_VERSIONS, the agent's install is slim and a real agent ships a batch
smoke: $(SMOKE_STAMPS)
	for v in $(SMOKE_VERSIONS); do $(VENV)/smoke-$$v/bin/python tests/agent_smoke.py --slim || exit 1; done

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

## lock: re-resolve requirements.lock (everything, for .venv) from pyproject.toml, then the
## agent's and the service's locks (the images, the smoke venvs) within the same versions
lock:
	rm -rf /tmp/sits-lock /tmp/sits-lock-src && mkdir -p /tmp/sits-lock-src
	cp -r pyproject.toml README.md sits_observe /tmp/sits-lock-src/
	$(PYTHON) -m venv /tmp/sits-lock
	/tmp/sits-lock/bin/pip install --quiet '/tmp/sits-lock-src[dev]'
	/tmp/sits-lock/bin/pip freeze --exclude sits-observe > requirements.lock
	for role in agent service; do \
	  rm -rf /tmp/sits-lock && $(PYTHON) -m venv /tmp/sits-lock && \
	  /tmp/sits-lock/bin/pip install --quiet -c requirements.lock "/tmp/sits-lock-src[$$role]" && \
	  /tmp/sits-lock/bin/pip freeze --exclude sits-observe > requirements-$$role.lock || exit 1; \
	done

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
