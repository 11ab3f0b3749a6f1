# gpufleet.serving -- the two commands a newcomer needs are `make demo` and `make test`.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

VENV := .venv
# The venv's interpreter: Debian's python3 where there is one (built with PGO and LTO; the CI
# installs its python3-venv). A python3 built without them, such as pyenv's default build, costs
# Ansible, pytest and ansible-test about 1.2-1.9x the CPU (docs/development.md).
VENV_PYTHON ?= $(firstword $(wildcard /usr/bin/python3.11) python3)
PY := $(CURDIR)/$(VENV)/bin/python
SANDBOX := $(PY) tools/sandbox/sandbox.py
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
# Ansible and Molecule state (temp files, Molecule ephemeral dirs) stay in the checkout, not in ~.
export ANSIBLE_HOME := $(CURDIR)/.tmp/ansible
# Conditionals must be real booleans (ansible-core 2.19 data tagging); fail on embedded templates.
export ANSIBLE_ALLOW_EMBEDDED_TEMPLATES := false
export PYTHONDONTWRITEBYTECODE := 1

.PHONY: help setup demo test check lint sanity unit molecule molecule-beside wheelhouse engine-images sandbox-up sandbox-down bench build clean

help:
	@echo "make demo   - boot the sandbox fleet, run playbooks/deploy_b300.yml against inventories/sandbox, print the endpoints"
	@echo "make test   - yamllint, ansible-lint, ruff, ansible-test sanity, unit tests, Molecule scenarios"
	@echo "other targets: check setup lint sanity unit molecule engine-images sandbox-up sandbox-down bench build clean"

setup: $(VENV)/.installed .collections/ansible_collections/gpufleet/serving

$(VENV)/.installed: requirements.txt
	$(VENV_PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r requirements.txt
	touch $@

# The checkout resolves as gpufleet.serving through this link (ansible.cfg: collections_path).
.collections/ansible_collections/gpufleet/serving:
	mkdir -p $(@D)
	ln -sfn ../../.. $@

# The main job on the sandbox's two b300 hosts: site preparation (wheelhouses on the bridge),
# playbooks/deploy_b300.yml, then where each verified endpoint is and how to call it.
demo: setup sandbox-up wheelhouse
	ansible-playbook -i inventories/sandbox tools/sandbox/demo.yml

# Runs every stage even when one fails, then fails if any failed. The Molecule scenarios take most
# of the time and much of it waiting on the hosts (engine loads, downloads, restarts), so lint,
# sanity and the unit tests run beside them, each into .tmp/test-logs/<stage>.log, shown after
# Molecule's output; the unit tests last, so that pytest's summary line closes the output. The
# sandbox's engine images (a few minutes of CPU, once per machine) are built there too, while the
# first scenarios mostly wait, instead of in the first scenario that pulls them.
# Scenarios that load no engine (tiny files, mostly waiting on throttled links) run in that lane too,
# once the lane's CPU-heavy stages are done; `make molecule` alone runs every scenario.
BESIDE_SCENARIOS := staging
BESIDE_MOLECULE := lint sanity engine-images molecule-beside unit
test: setup
	@logs=.tmp/test-logs; rm -rf $$logs; mkdir -p $$logs; failed=(); \
	( for stage in $(BESIDE_MOLECULE); do \
	    started=$$(date +%s); rc=0; $(MAKE) --no-print-directory $$stage > $$logs/$$stage.log 2>&1 || rc=$$?; \
	    echo "$$rc $$(( $$(date +%s) - started ))" > $$logs/$$stage.rc; \
	  done ) & beside=$$!; \
	echo "==> make molecule ($(BESIDE_MOLECULE) run beside it into $$logs/)"; \
	$(MAKE) --no-print-directory molecule MOLECULE_SKIP="$(BESIDE_SCENARIOS)" || failed+=(molecule); \
	wait $$beside || true; \
	for stage in $(BESIDE_MOLECULE); do \
	  read -r rc seconds < $$logs/$$stage.rc; \
	  echo "==> make $$stage (beside Molecule, $$seconds s, rc $$rc)"; cat $$logs/$$stage.log; \
	  [ "$$rc" = 0 ] || failed+=("$$stage"); \
	done; \
	if [ $${#failed[@]} -eq 0 ]; then echo "==> make test: every stage passed (molecule $(BESIDE_MOLECULE))"; \
	else echo "==> make test: FAILED stages: $${failed[*]}"; exit 1; fi

# The inner loop (docs/development.md): lint, the unit tests and one fast scenario, in that order,
# stopping at the first failure; make test runs everything.
CHECK_SCENARIO := space_gate
check: setup
	@started=$$(date +%s); \
	$(MAKE) --no-print-directory lint; \
	$(MAKE) --no-print-directory unit; \
	molecule test -s $(CHECK_SCENARIO); \
	echo "==> make check: lint, unit, molecule $(CHECK_SCENARIO) passed in $$(( $$(date +%s) - started )) s"

lint: setup
	yamllint --strict .
	ansible-lint --profile production --offline
	ruff check .
	$(PY) tools/profiles_sync.py --check
	$(PY) tools/ci/check_artifact.py

sanity: setup
	tools/ci/sanity.sh

# One worker per core; each test keeps its own temp dirs, ports and Ansible home.
unit: setup
	pytest --numprocesses=auto tests/unit

# Every scenario in turn, each timed (the per-scenario budget in docs/development.md comes from
# these lines, and tools/ci/callbacks/task_timer.py traces each to its plays and slowest tasks);
# all of them run even when one fails.
MOLECULE_SKIP :=
define run_scenarios
	@failed=(); \
	for scenario in $(1); do \
	  started=$$(date +%s); \
	  molecule test -s $$scenario || failed+=("$$scenario"); \
	  echo "==> molecule $$scenario: $$(( $$(date +%s) - started )) s"; \
	done; \
	if [ $${#failed[@]} -gt 0 ]; then echo "==> molecule: FAILED scenarios: $${failed[*]}"; exit 1; fi
endef
molecule molecule-beside check: export ANSIBLE_CALLBACK_PLUGINS := $(CURDIR)/tools/ci/callbacks
molecule molecule-beside check: export ANSIBLE_CALLBACKS_ENABLED := task_timer
molecule: setup wheelhouse
	$(call run_scenarios,$(filter-out $(MOLECULE_SKIP),$(notdir $(patsubst %/molecule.yml,%,$(wildcard molecule/*/molecule.yml)))))

# The beside lane's scenarios (make test); they need neither the vLLM wheelhouse nor the engine images.
molecule-beside: setup
	$(call run_scenarios,$(BESIDE_SCENARIOS))

# vLLM's CPU build and the OS packages it compiles with, for hosts without internet (the vllm
# role's air-gapped path). Cached under /var/cache/gpufleet-wheelhouse, keyed by the requirement
# set, so fresh clones on this machine reuse it.
wheelhouse: setup
	$(PY) tools/wheelhouse/build.py --hardware-profile cpu_sandbox --version 0.32.0

# The container runtimes' packages and the engine image layouts the scenarios push to their registries.
engine-images: setup wheelhouse
	$(PY) tools/sandbox/engine_images.py build

sandbox-up: setup
	$(SANDBOX) up --inventory inventories/sandbox

# The demo's fleet (inventories/sandbox) only: a Molecule run beside it keeps its own. Every fleet the
# sandbox made, Molecule's included: make sandbox-down SANDBOX_FLEETS=--all
SANDBOX_FLEETS := --inventory inventories/sandbox
sandbox-down: setup
	$(SANDBOX) down $(SANDBOX_FLEETS)

bench: setup
	$(PY) tools/sandbox/bench_boot.py

build: setup
	ansible-galaxy collection build --force --output-path .tmp/dist

clean: SANDBOX_FLEETS := --all
clean: sandbox-down
	rm -rf .tmp tests/output .pytest_cache .ruff_cache
	find . -name __pycache__ -not -path './$(VENV)/*' -prune -exec rm -rf {} +
