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
# The JSON-Schema-Test-Suite for drafts 4, 6, 7 and 2019-09 (../shared holds 2020-12 only), taken
# from the sdist of the pinned jsonschema release, which vendors the suite; the hash pins the bytes.
JSTS_SDIST   := jsonschema==4.26.0 --hash=sha256:0c26707e2efad8aa1bfc5b7ce170f3fccc2e4918ff85989ba9ffa9facb2be326
JSTS         := $(VENV)/json-schema-test-suite
export GUIDED_JSTS_DRAFTS := $(abspath $(JSTS))/tests
# libFuzzer targets of fuzz/ (a nightly crate of its own), each run FUZZ_SECONDS in `make fuzz`.
FUZZ_SECONDS ?= 60
FUZZ_TARGETS := regex_parse regex_differential json_schema json_schema_structured \
                vocab_tokenizer_json vocab_tiktoken grammar_gbnf grammar_lark

.PHONY: help demo test test-rust test-python lint fmt bench build venv suites fuzz clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t14

$(STAMP): $(REQS)
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet $(addprefix -r ,$(REQS))
	@touch $@

venv: $(STAMP)  ## create .venv and install the test, lint and benchmark dependencies

$(JSTS)/.stamp: $(STAMP)
	rm -rf $(JSTS) && mkdir -p $(JSTS)
	echo '$(JSTS_SDIST)' > $(JSTS)/requirement.txt
	$(PY) -m pip download --quiet --no-deps --no-binary :all: \
		--require-hashes -r $(JSTS)/requirement.txt --dest $(JSTS)
	tar -xzf $(JSTS)/jsonschema-*.tar.gz -C $(JSTS) --strip-components=2 --wildcards '*/json/tests' '*/json/remotes'
	@touch $@

suites: $(JSTS)/.stamp  ## fetch the per-draft JSON-Schema-Test-Suite (drafts 4 to 2019-09)

$(EXT_STAMP): $(STAMP) $(EXT_SOURCES)
	VIRTUAL_ENV=$(abspath $(VENV)) $(VENV)/bin/maturin develop --release --skip-install --quiet
	@touch $@

build: $(EXT_STAMP)  ## build guided._lib in place (python/guided)

demo: build  ## compile the demo constraint and print its figures
	$(PY) -m guided demo

test: test-rust test-python  ## build and run every test

test-rust:  ## Rust unit and property tests
	cargo test --workspace --exclude guided-py --release

test-python: build suites  ## pytest + hypothesis (CI=true selects the CI profile)
	$(PY) -m pytest

lint: $(STAMP)  ## rustfmt, clippy -D warnings, ruff, mypy --strict
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings
	$(VENV)/bin/ruff check python tests bench fuzz
	$(VENV)/bin/ruff format --check python tests bench fuzz
	$(VENV)/bin/mypy

fmt:  ## format Rust and Python sources
	cargo fmt --all
	$(VENV)/bin/ruff format python tests bench fuzz
	$(VENV)/bin/ruff check --fix python tests bench fuzz

bench: build  ## run the side-by-side benchmarks, write bench/results/*.json, render them into README.md
	$(PY) bench/run.py
	$(PY) bench/readme.py

# cargo-fuzz goes into fuzz/.tools (ignored) unless it is already on PATH. No sanitizer: the core
# has no unsafe code, and AddressSanitizer's allocator keeps freed memory until the RSS limit
# trips (fuzz/README.md). Every target runs even after one finds a crash; the run fails at the
# end, naming them (inputs in fuzz/artifacts/).
fuzz: export PATH := $(CURDIR)/fuzz/.tools/bin:$(PATH)
fuzz:  ## fuzz every target for FUZZ_SECONDS seconds each (see fuzz/README.md)
	command -v cargo-fuzz >/dev/null || cargo install --locked --root fuzz/.tools cargo-fuzz
	python3 fuzz/seed.py
	@failed=; for t in $(FUZZ_TARGETS); do \
		(cd fuzz && cargo +nightly fuzz run --sanitizer none $$t corpus/$$t -- \
			-max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=2048 -timeout=10) || failed="$$failed $$t"; \
	done; test -z "$$failed" || { echo "fuzz: crashes in:$$failed (see fuzz/artifacts/)"; exit 1; }

clean:  ## remove build outputs (keeps .venv)
	cargo clean
	rm -f python/guided/_lib*.so $(EXT_STAMP)
