"""Helpers for end-to-end tests: free loopback ports and real processes with bounded waits
that are always cleaned up."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import httpx2

from . import forks

VENV_BIN = Path(sys.executable).parent
MCPAUTH = str(VENV_BIN / "mcpauth")
ROOT = Path(__file__).resolve().parents[1]
# argon2id at the production cost, for a process whose test needs sign-ins to be slow (the
# tests run every other `mcpauth` process at test cost: tests/conftest.py)
PRODUCTION_PASSWORD_COST = {
    "MCPAUTH_PASSWORD_HASH_TIME_COST": "3",
    "MCPAUTH_PASSWORD_HASH_MEMORY_COST": "65536",
}


def ensure_npm_peers() -> Path:
    """Node 22 and the pinned npm packages the tests use (axe-core, the TypeScript SDK client,
    oidc-provider, mcp-remote, the MCP Inspector), installed by scripts/ensure-npm-peers.sh
    when missing: the folder whose node_modules holds them. A failed install fails the test."""
    installed = subprocess.run(
        ["bash", str(ROOT / "scripts" / "ensure-npm-peers.sh")],
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert installed.returncode == 0, installed.stderr
    return Path(installed.stdout.strip().splitlines()[-1])


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(
    url: str, *, timeout: float = 20.0, process: subprocess.Popen[bytes] | None = None
) -> None:
    """Poll ``url`` until it answers (any status), at most ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"process exited with {process.returncode} before {url} answered")
        try:
            httpx2.get(url, timeout=1.0)
            return
        except httpx2.TransportError:
            time.sleep(0.05)
    raise TimeoutError(f"{url} did not answer within {timeout} s")


@contextmanager
def running(
    args: Sequence[str],
    *,
    ready_url: str,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    timeout: float = 30.0,
) -> Iterator[subprocess.Popen[bytes]]:
    """Start ``args``, wait until ``ready_url`` answers, and stop it (TERM, then KILL) after."""
    full_env = {**os.environ, **(env or {})}
    log = open(Path(cwd or ".") / f"process-{os.getpid()}-{time.monotonic_ns()}.log", "wb")  # noqa: SIM115
    process = (
        forks.ForkedProcess(  # a program of this interpreter: forked, not exec'd
            args,
            env=full_env,
            cwd=cwd,
            stdout=log.fileno(),
            stderr=subprocess.STDOUT,
            new_session=True,
        )
        if forks.forkable(args, full_env)
        else subprocess.Popen(
            list(args),
            env=full_env,
            cwd=cwd,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    )
    try:
        try:
            wait_for(ready_url, timeout=timeout, process=process)
        except (RuntimeError, TimeoutError) as exc:
            log.flush()
            output = Path(log.name).read_text(errors="replace")[-4000:]
            raise RuntimeError(f"{exc}\n--- output ---\n{output}") from exc
        yield process
    finally:
        stop(process)
        log.close()


def stop(process: subprocess.Popen[bytes]) -> None:
    """End a process group started with ``start_new_session``: TERM, then KILL after 10 s."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


def run_cli(
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    stdin: str | None = None,
    cwd: str | Path | None = None,
    fork: bool = True,
) -> subprocess.CompletedProcess[str]:
    """``mcpauth ARGS`` run to completion, its output captured; forked from the pre-imported
    process when it can be (tests/forks.py), unless ``fork=False`` asks for exec."""
    environment = {**os.environ, **(env or {})}
    if fork and forks.forkable([MCPAUTH, *args], environment):
        return forks.run([MCPAUTH, *args], env=environment, stdin=stdin, cwd=cwd, timeout=60)
    return subprocess.run(
        [MCPAUTH, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        env=environment,
        cwd=cwd,
        check=False,
    )
