#!/usr/bin/env bash
# Make sure a Docker engine answers, for the `docker` test lane (tests/e2e/test_container.py):
# Debian's docker.io (dockerd and a client with the built-in BuildKit), docker-compose (v1) and
# debootstrap (the test builds its base image from Debian packages when no registry is
# reachable) are installed when missing, and dockerd is started as root when it is not running.
# Every wait is bounded; idempotent (a second run does nothing); quiet unless something fails;
# never reads stdin. Exits 1 when no engine answers.
set -euo pipefail

log=${MCPAUTH_DOCKERD_LOG:-/var/log/mcpauth-dockerd.log}

missing=()
[[ -x /usr/sbin/dockerd && -x /usr/bin/docker ]] || missing+=(docker.io)
command -v docker-compose >/dev/null 2>&1 || missing+=(docker-compose)
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
if ((${#missing[@]})); then
    if [[ "$(id -u)" != "0" ]]; then
        echo "ensure-docker: missing ${missing[*]} and not root: install them" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    install=(apt-get install -y -qq --no-install-recommends "${missing[@]}")
    if ! timeout 300 "${install[@]}" </dev/null >/dev/null 2>&1; then
        timeout 300 apt-get update -qq </dev/null >/dev/null
        timeout 300 "${install[@]}" </dev/null >/dev/null
    fi
fi

# Debian's client, not a newer static `docker` earlier on PATH (which may lack buildx)
if timeout 20 /usr/bin/docker info >/dev/null 2>&1; then
    exit 0
fi
if [[ "$(id -u)" != "0" ]]; then
    echo "ensure-docker: dockerd is not running and this is not root" >&2
    exit 1
fi
if ! pgrep -x dockerd >/dev/null; then
    # a daemon of its own session, so that it outlives this script
    setsid nohup /usr/sbin/dockerd </dev/null >>"$log" 2>&1 &
fi
for _ in $(seq 60); do
    if timeout 5 /usr/bin/docker info >/dev/null 2>&1; then
        exit 0
    fi
    sleep 1
done
echo "ensure-docker: dockerd did not answer within 60 s; its log:" >&2
tail -n 20 "$log" >&2 || true
exit 1
