#!/bin/sh
# Entry point of tests/e2e/docker/postgres.Dockerfile: on an empty $PGDATA, initdb (the
# superuser $POSTGRES_USER with $POSTGRES_PASSWORD, scram-sha-256 over TCP) and createdb
# $POSTGRES_DB on a server listening on a private socket only; then exec postgres on every
# address. The healthcheck (pg_isready on the public socket) answers only after that.
set -eu
: "${PGDATA:=/var/lib/postgresql/data}"
: "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD must be set}"
user=${POSTGRES_USER:-postgres}
db=${POSTGRES_DB:-$user}
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    init=$(mktemp -d)
    printf '%s\n' "$POSTGRES_PASSWORD" >"$init/pw"
    initdb -D "$PGDATA" -U "$user" --pwfile="$init/pw" -E UTF8 --locale=C.UTF-8 \
        --auth-local=trust --auth-host=scram-sha-256 >/dev/null
    rm -f "$init/pw"
    echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
    pg_ctl -D "$PGDATA" -w -t 60 -l "$init/log" \
        -o "-c listen_addresses='' -c unix_socket_directories='$init'" start >/dev/null
    if [ "$db" != postgres ]; then
        createdb -h "$init" -U "$user" "$db"
    fi
    pg_ctl -D "$PGDATA" -m fast -w -t 60 stop >/dev/null
    rm -rf "$init"
    echo "postgres-entrypoint: initialised $PGDATA with database $db" >&2
fi
exec postgres -D "$PGDATA" -c listen_addresses='*' -c unix_socket_directories=/var/run/postgresql
