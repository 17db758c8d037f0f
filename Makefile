# Set-up and checks. `make demo` and `make test` work on a fresh machine with Python 3.11 and make.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Overrides appended to the demo's training command (tests/test_docs_examples.py shortens it).
DEMO_ARGS ?=

.PHONY: install demo test test-fast learn lint docs bench clean

install: $(STAMP)

# torch is pinned and installed first: the 2.13.0 CPU wheel is on local disk, and letting another
# package pull torch in would fetch a multi-GB CUDA build instead.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m torch.distributed.run --nnodes=1 --nproc_per_node=2 \
		--master_addr=127.0.0.1 --master_port=29511 \
		-m distrl.train --config configs/cartpole_ppo.yaml --run-dir runs/demo --overwrite --distributed $(DEMO_ARGS)
	$(BIN)/distrl eval --checkpoint runs/demo --episodes 10

# Every behaviour, the real multi-process paths included, and each learning claim on its kept seed,
# two tests at a time; the 25 slowest printed at the end. The tiers, what runs apart and the
# flaky-test policy: docs/reference/testing.md.
test: $(STAMP)
	$(BIN)/python -m pytest -q --durations=25 -n 2 --dist loadgroup

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow"

# The learning tier (not run by CI): every learning claim over its seeds, two runs at a time, each
# claim's pass rate at the end and in runs/learn.json. One claim alone:
# make learn LEARN_ARGS="-k test_name".
LEARN_ARGS ?=
learn: $(STAMP)
	$(BIN)/python -m pytest -q --learn --learn-report=runs/learn.json -n 2 --dist loadgroup --timeout 1800 $(LEARN_ARGS)

# The documentation site, into site/ (tests/test_docs.py builds it strictly in make test too).
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks

bench: $(STAMP)
	$(BIN)/python benchmarks/cartpole_bench.py

clean:
	rm -rf $(VENV) runs site .pytest_cache
