"""Helpers shared by the benchmark runners under bench/: starting and stopping `mcpauth serve`,
measuring CPU time, running wrk with a script that prints a ``BENCH {json}`` line (see
``common.lua``), formatting medians, and minting authorization codes through a signed-in
first-party client.

What each benchmark measures, its peer, its flags and its report stay in its own folder. The
runners import this module as ``bench.common`` after putting the repository root on
``sys.path`` (see bench/README.md).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import re
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urljoin, urlsplit

import httpx2

MCPAUTH = str(Path(sys.executable).parent / "mcpauth")
SECRET_KEY = "bench-secret-key-0123456789abcdef"
RESOURCE = "https://mcp.example.com/mcp"
SCOPE = "mcp:read"
REDIRECT_URI = "http://127.0.0.1/callback"
USER, PASSWORD = "bench", "bench-password-123"
VERIFIER = "bench-verifier-" + "v" * 43  # one PKCE pair for every code: the server still checks it
CHALLENGE = (
    base64.urlsafe_b64encode(hashlib.sha256(VERIFIER.encode()).digest()).rstrip(b"=").decode()
)


# --- processes ---------------------------------------------------------------------------------


def require_tools(*tools: str) -> None:
    """Exit with an install hint unless every one of ``tools`` is on PATH."""
    for tool in tools:
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is required (apt-get install -y wrk util-linux)")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now (the OS picks it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def mcpauth_env(workdir: Path, database: str, **settings: str) -> dict[str, str]:
    """The environment for `mcpauth` commands of one benchmark server: this process's
    environment, the bench secret key, ``database``, HOME and XDG_DATA_HOME inside ``workdir``,
    then ``settings`` (e.g. ``MCPAUTH_RATE_LIMIT_TOKEN="1000000000"``) on top."""
    return {
        **os.environ,
        "MCPAUTH_SECRET_KEY": SECRET_KEY,
        "MCPAUTH_DATABASE_URL": database,
        "HOME": str(workdir),
        "XDG_DATA_HOME": str(workdir / "data"),
        **settings,
    }


def mcpauth_cli(env: Mapping[str, str], *args: str, stdin: str | None = None) -> str:
    """Run ``mcpauth *args`` and return its stdout; exit with its stderr when it fails."""
    done = subprocess.run(
        [MCPAUTH, *args], env=env, input=stdin, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"mcpauth {' '.join(args)} failed: {done.stderr}")
    return done.stdout


def setup_authorization_code(env: Mapping[str, str]) -> str:
    """Add the bench user, RESOURCE with SCOPE as its default scope and a first-party public
    client (authorization_code and refresh_token, redirect URI REDIRECT_URI, so no consent
    page); return the client id."""
    mcpauth_cli(env, "users", "add", USER, "--password-stdin", stdin=PASSWORD + "\n")
    mcpauth_cli(env, "resources", "add", RESOURCE, "--scope", SCOPE, "--default-scope", SCOPE)
    command = ["clients", "add", "--name", "bench", "--redirect-uri", REDIRECT_URI]
    command += ["--grant-type", "authorization_code", "--grant-type", "refresh_token"]
    command += ["--auth-method", "none", "--first-party"]
    return str(json.loads(mcpauth_cli(env, *command))["client_id"])


def setup_client_credentials(env: Mapping[str, str]) -> tuple[str, str]:
    """Add RESOURCE (the default resource, SCOPE its default scope) and a confidential
    client_credentials client allowed SCOPE; return its id and secret."""
    mcpauth_cli(
        env, "resources", "add", RESOURCE, "--scope", SCOPE, "--default-scope", SCOPE, "--default"
    )
    client = json.loads(
        mcpauth_cli(
            env, "clients", "add", "--name", "bench", "--grant-type", "client_credentials",
            "--scope", SCOPE,
        )
    )  # fmt: skip
    return str(client["client_id"]), str(client["client_secret"])


def serve_command(
    cpu: str, issuer: str, port: int, program: Sequence[str] = (MCPAUTH,)
) -> list[str]:
    """``program serve`` (default `mcpauth serve`) for ``issuer`` on ``port``, pinned to CPU
    ``cpu`` with taskset, logging warnings only."""
    return [
        "taskset", "-c", cpu, *program, "serve", "--issuer", issuer, "--port", str(port),
        "--log-level", "warning",
    ]  # fmt: skip


def spawn(
    command: Sequence[str], log: Path, *, env: Mapping[str, str], cwd: Path | None = None
) -> subprocess.Popen[bytes]:
    """Start ``command`` with its stdout and stderr written to the file ``log``."""
    with open(log, "wb") as handle:
        return subprocess.Popen(command, env=env, cwd=cwd, stdout=handle, stderr=subprocess.STDOUT)


def wait_ready(
    process: subprocess.Popen[bytes], url: str, log: Path, *, timeout: float = 30.0
) -> None:
    """Poll ``url`` until it answers (any status); exit with ``log``'s contents if ``process``
    ends first or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            httpx2.get(url, timeout=1)
            return
        except httpx2.TransportError:
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"{url} did not come up:\n{log.read_text()}") from None
            time.sleep(0.1)


def stop(process: subprocess.Popen[Any]) -> None:
    """Terminate ``process`` (if still running) and wait; kill it after 15 s."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds used so far by process ``pid`` (all its threads), from
    /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children_cpu_seconds() -> float:
    """User plus system CPU seconds used by this process's waited-for children so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


# --- wrk ---------------------------------------------------------------------------------------


def wrk_command(
    cpu: str,
    script: Path,
    url: str,
    *,
    connections: int,
    duration: float,
    timeout: str | None = "10s",
) -> list[str]:
    """One-thread wrk pinned to CPU ``cpu`` running ``script`` against ``url`` (``timeout``:
    wrk's --timeout, None for wrk's default)."""
    command = ["taskset", "-c", cpu, "wrk", "-t1", f"-c{connections}", f"-d{duration}s"]
    if timeout is not None:
        command += ["--timeout", timeout]
    return [*command, "-s", str(script), url]


def bench_line(returncode: int, stdout: str, stderr: str = "") -> dict[str, Any]:
    """The JSON object of the ``BENCH {...}`` line that the common.lua scripts print from
    done(); exit with wrk's output if wrk failed or printed none."""
    match = re.search(r"^BENCH (\{.*\})$", stdout, re.MULTILINE)
    if returncode != 0 or match is None:
        raise SystemExit(f"wrk failed ({returncode}):\n{stdout}\n{stderr}")
    result: dict[str, Any] = json.loads(match.group(1))
    return result


def measure(
    command: Sequence[str], env: Mapping[str, str], server_pid: int, *, counted: str = "ok"
) -> dict[str, Any]:
    """Run the wrk ``command`` once, measuring the server's and wrk's CPU time meanwhile.

    Returns the BENCH fields plus ``seconds`` (wrk's run time), ``rps`` (the BENCH field
    ``counted`` per second), ``load_cpu`` and ``server_cpu`` (CPU seconds per second) and
    ``server_cpu_ms`` (server CPU milliseconds per ``counted`` request)."""
    before_children = children_cpu_seconds()
    before_server = cpu_seconds(server_pid)
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    load_cpu = children_cpu_seconds() - before_children
    server_cpu = cpu_seconds(server_pid) - before_server
    result = bench_line(done.returncode, done.stdout, done.stderr)
    seconds = result["duration_us"] / 1e6
    result.update(
        seconds=seconds,
        rps=result[counted] / seconds,
        load_cpu=load_cpu / seconds,
        server_cpu=server_cpu / seconds,
        server_cpu_ms=server_cpu * 1000 / max(1, result[counted]),
    )
    return result


# --- reports -----------------------------------------------------------------------------------


def load_note(before: float, after: float) -> str:
    """The 1-minute load average before and after a run, and whether the machine was busy
    (more runnable processes than CPUs): then other work shared the cores with the run."""
    cpus = os.cpu_count() or 1
    note = f"load average before/after: {before:.1f}/{after:.1f}"
    if max(before, after) > cpus:
        note += (
            f" (busy: more runnable processes than its {cpus} CPUs, from other work; the rows "
            "were interleaved so that it fell on each alike; absolute figures are worse than on "
            "a quiet machine)"
        )
    return note


def median_range(
    results: Sequence[Mapping[str, Any]], key: str, scale: float = 1.0, digits: int = 0
) -> str:
    """The median of ``key`` times ``scale`` over ``results`` with ``digits`` decimals, then
    "(min-max)" when there is more than one result."""
    values = [r[key] * scale for r in results]
    median = statistics.median(values)
    spread = f" ({min(values):.{digits}f}-{max(values):.{digits}f})" if len(values) > 1 else ""
    return f"{median:.{digits}f}{spread}"


# --- authorization codes -----------------------------------------------------------------------


class _LoginForm(HTMLParser):
    """The first form's action and the inputs' names and values of an HTML page."""

    def __init__(self) -> None:
        super().__init__()
        self.action = ""
        self.fields: dict[str, str] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form" and not self.action:
            self.action = a.get("action", "")
        elif tag == "input" and a.get("name"):
            self.fields.setdefault(a["name"], a.get("value", ""))


def authorize_url(issuer: str, client_id: str) -> str:
    """The /authorize URL asking for a code for RESOURCE with the shared PKCE challenge."""
    params = {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": REDIRECT_URI,
        "code_challenge": CHALLENGE,
        "code_challenge_method": "S256",
        "state": "bench",
        "resource": RESOURCE,
    }
    return f"{issuer}/authorize?{urlencode(params)}"


def code_from(response: httpx2.Response) -> str:
    """The code of a 303 redirect to REDIRECT_URI; exit on anything else."""
    location: str = response.headers.get("location", "")
    if response.status_code != 303 or not location.startswith(REDIRECT_URI):
        raise SystemExit(f"expected a redirect with a code, got {response.status_code}: {location}")
    return parse_qs(urlsplit(location).query)["code"][0]


def sign_in(issuer: str, client_id: str) -> httpx2.Cookies:
    """Sign in once through the login form; the session cookie then yields codes directly
    (first-party client: no consent page)."""
    with httpx2.Client(timeout=30) as http:
        page = http.get(authorize_url(issuer, client_id))
        page = http.get(urljoin(issuer, page.headers["location"]))
        form = _LoginForm()
        form.feed(page.text)
        login = {**form.fields, "username": USER, "password": PASSWORD}
        done = http.post(urljoin(str(page.request.url), form.action), data=login)
        code_from(http.get(urljoin(issuer, done.headers["location"])))
        return http.cookies


async def mint_codes(
    issuer: str,
    client_id: str,
    cookies: httpx2.Cookies,
    count: int,
    *,
    parallel: int,
    budget: float | None = None,
) -> list[str]:
    """Up to ``count`` fresh codes, two requests each (`/authorize` → `/interaction/<id>` →
    redirect with the code), from ``parallel`` concurrent workers; with ``budget``, stop after
    that many seconds with the codes minted so far."""
    codes: list[str] = []
    deadline = None if budget is None else time.monotonic() + budget
    url = authorize_url(issuer, client_id)

    async def worker(http: httpx2.AsyncClient) -> None:
        while len(codes) < count and (deadline is None or time.monotonic() < deadline):
            started = await http.get(url)
            if "location" not in started.headers:
                raise SystemExit(f"/authorize: {started.status_code} {started.text[:300]}")
            codes.append(code_from(await http.get(urljoin(issuer, started.headers["location"]))))

    async with httpx2.AsyncClient(cookies=cookies, timeout=30) as http:
        await asyncio.gather(*(worker(http) for _ in range(parallel)))
    return codes


def code_bodies(client_id: str, codes: Sequence[str]) -> list[str]:
    """Form-encoded authorization_code token requests, one per code."""
    return [
        urlencode(
            {
                "grant_type": "authorization_code",
                "code": code,
                "redirect_uri": REDIRECT_URI,
                "code_verifier": VERIFIER,
                "client_id": client_id,
                "resource": RESOURCE,
            }
        )
        for code in codes
    ]


def refresh_bodies(client_id: str, tokens: Sequence[str]) -> list[str]:
    """Form-encoded refresh_token token requests, one per refresh token."""
    return [
        urlencode({"grant_type": "refresh_token", "refresh_token": t, "client_id": client_id})
        for t in tokens
    ]
