#!/usr/bin/env bash
# Run the official MCP conformance client suites against mcpauth's client helper.
#
# Installs Node 22 into .node22/ and @modelcontextprotocol/conformance into .conformance/ when they
# are missing (the suite needs Node >= 22), then runs the suites below against
# `python -m mcpauth.client.conformance`. Exits non-zero on any failure or warning.
# Usage: scripts/conformance-client.sh [SUITE...]      (CI=true friendly, never reads stdin)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
CONFORMANCE_VERSION="0.1.16"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
RESULTS="${RESULTS:-$ROOT/results/conformance-client}"
SUITES=("$@")
[ ${#SUITES[@]} -gt 0 ] || SUITES=(auth metadata backcompat extensions draft)

log() { printf '%s\n' "$*" >&2; }

if [ ! -x .node22/node_modules/.bin/node ]; then
    log "installing Node 22 into .node22/"
    npm install --prefix .node22 --no-audit --no-fund --loglevel=error node@22 >/dev/null </dev/null
fi
export PATH="$ROOT/.node22/node_modules/.bin:$PATH"

CONFORMANCE="$ROOT/.conformance/node_modules/.bin/conformance"
installed="$(node -p "require('$ROOT/.conformance/node_modules/@modelcontextprotocol/conformance/package.json').version" 2>/dev/null || true)"
if [ "$installed" != "$CONFORMANCE_VERSION" ]; then
    log "installing @modelcontextprotocol/conformance@$CONFORMANCE_VERSION into .conformance/"
    npm install --prefix .conformance --no-audit --no-fund --loglevel=error \
        "@modelcontextprotocol/conformance@$CONFORMANCE_VERSION" >/dev/null </dev/null
fi

mkdir -p "$RESULTS"
status=0
for suite in "${SUITES[@]}"; do
    out="$RESULTS/$suite.txt"
    if "$CONFORMANCE" client --command "$PYTHON -m mcpauth.client.conformance" \
        --suite "$suite" -o "$RESULTS/$suite" >"$out" 2>&1 </dev/null; then
        log "conformance $suite: passed"
    else
        log "conformance $suite: FAILED (details in $out)"
        grep -E '^[✓✗]|Total|FAIL|WARN' "$out" >&2 || tail -n 40 "$out" >&2
        status=1
    fi
done
exit "$status"
