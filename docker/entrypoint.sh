#!/bin/sh
# Container entry point for the mcpauth authorization server: apply the database migrations
# (`mcpauth db upgrade`, retried while the database is still starting), create the bootstrap
# resource and user when asked to, then replace this shell with `mcpauth serve`.
#
# Configuration is the server's own MCPAUTH_* environment (MCPAUTH_DATABASE_URL,
# MCPAUTH_SECRET_KEY, MCPAUTH_ISSUER, MCPAUTH_HOST, MCPAUTH_PORT, MCPAUTH_TRUSTED_PROXIES...),
# plus, only for this script:
#   MCPAUTH_DB_WAIT_SECONDS          how long to retry the migrations (default 60)
#   MCPAUTH_BOOTSTRAP_RESOURCE       a protected resource (MCP server URL) to register if missing,
#                                    as the default resource
#   MCPAUTH_BOOTSTRAP_SCOPES         its scopes, separated by ";", each SCOPE or SCOPE=DESCRIPTION;
#                                    the first is the default scope (default: mcp:tools)
#   MCPAUTH_BOOTSTRAP_USER           a user to create if missing, with the password from
#   MCPAUTH_BOOTSTRAP_PASSWORD_FILE  this file, or MCPAUTH_BOOTSTRAP_PASSWORD; with neither, a
#                                    random password is generated and printed once
# Arguments are passed on to `mcpauth serve`.
set -eu

mcpauth_cmd=${MCPAUTH_COMMAND:-mcpauth}

: "${MCPAUTH_DATABASE_URL:?MCPAUTH_DATABASE_URL must name the database (postgresql://USER:PASSWORD@HOST:5432/DB)}"

wait_seconds=${MCPAUTH_DB_WAIT_SECONDS:-60}
started=$(date +%s)
until "$mcpauth_cmd" db upgrade; do
    if [ $(($(date +%s) - started)) -ge "$wait_seconds" ]; then
        echo "mcpauth-entrypoint: the migrations did not succeed within ${wait_seconds} s" >&2
        exit 1
    fi
    echo "mcpauth-entrypoint: database not ready, retrying" >&2
    sleep 2
done

# exit status 0 if the JSON list on stdin has an item whose $1 member equals $2
has_item() {
    python3 -c 'import json, sys
sys.exit(0 if any(i.get(sys.argv[1]) == sys.argv[2] for i in json.load(sys.stdin)) else 1)' "$1" "$2"
}

# `mcpauth resources add` for the bootstrap resource, one --scope per ;-separated entry
add_resource() {
    set -- resources add "$MCPAUTH_BOOTSTRAP_RESOURCE" --default
    default_scope=""
    saved_ifs=$IFS
    IFS=';'
    for scope in ${MCPAUTH_BOOTSTRAP_SCOPES:-mcp:tools}; do
        scope=$(printf '%s' "$scope" | sed 's/^ *//; s/ *$//')
        [ -n "$scope" ] || continue
        set -- "$@" --scope "$scope"
        [ -n "$default_scope" ] || default_scope=${scope%%=*}
    done
    IFS=$saved_ifs
    "$mcpauth_cmd" "$@" --default-scope "$default_scope" >/dev/null
}

if [ -n "${MCPAUTH_BOOTSTRAP_RESOURCE:-}" ]; then
    if ! "$mcpauth_cmd" resources list | has_item uri "$MCPAUTH_BOOTSTRAP_RESOURCE"; then
        # another replica may have won the race: then it exists now
        add_resource || "$mcpauth_cmd" resources list | has_item uri "$MCPAUTH_BOOTSTRAP_RESOURCE"
        echo "mcpauth-entrypoint: registered resource $MCPAUTH_BOOTSTRAP_RESOURCE" >&2
    fi
fi

if [ -n "${MCPAUTH_BOOTSTRAP_USER:-}" ]; then
    if ! "$mcpauth_cmd" users list | has_item username "$MCPAUTH_BOOTSTRAP_USER"; then
        generated=""
        if [ -n "${MCPAUTH_BOOTSTRAP_PASSWORD_FILE:-}" ]; then
            password=$(cat "$MCPAUTH_BOOTSTRAP_PASSWORD_FILE")
        elif [ -n "${MCPAUTH_BOOTSTRAP_PASSWORD:-}" ]; then
            password=$MCPAUTH_BOOTSTRAP_PASSWORD
        else
            password=$(python3 -c 'import secrets; print(secrets.token_urlsafe(12))')
            generated=yes
        fi
        printf '%s\n' "$password" |
            "$mcpauth_cmd" users add "$MCPAUTH_BOOTSTRAP_USER" --password-stdin >/dev/null ||
            "$mcpauth_cmd" users list | has_item username "$MCPAUTH_BOOTSTRAP_USER"
        if [ -n "$generated" ]; then
            echo "mcpauth-entrypoint: created user $MCPAUTH_BOOTSTRAP_USER with password $password (shown once)" >&2
        else
            echo "mcpauth-entrypoint: created user $MCPAUTH_BOOTSTRAP_USER" >&2
        fi
        unset password
    fi
fi

exec "$mcpauth_cmd" serve "$@"
