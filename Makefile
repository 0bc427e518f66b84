# mcpauth: `make run` starts the demo, `make test` runs every check.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint typecheck pytest conformance bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[all,dev]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/mcpauth demo

test: lint typecheck pytest

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

pytest: $(STAMP)
	$(BIN)/coverage run -m pytest $(PYTEST_ARGS)
	$(BIN)/coverage report --skip-covered --sort=cover | tail -n 25

conformance: $(STAMP)
	bash scripts/conformance-client.sh
	bash scripts/conformance-authorization.sh

bench: $(STAMP)
	$(BIN)/python bench/run.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .coverage
