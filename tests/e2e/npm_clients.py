"""The MCP clients people install from npm (mcp-remote, the MCP Inspector), run as they are
published: Node 22 and the pinned packages come from scripts/ensure-npm-peers.sh, and when a
client opens "the browser" it runs ``python -m tests.e2e.chromium_opener``, a person at Debian's
Chromium who signs in and answers the consent on the real pages.

The clients open a browser through the ``open`` npm package, which on Linux runs its bundled
``xdg-open``; without a desktop session (no ``DISPLAY``, no ``XDG_CURRENT_DESKTOP``) that script
runs ``$BROWSER`` with the URL. Each opener appends one JSON line per trip to its log."""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from .. import chromium
from ..support import ROOT, ensure_npm_peers
from .test_demo import Demo, demo_password

NODE = ROOT / ".node22" / "node_modules" / ".bin" / "node"
DESKTOP = (
    "DISPLAY",
    "WAYLAND_DISPLAY",
    "XDG_CURRENT_DESKTOP",
    "DESKTOP_SESSION",
    "KDE_FULL_SESSION",
)


def npm_command(peers: Path, name: str) -> list[str]:
    """``node <the package's bin>``: the command an npm client installs as ``name``."""
    return [str(NODE), str(peers / "node_modules" / ".bin" / name)]


def installed_peers() -> Path:
    """Node 22 and the pinned npm clients (installed when missing; a failed install fails the
    test), once this machine is known to have a Chromium for the person."""
    chromium.executable()
    return ensure_npm_peers()


def browser_env(demo: Demo, log: Path, home: Path) -> dict[str, str]:
    """The environment of an npm client whose "browser" is the person at Chromium signing in as
    ``demo``: no desktop session, so ``xdg-open`` hands the URL to ``$BROWSER``."""
    env = {key: value for key, value in os.environ.items() if key not in DESKTOP}
    env.update(
        {
            "HOME": str(home),
            "PATH": f"{NODE.parent}{os.pathsep}{env.get('PATH', '')}",
            "PYTHONPATH": str(ROOT),
            "MCPAUTH_CHROMIUM": chromium.executable(),
            "BROWSER": f"{sys.executable} -m tests.e2e.chromium_opener %s",
            "CHROMIUM_OPENER_LOG": str(log),
            "CHROMIUM_OPENER_USERNAME": "demo",
            "CHROMIUM_OPENER_PASSWORD": demo_password(demo),
        }
    )
    return env


def opener_trips(log: Path, count: int, timeout: float = 60.0) -> list[dict[str, Any]]:
    """The opener's records once there are ``count`` of them (an opener writes its record when
    it has closed its browser, which may be after the client is done), at most ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        lines = log.read_text().splitlines() if log.exists() else []
        if len(lines) >= count or time.monotonic() > deadline:
            return [json.loads(line) for line in lines]
        time.sleep(0.05)


def banner_command(demo: Demo, program: str) -> list[str]:
    """The arguments of the ``program`` command the demo's banner tells people to run."""
    [line] = [line for line in demo.stderr.splitlines() if program in line]
    return shlex.split(line.split(program, 1)[1])
