#!/usr/bin/env bash
# Make sure a Redis server binary is installed and print its path. Installs Debian's
# `redis-server` package when missing (CI runs as root); idempotent, quiet, never reads stdin.
# The tests start their own throwaway server from this binary (tests/redis_server.py); the
# service the package may start is stopped, the tests never use it.
set -euo pipefail

find_binary() {
    if [[ -n "${MCPAUTH_REDIS_SERVER:-}" && -x "${MCPAUTH_REDIS_SERVER}" ]]; then
        echo "${MCPAUTH_REDIS_SERVER}"
        return 0
    fi
    local found
    for found in "$(command -v redis-server 2>/dev/null || true)" /usr/bin/redis-server; do
        if [[ -n "$found" && -x "$found" ]]; then
            echo "$found"
            return 0
        fi
    done
    return 1
}

if binary="$(find_binary)"; then
    echo "$binary"
    exit 0
fi

if [[ "$(id -u)" != "0" ]]; then
    echo "ensure-redis: no redis-server found and not root; install Debian's 'redis-server' package" >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
apt-get update -qq </dev/null >/dev/null
apt-get install -y -qq --no-install-recommends redis-server </dev/null >/dev/null
# the package may start a server of its own (on 6379); the tests never use it
if command -v service >/dev/null 2>&1; then
    service redis-server stop >/dev/null 2>&1 || true
fi

if binary="$(find_binary)"; then
    echo "$binary"
    exit 0
fi
echo "ensure-redis: installed 'redis-server' but found no redis-server binary" >&2
exit 1
