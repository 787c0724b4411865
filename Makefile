# The two commands of the README, and what they need. Every target installs its own needs,
# so a fresh clone on a machine with python3 (3.11+), node/npm and (or root for) apt-get works.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# Re-install only when the project's metadata changes: repeated `make dev` starts at once.
PY_STAMP := $(VENV)/.payloadstore-installed
NODE_STAMP := node_modules/.payloadstore-installed

ENDPOINT ?=
TOKEN ?=
DAEMON_TOKEN ?=
NAMESPACE ?= dev
PYTEST_ARGS ?=

.PHONY: help dev demo smoke test reliability synth venv node redis clean-devstack

help:
	@echo "make dev     run the control plane locally (redis-server, S3 emulator, gateway on :8080)"
	@echo "make demo    push a small (inline) and an 8 MiB (S3) job through a daemon; print the figures"
	@echo "make test    the whole suite (unit, integration, end-to-end over HTTP, infrastructure)"
	@echo "make reliability  2,000 jobs through a stack of its own under faults; a ledger checks each"
	@echo "make smoke ENDPOINT=https://... TOKEN=<client token> DAEMON_TOKEN=<daemon token> [NAMESPACE=dev]"
	@echo "make synth   npx cdk synth"

$(PY_STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || { \
	  echo "error: payloadstore needs python3 3.11 or newer (found: $$($(PYTHON) --version 2>&1)); set PYTHON=/path/to/python3.11" >&2; exit 1; }
	@test -x $(PY) && $(PY) -c 'import sys' 2>/dev/null || $(PYTHON) -m venv $(VENV)
	@echo "installing payloadstore[dev] into $(VENV) (log: $(VENV)/pip-install.log)"
	@$(PY) -m pip install --disable-pip-version-check -e '.[dev]' > $(VENV)/pip-install.log 2>&1 || { \
	  tail -n 40 $(VENV)/pip-install.log >&2; echo "error: pip install failed; full log in $(VENV)/pip-install.log" >&2; exit 1; }
	@touch $@

venv: $(PY_STAMP)

$(NODE_STAMP): package.json package-lock.json
	@command -v npm >/dev/null || { echo "error: npm not found: install Node.js 20+ (Debian: apt-get install nodejs npm)" >&2; exit 1; }
	npm ci --no-audit --no-fund --loglevel=error
	@touch $@

node: $(NODE_STAMP)

redis: venv
	@$(PY) -m payloadstore.devstack.services find-redis

dev: venv redis
	$(PY) -m payloadstore.devstack

demo: venv redis
	$(PY) -m payloadstore.devstack.demo

smoke: venv
	@test -n "$(ENDPOINT)" -a -n "$(TOKEN)" -a -n "$(DAEMON_TOKEN)" || { \
	  echo "usage: make smoke ENDPOINT=https://<api>/<stage> TOKEN=<client token> DAEMON_TOKEN=<daemon token> [NAMESPACE=dev]" >&2; exit 2; }
	@echo "smoke test of $(ENDPOINT) (namespace $(NAMESPACE))"
	@# Tokens go through the environment: not echoed by make, not visible in `ps`.
	@PAYLOADSTORE_SMOKE_TOKEN="$(TOKEN)" PAYLOADSTORE_SMOKE_DAEMON_TOKEN="$(DAEMON_TOKEN)" \
	  $(PY) -m payloadstore.devstack.demo --endpoint "$(ENDPOINT)" --namespace "$(NAMESPACE)"

test: venv node redis
	$(PY) -m pytest $(PYTEST_ARGS)

# Bounded (<= 10 min): its own redis-server, S3 emulator, gateway and daemon processes on free
# ports; the last line is `reliability: N jobs, N ok, 0 lost, 0 wrong, 0 phantom`.
RELIABILITY_ARGS ?=
reliability: venv redis
	$(PY) -m tests.reliability.run $(RELIABILITY_ARGS)

synth: venv node
	npx cdk synth --no-notices

clean-devstack:
	rm -rf .devstack .devstack.json
