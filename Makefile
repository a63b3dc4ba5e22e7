# Everything installs into .venv at the repository root; a fresh machine needs only Python 3.11.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test unit integration bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

# Starts the embedded stack, runs the example jobs to completion with live progress, prints a
# summary with tasks per second, and stops the stack.
demo: $(STAMP)
	$(BIN)/pelotonctl dev demo

test: $(STAMP)
	$(BIN)/python -m pytest -q

unit: $(STAMP)
	$(BIN)/python -m pytest -q tests/unit

integration: $(STAMP)
	$(BIN)/python -m pytest -q tests/integration

# Figures, not pass/fail: the pipeline's rate on simulated hosts.
bench: $(STAMP)
	$(BIN)/pelotonctl bench --tasks 5000

clean:
	rm -rf $(VENV) .peloton .pytest_cache
