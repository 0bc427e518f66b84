#!/usr/bin/env bash
# Debian's chromium (and fonts for readable screenshots), installed with apt when missing.
# Prints the browser's path. The tests drive it through Playwright's Python package with
# executable_path; `playwright install` (a browser download) is never used.
set -euo pipefail
if ! command -v chromium >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq </dev/null >/dev/null
    apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core </dev/null >/dev/null
fi
command -v chromium
