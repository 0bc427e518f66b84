#!/usr/bin/env bash
# Make sure a PostgreSQL server (initdb, pg_ctl, postgres) is installed and print its bin
# directory. Installs Debian's `postgresql` package when missing (CI runs as root); idempotent,
# quiet, never reads stdin. The tests start their own throwaway server from these binaries.
set -euo pipefail

find_bindir() {
    local dir
    if [[ -n "${MCPAUTH_PG_BIN:-}" && -x "${MCPAUTH_PG_BIN}/initdb" && -x "${MCPAUTH_PG_BIN}/postgres" ]]; then
        echo "${MCPAUTH_PG_BIN}"
        return 0
    fi
    # newest Debian server first
    for dir in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -t/ -k5 -V -r); do
        if [[ -x "$dir/initdb" && -x "$dir/pg_ctl" && -x "$dir/postgres" ]]; then
            echo "$dir"
            return 0
        fi
    done
    if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
        dir="$(dirname "$(readlink -f "$(command -v initdb)")")"
        if [[ -x "$dir/postgres" ]]; then
            echo "$dir"
            return 0
        fi
    fi
    return 1
}

if bindir="$(find_bindir)"; then
    echo "$bindir"
    exit 0
fi

if [[ "$(id -u)" != "0" ]]; then
    echo "ensure-postgres: no PostgreSQL server found and not root; install Debian's 'postgresql' package" >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
apt-get update -qq </dev/null >/dev/null
apt-get install -y -qq --no-install-recommends postgresql </dev/null >/dev/null
# the package may start a cluster of its own; the tests never use it
if command -v pg_ctlcluster >/dev/null 2>&1; then
    for cluster in $(pg_lsclusters -h 2>/dev/null | awk '$4 == "online" {print $1 "/" $2}'); do
        pg_ctlcluster "${cluster%/*}" "${cluster#*/}" stop >/dev/null 2>&1 || true
    done
fi

if bindir="$(find_bindir)"; then
    echo "$bindir"
    exit 0
fi
echo "ensure-postgres: installed 'postgresql' but found no initdb/pg_ctl/postgres" >&2
exit 1
