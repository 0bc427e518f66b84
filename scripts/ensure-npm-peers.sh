#!/usr/bin/env bash
# The npm packages the browser and client tests use, pinned, installed into .npm-peers/ when missing
# or at another version (idempotent, quiet, never reads stdin); Node 22 into .node22/ likewise.
# Prints the folder that holds node_modules/. Usage: scripts/ensure-npm-peers.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PREFIX="$ROOT/.npm-peers"
NODE_MAJOR="22"
PACKAGES=(
    "axe-core@4.14.1"                      # accessibility audit injected into every page
    "@modelcontextprotocol/client@2.4.0"   # the official TypeScript SDK client
    "oidc-provider@9.13.3"                 # the upstream OpenID provider of the sign-in tests
    "mcp-remote@0.15.1"                    # the stdio-to-HTTP bridge people put in their clients
    "@modelcontextprotocol/inspector@2.12.0"  # the MCP Inspector: web UI and CLI
    "@modelcontextprotocol/server-everything@2026.8.31"  # a Node MCP server behind mcpauth proxy
)

log() { printf '%s\n' "$*" >&2; }
command -v npm >/dev/null || { log "npm is not installed"; exit 127; }

node="$ROOT/.node22/node_modules/.bin/node"
major=""
[ -x "$node" ] && major="$("$node" -p 'process.versions.node.split(".")[0]' 2>/dev/null || true)"
if [ "$major" != "$NODE_MAJOR" ]; then
    log "installing Node $NODE_MAJOR into .node22/"
    npm install --prefix "$ROOT/.node22" --no-audit --no-fund --loglevel=error \
        "node@$NODE_MAJOR" >/dev/null </dev/null
fi
export PATH="$ROOT/.node22/node_modules/.bin:$PATH"

missing=()
for spec in "${PACKAGES[@]}"; do
    name="${spec%@*}"
    want="${spec##*@}"
    have="$(node -p "require('$PREFIX/node_modules/$name/package.json').version" 2>/dev/null || true)"
    [ "$have" = "$want" ] || missing+=("$spec")
done
if [ ${#missing[@]} -gt 0 ]; then
    log "installing ${missing[*]} into .npm-peers/"
    mkdir -p "$PREFIX"
    [ -f "$PREFIX/package.json" ] || printf '{"private": true}\n' > "$PREFIX/package.json"
    npm install --prefix "$PREFIX" --no-audit --no-fund --loglevel=error "${PACKAGES[@]}" \
        >/dev/null </dev/null
fi
printf '%s\n' "$PREFIX"
