#!/usr/bin/env bash
# The official MCP conformance suite's `authorization` command against `mcpauth serve`.
#
# The suite (npm @modelcontextprotocol/conformance, 0.2.0 alpha: the first with an authorization
# server command) needs Node >= 22: Node 22 is installed into .node22/ and the suite into
# .conformance-alpha/ when they are missing or at another version (idempotent, quiet, never reads
# stdin, CI-safe). The run itself is tests/e2e/test_conformance_authorization.py: it starts
# `mcpauth serve`, pre-registers the suite's client, runs the suite and completes the login and
# consent forms the way a browser would, then checks that every check passed.
#
# Usage:
#   scripts/conformance-authorization.sh           install if needed, then run the test (pytest)
#   scripts/conformance-authorization.sh install   install if needed; print the suite's binary
# Results (the suite's checks.json and output) go to results/conformance-authorization/.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
CONFORMANCE_VERSION="0.2.0-alpha.12"
NODE_MAJOR="22"
PREFIX="$ROOT/.conformance-alpha"
PYTHON_BIN="${PYTHON_BIN:-$ROOT/.venv/bin}"

log() { printf '%s\n' "$*" >&2; }

install() {
    command -v npm >/dev/null || { log "npm is not installed"; return 127; }
    # one install at a time: the client suites' script installs into the same folder, and
    # `make test` leaves both to the tests that use them (on different workers)
    exec 9>"$ROOT/.conformance-install.lock"
    flock 9
    local node="$ROOT/.node22/node_modules/.bin/node" major=""
    [ -x "$node" ] && major="$("$node" -p 'process.versions.node.split(".")[0]' 2>/dev/null || true)"
    if [ "$major" != "$NODE_MAJOR" ]; then
        log "installing Node $NODE_MAJOR into .node22/"
        # node@22 works through a preinstall script: never --ignore-scripts here
        npm install --prefix "$ROOT/.node22" --no-audit --no-fund --loglevel=error \
            "node@$NODE_MAJOR" >/dev/null </dev/null
    fi
    # npm itself then runs under Node 22 too (no EBADENGINE noise)
    export PATH="$ROOT/.node22/node_modules/.bin:$PATH"
    local installed
    installed="$(node -p "require('$PREFIX/node_modules/@modelcontextprotocol/conformance/package.json').version" 2>/dev/null || true)"
    if [ "$installed" != "$CONFORMANCE_VERSION" ]; then
        log "installing @modelcontextprotocol/conformance@$CONFORMANCE_VERSION into .conformance-alpha/"
        npm install --prefix "$PREFIX" --no-audit --no-fund --loglevel=error \
            "@modelcontextprotocol/conformance@$CONFORMANCE_VERSION" >/dev/null </dev/null
    fi
    local bin="$PREFIX/node_modules/.bin/conformance"
    [ "$("$bin" --version </dev/null)" = "$CONFORMANCE_VERSION" ] || {
        log "conformance $CONFORMANCE_VERSION did not install"; return 1; }
    exec 9>&-
    printf '%s\n' "$bin"
}

case "${1:-run}" in
    install)
        install
        ;;
    run)
        install >/dev/null
        exec "$PYTHON_BIN/pytest" -p no:cacheprovider -m conformance \
            tests/e2e/test_conformance_authorization.py </dev/null
        ;;
    *)
        log "usage: $0 [install|run]"
        exit 2
        ;;
esac
