# mcpauth: `make run` starts the demo, `make check` is the fast inner loop (lint, types, the
# unit lane: about a minute), `make test` runs every check as CI does.
# `make run AUTH_PORT=9100 MCP_PORT=8100` moves the demo to other ports.
PY ?= python3
VENV ?= .venv
AUTH_PORT ?= 9000
MCP_PORT ?= 8000
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

# Bytecode (and pytest's rewritten test modules) cached under .venv, never beside the sources:
# with PYTHONDONTWRITEBYTECODE (as .ci/run sets it) every xdist worker and every `mcpauth`
# process a test starts would compile everything again
export PYTHONPYCACHEPREFIX := $(abspath $(VENV))/pycache
unexport PYTHONDONTWRITEBYTECODE

# pytest-xdist workers: the e2e tests wait on the processes they start, so one more worker than
# the 2 cores of CI's machine pays off; a fourth only adds contention (5 min 34 s with 3, 6 min
# 2 s with 4, on one fresh clone; `make test PYTEST_WORKERS=N` to compare)
PYTEST_WORKERS ?= 3
# --dist loadfile: a module's tests stay on one worker, so the processes, servers and containers
# its module fixtures start are started once (and never twice at once, as compose's fixed ports
# and project name need). --no-loadscope-reorder: the modules are handed out in the order
# tests/conftest.py puts them in, the long container, browser and e2e modules first; xdist's
# own order (most tests first) left them all for the end, where they set the tail
XDIST := -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder
# the unit lane is in-process CPU work: one worker per core and one more
CHECK_WORKERS ?= 3
# the lanes (markers, see pyproject.toml and tests/conftest.py): `make check` runs the unit lane
FAST_LANE := not e2e and not browser and not slow and not postgres and not docker

.PHONY: run check test lint typecheck pytest coverage pytest-fast test-postgres postgres-lane test-tools \
	conformance bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
# the distribution was called `mcpauth` before it became mcpauth-kit (that name on PyPI is an
# unrelated project): a .venv from then still has the old editable install
	$(BIN)/python -m pip uninstall -q -y mcpauth 2>/dev/null || true
# uv installs the same resolution in a few seconds where pip takes half a minute of a fresh
# clone's `make test`; pip itself when uv cannot be had
	( $(BIN)/python -m pip install -q uv && $(BIN)/uv pip install -q --python $(BIN)/python \
		-e '.[all,dev]' ) || $(BIN)/python -m pip install -q -e '.[all,dev]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/mcpauth demo --auth-port $(AUTH_PORT) --mcp-port $(MCP_PORT)

# the three side by side, as in `test`: mypy's run overlaps the unit lane's
check: $(STAMP)
	$(MAKE) --no-print-directory -f $(abspath $(firstword $(MAKEFILE_LIST))) -j3 \
		lint typecheck pytest-fast

# lint and types beside the tests rather than before them: mypy's minute on a fresh clone
# overlaps the workers' start (a failure in any of the three fails the target)
test: $(STAMP)
	$(MAKE) --no-print-directory -f $(abspath $(firstword $(MAKEFILE_LIST))) -j3 \
		lint typecheck pytest

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

# The unit lane, in parallel, without coverage.
pytest-fast: $(STAMP)
	$(BIN)/pytest -n $(CHECK_WORKERS) -q -m "$(FAST_LANE)" $(PYTEST_ARGS)

# What many tests drive besides Python, installed once before the workers start (never raced
# by them): Node 22 and the pinned npm packages (Chromium and PostgreSQL need root: .ci/run).
# The conformance suites install on first use, one install at a time (a lock in their scripts),
# while the other workers run.
test-tools:
	scripts/ensure-npm-peers.sh >/dev/null

# Every test in one parallel session: the server tests that reach a database run on SQLite, and
# the storage tests among them once more on PostgreSQL (MCPAUTH_TEST_DATABASE=sqlite,postgresql,
# tests/pg.py; each worker starts its own throwaway server), beside the e2e, browser and docker
# lanes. No coverage here (tracing every line costs a quarter of the run): `make coverage`.
pytest: $(STAMP) test-tools
	MCPAUTH_TEST_DATABASE=sqlite,postgresql $(BIN)/pytest $(XDIST) $(PYTEST_ARGS)

# The same session under coverage, the workers combined (pytest-cov), and the report.
coverage: $(STAMP) test-tools
	$(BIN)/coverage erase
	MCPAUTH_TEST_DATABASE=sqlite,postgresql $(BIN)/pytest $(XDIST) --cov --cov-report= \
		$(PYTEST_ARGS)
	$(BIN)/coverage report --skip-covered --sort=cover | tail -n 25

# Every server test on PostgreSQL (`make test` runs the PostgreSQL lane only): after changing
# SQL, a table or a migration.
test-postgres: $(STAMP)
	MCPAUTH_TEST_DATABASE=postgresql $(BIN)/pytest $(XDIST) tests/server $(PYTEST_PG_ARGS)

# Choose the PostgreSQL lane again (tests/postgres_lane.txt): the server tests that between them
# send every SQL statement the server suite sends (scripts/postgres_lane.py).
postgres-lane: $(STAMP)
	$(BIN)/python scripts/postgres_lane.py

conformance: $(STAMP)
	bash scripts/conformance-client.sh
	bash scripts/conformance-authorization.sh

bench: $(STAMP)
	$(BIN)/python bench/token/run.py
	$(BIN)/python bench/client_credentials/run.py
	$(BIN)/python bench/middleware/run.py
	$(BIN)/python bench/dpop/run.py
	$(BIN)/python bench/cli/run.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .coverage .coverage.*
