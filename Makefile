# hyperpod-kit: every target installs what it needs first, so `make synth` and `make test` work on a
# fresh machine. Python packages go into .venv (pinned), the CDK CLI into node_modules (npm ci).
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMPS := .make
ENV ?= environments/default.yaml
PYTEST_ARGS ?=

# jsii prints a Node end-of-life banner on Node 20; it is noise, not an error.
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
export JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION := 1
export CDK_DISABLE_CLI_TELEMETRY := true
export PIP_DISABLE_PIP_VERSION_CHECK := 1
# One ruff cache at the root: a nested pyproject.toml (assets/trainer) would otherwise get its own
# .ruff_cache inside the asset folder (the asset hash ignores caches anyway: ASSET_EXCLUDES).
export RUFF_CACHE_DIR := $(CURDIR)/.ruff_cache

.PHONY: help setup setup-dev synth validate test lint typecheck format plan diff deploy destroy bench demo \
	verify-demo \
	checkov checkov-golden dist clean api-snapshot reference

help:
	@echo "make synth [ENV=file]   validate and synthesize offline, with cdk-nag and cfn-lint gates"
	@echo "make test               lint, type-check and run the tests"
	@echo "make plan [ENV=file] [BASELINE=dir]   offline: replacements and removals against a baseline"
	@echo "make diff|deploy|destroy [ENV=file] [CDK_ARGS='--profile x ...']   validate, gate, then"
	@echo "                        the CDK CLI on that very assembly (needs AWS credentials)"
	@echo "make dist               the sdist and the wheel built from it, into dist/ (what pip and"
	@echo "                        pipx install: docs/install.md)"
	@echo "make bench              run the benchmarks under benchmarks/"
	@echo "make api-snapshot       write docs/api-snapshot.json, the public API of hyperpod_kit.cdk"
	@echo "make reference          the reference of hyperpod_kit.cdk from its docstrings (pdoc), into"
	@echo "                        build/reference; a warning fails it"
	@echo "make checkov            synthesize every example, scan the templates with checkov (its own"
	@echo "                        pinned venv, offline); fails above CHECKOV_MAX_PERCENT failed checks"
	@echo "make checkov-golden     the same scan over the reviewed templates in tests/golden (seconds)"
	@echo "make demo [DEMO_OUT=dir] [DEMO_STEPS=n]   offline, local Slurm (as root): a node fault, the"
	@echo "                        health runner's Action:Replace, requeue, exact resume (docs/demo.md)"
	@echo "make verify-demo [VERIFY_OUT=dir]   offline, local Slurm with two nodes (as root): the"
	@echo "                        verify suite, its report and pictures (docs/verify.md)"

# The editable install brings hyperpod_trainer too (the root's link to the trainer's package, in
# the wheel beside hyperpod_kit): the shared input/output layer and the presets, without torch.
$(STAMPS)/venv: requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r requirements.txt
	$(BIN)/pip install --quiet --no-deps -e .
	@mkdir -p $(STAMPS) && touch $@

$(STAMPS)/venv-dev: $(STAMPS)/venv requirements-dev.txt
	$(BIN)/pip install --quiet -r requirements-dev.txt
	@mkdir -p $(STAMPS) && touch $@

$(STAMPS)/npm: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	@mkdir -p $(STAMPS) && touch $@

setup: $(STAMPS)/venv $(STAMPS)/npm
setup-dev: setup $(STAMPS)/venv-dev

validate: setup
	$(BIN)/hyperpod-kit validate $(ENV)

synth: setup
	$(BIN)/hyperpod-kit synth $(ENV)

lint: setup-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: setup-dev
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

typecheck: setup-dev
	$(BIN)/mypy
	# A second run: mypy names both extensionless node commands "__main__" in one run.
	$(BIN)/mypy lifecycle/bin/hyperpod-kit-verify

api-snapshot: setup
	$(BIN)/python -m hyperpod_kit.api_snapshot

# pdoc imports the module (jsii runs code at import: PDOC_ALLOW_EXEC); -W error: a warning fails.
reference: setup-dev
	PDOC_ALLOW_EXEC=1 $(BIN)/python -W error -m pdoc hyperpod_kit.cdk -o build/reference

dist: setup-dev
	rm -rf dist
	$(BIN)/python -m build --no-isolation --outdir dist .

# The suite runs on every core (pytest-xdist; a test module stays on one worker, so its expensive
# fixtures, a synthesized app or the wheel's venv, are built once); the tests that assert a
# wall-clock bound (`timed`) run afterwards on their own, so no neighbour skews their timing.
TEST_WORKERS ?= auto
test: lint typecheck
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadscope -m "not timed" --durations=30 $(PYTEST_ARGS)
	$(BIN)/pytest -p no:xdist -m timed $(PYTEST_ARGS) || [ $$? -eq 5 ]  # 5: PYTEST_ARGS chose none

BASELINE ?= cdk.out
plan: setup
	$(BIN)/hyperpod-kit plan $(ENV) --baseline $(BASELINE)

CDK_ARGS ?=
diff deploy destroy: setup
	$(BIN)/hyperpod-kit $@ $(ENV) $(CDK_ARGS)

bench: setup-dev
	$(BIN)/python benchmarks/synth.py
	$(BIN)/python benchmarks/studio_synth.py
	$(BIN)/python benchmarks/trainer.py

# docs/demo.md: a local Slurm (as root), the bundled trainer on CPU, a fault the health runner acts
# on, HyperPod's part played by the demo; writes the timeline and demo-loss.png to DEMO_OUT.
DEMO_OUT ?= demo-out
DEMO_STEPS ?= 40
demo: setup-dev
	$(BIN)/python -m hyperpod_kit.local.demo --out $(DEMO_OUT) --steps $(DEMO_STEPS)

# docs/verify.md, "Locally": hyperpod-kit-verify on a local Slurm of two nodes (as root), the
# all-reduce over gloo between them, the FSx test on a local folder; the report and its pictures.
VERIFY_OUT ?= verify-out
verify-demo: setup-dev
	$(BIN)/python -m hyperpod_kit.local.verify --out $(VERIFY_OUT)

# checkov (docs/security.md) pins its own boto3, so it cannot join .venv: it gets a venv of its own,
# pinned. Offline: no download from Prisma Cloud, no mapping, no update check. The share printed is
# failed / (passed + failed): a suppression (a skip in the resource's metadata, each listed in
# docs/security.md) is in neither.
CHECKOV_VERSION := 3.3.30
CHECKOV_VENV := .venv-checkov
CHECKOV_OUT ?= build/checkov
CHECKOV_MAX_PERCENT ?= 5
EXAMPLES := $(wildcard environments/*.yaml)

# The stamp lives in the venv: removing the venv, or a new version, installs again.
CHECKOV_STAMP := $(CHECKOV_VENV)/.checkov-$(CHECKOV_VERSION)

$(CHECKOV_STAMP):
	$(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/pip install --quiet --upgrade pip
	$(CHECKOV_VENV)/bin/pip install --quiet checkov==$(CHECKOV_VERSION)
	touch $@

define checkov_scan
	BC_SKIP_MAPPING=TRUE CKV_SKIP_PACKAGE_UPDATE_CHECK=TRUE $(CHECKOV_VENV)/bin/checkov \
		$(foreach d,$(1),-d $(d)) --framework cloudformation --skip-download --quiet --compact \
		--soft-fail | tee $(CHECKOV_OUT)/checkov.txt
	@awk -v max=$(CHECKOV_MAX_PERCENT) '/^Passed checks: / { \
		gsub(/,/, ""); p = $$3; f = $$6; s = $$9; \
		printf "checkov $(CHECKOV_VERSION): %d failed, %d passed, %d skipped (suppressed): %.1f%% failed\n", \
			f, p, s, 100 * f / (p + f); found = 1; exit (100 * f > max * (p + f)) } \
		END { if (!found) { print "checkov: no summary line"; exit 1 } }' $(CHECKOV_OUT)/checkov.txt
endef

checkov: setup $(CHECKOV_STAMP)
	@mkdir -p $(CHECKOV_OUT)
	for env in $(EXAMPLES); do \
		$(BIN)/hyperpod-kit synth -q "$$env" -o $(CHECKOV_OUT)/$$(basename "$$env" .yaml); \
	done
	$(call checkov_scan,$(foreach e,$(EXAMPLES),$(CHECKOV_OUT)/$(basename $(notdir $(e)))))

checkov-golden: $(CHECKOV_STAMP)
	@mkdir -p $(CHECKOV_OUT)
	$(call checkov_scan,tests/golden)

clean:
	rm -rf cdk.out cdk.out.rejected .cdk.out.new.* .cdk.out.old.* $(STAMPS) .pytest_cache \
		.mypy_cache .ruff_cache dist build
