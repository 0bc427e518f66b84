# mcpauth: `make run` starts the demo, `make test` runs every check.
# `make run AUTH_PORT=9100 MCP_PORT=8100` moves the demo to other ports.
PY ?= python3
VENV ?= .venv
AUTH_PORT ?= 9000
MCP_PORT ?= 8000
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint typecheck pytest pytest-postgres conformance bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
# the distribution was called `mcpauth` before it became mcpauth-kit (that name on PyPI is an
# unrelated project): a .venv from then still has the old editable install
	$(BIN)/python -m pip uninstall -q -y mcpauth 2>/dev/null || true
	$(BIN)/python -m pip install -q -e '.[all,dev]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/mcpauth demo --auth-port $(AUTH_PORT) --mcp-port $(MCP_PORT)

test: lint typecheck pytest

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

# Every test on SQLite (the e2e PostgreSQL tests start their own server), then the server
# suite again on PostgreSQL (MCPAUTH_TEST_DATABASE, tests/pg.py); coverage of both combined.
pytest: $(STAMP)
	$(BIN)/coverage erase
	$(BIN)/coverage run -p -m pytest $(PYTEST_ARGS)
	MCPAUTH_TEST_DATABASE=postgresql $(BIN)/coverage run -p -m pytest -q tests/server $(PYTEST_PG_ARGS)
	$(BIN)/coverage combine -q
	$(BIN)/coverage report --skip-covered --sort=cover | tail -n 25

pytest-postgres: $(STAMP)
	MCPAUTH_TEST_DATABASE=postgresql $(BIN)/pytest tests/server $(PYTEST_PG_ARGS)

conformance: $(STAMP)
	bash scripts/conformance-client.sh
	bash scripts/conformance-authorization.sh

bench: $(STAMP)
	$(BIN)/python bench/token/run.py
	$(BIN)/python bench/client_credentials/run.py
	$(BIN)/python bench/middleware/run.py
	$(BIN)/python bench/dpop/run.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .coverage .coverage.*
