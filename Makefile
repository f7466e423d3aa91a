# Every target sets up what it needs on first use: the virtualenv and its packages. The verbs need only the
# host's packages (`pip install dockyard`: torch and the trainer's stack are the image's); the tests, the
# linters and the benchmarks install the extras too (`.[dev,train,optuna]`).
SHELL := /bin/bash
VENV ?= .venv
BIN := $(VENV)/bin
HOST_STAMP := $(VENV)/.installed-host
STAMP := $(VENV)/.installed
ARGS ?=

.PHONY: run test test-quick test-services setup base torchrun-loop plan build docker slurm lint docs-check bench bench-build clean

define make-venv
	[ -x $(BIN)/python ] || python3 -m venv $(VENV) \
		|| { apt-get update -qq && apt-get install -y -qq python3-venv && python3 -m venv $(VENV); }
	$(BIN)/pip install -q --upgrade pip
endef

$(HOST_STAMP): pyproject.toml
	$(make-venv)
	$(BIN)/pip install -q -e .
	touch $@

$(STAMP): pyproject.toml
	$(make-venv)
	$(BIN)/pip install -q -e '.[dev,train,optuna]'
	touch $@ $(HOST_STAMP)

run: $(HOST_STAMP) docker  ## the main job: plan, image, and training on two local container nodes
	$(BIN)/dockyard launch experiment=smoke

# A Docker engine: docker.io is installed and dockerd started when missing (as root). Without one the
# image tests skip, except in CI (CI=true), where they fail.
docker:
	scripts/ensure-docker

# A two-node Slurm cluster on this host (n1, n2): Debian's slurm and munge installed and the daemons
# started when missing (as root). The Slurm tests share it; without it they skip, except in CI.
slurm:
	scripts/ensure-slurm

# What the tests run on: the Docker engine and the Slurm cluster (a failure to start either only fails in CI,
# where no test may skip for a missing piece).
test-services:
	@scripts/ensure-docker || [ "$${CI:-}" != true ]
	@scripts/ensure-slurm || [ "$${CI:-}" != true ]

# The tests' processes keep the bytecode they compile (__pycache__, ignored by git and by image contexts):
# where the environment says not to (PYTHONDONTWRITEBYTECODE, set on the machines this was measured on),
# every pytest worker, CLI call and torchrun rank compiled the project's modules again (a collection of the
# suite took 31-35 s without, 25 s with).
test test-quick torchrun-loop: export PYTHONDONTWRITEBYTECODE :=

# One lane on both cores (pytest-xdist) for all but the timed tests: those that start torchrun, containers or
# Slurm jobs first, the tests that share a resource or an expensive fixture in one xdist group each
# (tests/conftest.py says which), then the quick tests, which fill both workers to the end; last the tests
# that time what they measure, one at a time (collected only from the modules that mark one: a collection of
# the whole suite takes longer than some of them). Three workers were slower here (28 min 41 s against 26 min 27 s):
# the lane is CPU-bound.
test: $(STAMP) test-services
	@scripts/timed "main lane" $(BIN)/pytest -q -n 2 --dist loadgroup -m "not timed"
	@scripts/timed "timed lane" $(BIN)/pytest -q -m timed $$(grep -l "mark\.timed" tests/test_*.py)

# The quick lane: every test that starts no torchrun, no container, no Slurm job and no CPU-minutes of
# training work (marked in tests/conftest.py), so it needs neither the Docker engine nor the Slurm cluster.
test-quick: $(STAMP)
	$(BIN)/pytest -q -n 2 -m "not slow"

# The tests that start torchrun, N passes in a row (stops at the first failure): a teardown race or a
# timeout that fails one run in twenty shows here, not in CI. TESTS narrows it to the tests a change touches
# (make torchrun-loop N=5 TESTS="tests/test_local_target.py -k restart").
N ?= 20
TESTS ?=
torchrun-loop: $(STAMP) test-services
	PYTEST=$(BIN)/pytest scripts/torchrun-loop $(N) $(TESTS)

# Everything the tests run on, made before them so that its time is measured apart (.ci/run): the virtualenv,
# the Docker engine, the Slurm cluster and the local base image.
setup: $(STAMP) test-services base

base: docker  ## the local base image, made once (debootstrap) when the engine lacks it
	@docker image inspect dockyard/base:bookworm-py311 >/dev/null 2>&1 || bash compiler/images/make-base dockyard/base:bookworm-py311

plan: $(HOST_STAMP)  ## make plan ARGS="experiment=llama3-8b-p5x4 parallelism.tp=2"
	$(BIN)/dockyard plan $(ARGS)

build: $(HOST_STAMP) docker  ## make build ARGS="experiment=llama3-8b-p5x4"
	$(BIN)/dockyard build $(ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/mypy

docs-check: $(STAMP)  ## the README's paths, counts and shown commands against the code (part of `make test`)
	$(BIN)/pytest -q tests/test_readme.py

bench: $(STAMP)
	$(BIN)/python bench/compile.py

bench-build: $(STAMP) docker  ## cold, no-op and code-change image builds against a naive Dockerfile
	$(BIN)/python bench/build.py

clean:
	rm -rf $(VENV) outputs multirun .pytest_cache .hypothesis
