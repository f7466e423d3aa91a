# Every target sets up what it needs on first use: the virtualenv and its packages.
SHELL := /bin/bash
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
ARGS ?=

.PHONY: run test plan lint bench clean

$(STAMP): pyproject.toml
	python3 -m venv $(VENV) || { apt-get update -qq && apt-get install -y -qq python3-venv && python3 -m venv $(VENV); }
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev,train]'
	touch $@

run: $(STAMP)  ## the main job on the default experiment
	$(BIN)/dockyard plan experiment=smoke

test: $(STAMP)
	$(BIN)/pytest -q

plan: $(STAMP)  ## make plan ARGS="experiment=llama3-8b-p5x4 parallelism.tp=2"
	$(BIN)/dockyard plan $(ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

bench: $(STAMP)
	$(BIN)/python bench/compile.py

clean:
	rm -rf $(VENV) outputs multirun .pytest_cache .hypothesis
