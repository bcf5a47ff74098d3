# guided: two commands set everything up on a fresh machine.
#   make demo   build the extension and run the demo on an embedded default
#   make test   build and run every test (Rust and Python)
# The virtual environment lives in .venv (override with VENV=...); it is created and filled from
# requirements/*.txt on first use and refreshed whenever those files change.

SHELL        := /bin/bash
VENV         ?= .venv
PY           := $(VENV)/bin/python
STAMP        := $(VENV)/.guided-requirements
REQS         := requirements/test.txt requirements/lint.txt requirements/bench.txt
EXT_SOURCES  := $(shell find rust -name '*.rs' -o -name Cargo.toml) Cargo.toml Cargo.lock pyproject.toml
EXT_STAMP    := $(VENV)/.guided-ext-$(subst /,_,$(CURDIR))
export PYTHONPATH := $(CURDIR)/python$(if $(PYTHONPATH),:$(PYTHONPATH))

.PHONY: help demo test test-rust test-python lint fmt bench build venv clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t14

$(STAMP): $(REQS)
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet $(addprefix -r ,$(REQS))
	@touch $@

venv: $(STAMP)  ## create .venv and install the test, lint and benchmark dependencies

$(EXT_STAMP): $(STAMP) $(EXT_SOURCES)
	VIRTUAL_ENV=$(abspath $(VENV)) $(VENV)/bin/maturin develop --release --skip-install --quiet
	@touch $@

build: $(EXT_STAMP)  ## build guided._lib in place (python/guided)

demo: build  ## compile the demo constraint and print its figures
	$(PY) -m guided demo

test: test-rust test-python  ## build and run every test

test-rust:  ## Rust unit and property tests
	cargo test --workspace --exclude guided-py --release

test-python: build  ## pytest + hypothesis (CI=true selects the CI profile)
	$(PY) -m pytest

lint: $(STAMP)  ## rustfmt, clippy -D warnings, ruff, mypy --strict
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings
	$(VENV)/bin/ruff check python tests bench
	$(VENV)/bin/ruff format --check python tests bench
	$(VENV)/bin/mypy

fmt:  ## format Rust and Python sources
	cargo fmt --all
	$(VENV)/bin/ruff format python tests bench
	$(VENV)/bin/ruff check --fix python tests bench

bench: build  ## run the side-by-side benchmarks, write bench/results/*.json, render them into README.md
	$(PY) bench/run.py
	$(PY) bench/readme.py

clean:  ## remove build outputs (keeps .venv)
	cargo clean
	rm -f python/guided/_lib*.so $(EXT_STAMP)
