#!/usr/bin/env bash
# Make sure a Compose implementation can validate docker/compose.yaml (`config` needs no Docker
# engine): the `docker compose` plugin if present, else Debian's `docker-compose` package
# (installed when missing and running as root). Prints the command to use; exits 1 if none.
# Idempotent, quiet, never reads stdin.
set -euo pipefail

if docker compose version >/dev/null 2>&1; then
    echo "docker compose"
    exit 0
fi
if ! command -v docker-compose >/dev/null 2>&1 && [[ "$(id -u)" == "0" ]]; then
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y -qq --no-install-recommends docker-compose </dev/null >/dev/null 2>&1; then
        apt-get update -qq </dev/null >/dev/null
        apt-get install -y -qq --no-install-recommends docker-compose </dev/null >/dev/null
    fi
fi
if command -v docker-compose >/dev/null 2>&1; then
    echo "docker-compose"
    exit 0
fi
echo "ensure-compose: no docker compose plugin and no docker-compose" >&2
exit 1
