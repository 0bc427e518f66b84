#!/usr/bin/env bash
# Run the official MCP conformance client suites against mcpauth's client helper.
#
# Installs Node 22 into .node22/ and @modelcontextprotocol/conformance into .conformance/ (the
# released line, CONFORMANCE_VERSION) and .conformance-alpha/ (the newest release, NEXT_VERSION)
# when they are missing, then runs against `python -m mcpauth.client.conformance`:
#   - the released line's suites below (SUITE... overrides them);
#   - the newest release's `auth` suite, and every auth/* scenario of the 2026-07-28
#     requirement set plus the auth extensions (`--requirements 2026-07-28`), each of which must
#     pass (there is no expected-failure list). The set's other scenarios (tools_call, request
#     state, custom headers, JSON Schema) test the MCP SDK's general client, not authorization:
#     they are reported in the results, not gated.
# Exits non-zero on any failure or warning. (CI=true friendly, never reads stdin)
# Usage: scripts/conformance-client.sh [SUITE...]    or    scripts/conformance-client.sh install
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
CONFORMANCE_VERSION="0.1.16"
NEXT_VERSION="0.2.0-alpha.12"
REQUIREMENTS="2026-07-28"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
# the client command the suites start per scenario (the tests give one that forks it from a
# process that has imported it already)
CLIENT="${CONFORMANCE_CLIENT:-$PYTHON -m mcpauth.client.conformance}"
RESULTS="${RESULTS:-$ROOT/results/conformance-client}"
SUITES=("$@")
[ ${#SUITES[@]} -gt 0 ] || SUITES=(auth metadata backcompat extensions draft)

log() { printf '%s\n' "$*" >&2; }

if [ ! -x .node22/node_modules/.bin/node ]; then
    log "installing Node 22 into .node22/"
    npm install --prefix .node22 --no-audit --no-fund --loglevel=error node@22 >/dev/null </dev/null
fi
export PATH="$ROOT/.node22/node_modules/.bin:$PATH"

install_suite() {  # install_suite DIR VERSION
    local installed
    installed="$(node -p "require('$ROOT/$1/node_modules/@modelcontextprotocol/conformance/package.json').version" 2>/dev/null || true)"
    if [ "$installed" != "$2" ]; then
        log "installing @modelcontextprotocol/conformance@$2 into $1/"
        npm install --prefix "$1" --no-audit --no-fund --loglevel=error \
            "@modelcontextprotocol/conformance@$2" >/dev/null </dev/null
    fi
}
# one install at a time: scripts/conformance-authorization.sh installs into .conformance-alpha/
# too, and `make test` leaves both to the tests that use them (on different workers)
exec 9>"$ROOT/.conformance-install.lock"
flock 9
install_suite .conformance "$CONFORMANCE_VERSION"
install_suite .conformance-alpha "$NEXT_VERSION"
exec 9>&-
# `install`: only install (make test does, before its workers start, so no two race)
[ "${SUITES[0]:-}" != install ] || exit 0
CONFORMANCE="$ROOT/.conformance/node_modules/.bin/conformance"
NEXT="$ROOT/.conformance-alpha/node_modules/.bin/conformance"

mkdir -p "$RESULTS"
status=0
for suite in "${SUITES[@]}"; do
    out="$RESULTS/$suite.txt"
    if "$CONFORMANCE" client --command "$CLIENT" \
        --suite "$suite" -o "$RESULTS/$suite" >"$out" 2>&1 </dev/null; then
        log "conformance $suite: passed"
    else
        log "conformance $suite: FAILED (details in $out)"
        grep -E '^[✓✗]|Total|FAIL|WARN' "$out" >&2 || tail -n 40 "$out" >&2
        status=1
    fi
done
# The newest release: its auth suite must pass whole.
out="$RESULTS/next-auth.txt"
if "$NEXT" client --command "$CLIENT" --suite auth \
    -o "$RESULTS/next-auth" >"$out" 2>&1 </dev/null; then
    log "conformance $NEXT_VERSION auth: passed"
else
    log "conformance $NEXT_VERSION auth: FAILED (details in $out)"
    grep -E '^[✓✗]|Total' "$out" >&2 || tail -n 40 "$out" >&2
    status=1
fi

# The newest release, the $REQUIREMENTS requirement set: every auth/* line must be a pass
# with no expected failures; the exit status covers non-auth scenarios too, so it is not used.
out="$RESULTS/next-requirements.txt"
"$NEXT" client --command "$CLIENT" --requirements "$REQUIREMENTS" \
    -o "$RESULTS/next-requirements" >"$out" 2>&1 </dev/null || true
passed="$(grep -cE '^✓ auth/' "$out" || true)"
failed=()
while IFS= read -r line; do
    failed+=("$(printf '%s' "$line" | sed -E 's/^✗ (auth\/[^:]+):.*/\1/')")
done < <(grep -E '^✗ auth/' "$out" || true)
if [ "$passed" -lt 20 ] || [ ${#failed[@]} -gt 0 ]; then
    log "conformance $NEXT_VERSION requirements $REQUIREMENTS: FAILED: ${failed[*]:-} ($passed auth scenarios passed; details in $out)"
    status=1
else
    log "conformance $NEXT_VERSION requirements $REQUIREMENTS: $passed auth scenarios passed"
fi
exit "$status"
