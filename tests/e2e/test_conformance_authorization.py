"""The official MCP conformance suite's `authorization` command against `mcpauth serve`,
done-when 2). The suite fetches the metadata, prints an authorization URL and waits for the code
on its own callback server; this test plays the user's browser: it opens the URL, signs in and
approves through the HTML forms, and delivers the redirect to the suite's callback. The suite
then redeems the code (PKCE, `resource`) and checks the token response.

Node 22 and the suite are installed by scripts/conformance-authorization.sh (idempotent). The
test skips only when npm itself is missing; in CI it runs."""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from ..oauth import query
from ..support import free_port
from .test_authorization_flow import RESOURCE, AuthServer, Browser, auth_server

pytestmark = [pytest.mark.e2e, pytest.mark.conformance]

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "conformance-authorization.sh"
RESULTS = ROOT / "results" / "conformance-authorization"
AUTHORIZE_URL = re.compile(r"^https?://\S+\?response_type=code\S*$")
SCENARIOS = {"authorization-server-metadata-endpoint", "authorization-code-grant"}
# the checks 0.2.0-alpha.12 makes; a WARNING (e.g. CIMD not advertised) fails this test even though
# it does not change the suite's exit code
CHECKS = {
    "authorization-server-metadata",
    "authorization-server-metadata-cimd",
    "authorization-code-grant",
}


@pytest.fixture(scope="module")
def conformance() -> Path:
    """The suite's binary, installed on first use."""
    if shutil.which("npm") is None:
        pytest.skip("npm is not installed: cannot install Node 22 and the conformance suite")
    done = subprocess.run(
        ["bash", str(SCRIPT), "install"],
        capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL, check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"installing the conformance suite failed:\n{done.stderr}"
    return Path(done.stdout.strip().splitlines()[-1])


class Output:
    """The suite's stdout, read on a thread so that waiting for a line has a deadline."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        self._thread = threading.Thread(target=self._pump, args=(process,), daemon=True)
        self._thread.start()

    def _pump(self, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def wait_for(self, pattern: re.Pattern[str], timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                break
            self.seen.append(line)
            if pattern.match(line.strip()):
                return line.strip()
        raise AssertionError(
            f"no line matching {pattern.pattern}; output:\n" + "\n".join(self.seen)
        )

    def rest(self, timeout: float) -> str:
        self._thread.join(timeout)
        while not self.lines.empty():
            line = self.lines.get_nowait()
            if line is not None:
                self.seen.append(line)
        return "\n".join(self.seen)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[AuthServer]:
    with auth_server(tmp_path) as running_server:
        yield running_server


def _checks(output_dir: Path) -> dict[str, list[dict[str, Any]]]:
    """checks.json of every scenario the suite wrote, by scenario name."""
    found: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(output_dir.glob("*/checks.json")):
        for scenario in SCENARIOS:
            if path.parent.name.startswith(f"authorization-server-{scenario}-"):
                found[scenario] = json.loads(path.read_text())
    return found


def _keep(output_dir: Path, transcript: str) -> None:
    """Leave the suite's results where CI can pick them up."""
    shutil.rmtree(RESULTS, ignore_errors=True)
    shutil.copytree(output_dir, RESULTS)
    (RESULTS / "output.txt").write_text(transcript)


def test_the_conformance_suite_authorization_command_passes_every_check(
    conformance: Path, server: AuthServer, tmp_path: Path
) -> None:
    callback_port = free_port()
    redirect_uri = f"http://127.0.0.1:{callback_port}/callback"
    client = server.add_client(
        "--name", "conformance", "--redirect-uri", redirect_uri, "--auth-method", "none",
    )  # fmt: skip
    assert "client_secret" not in client
    # the suite sends only client_id whenever the server lists `none`; a public client is what it
    # exercises here
    assert "none" in server.metadata["token_endpoint_auth_methods_supported"]
    output_dir = tmp_path / "conformance-results"
    env = {
        **os.environ,
        "PATH": f"{ROOT / '.node22' / 'node_modules' / '.bin'}{os.pathsep}{os.environ['PATH']}",
        "NO_COLOR": "1",
        "CI": "true",
    }
    args = [
        str(conformance), "authorization",
        "--url", server.issuer,  # byte for byte the issuer (the suite compares it exactly)
        "--client-id", client["client_id"],
        "--port", str(callback_port),
        "--resource", RESOURCE,
        "--output-dir", str(output_dir),
    ]  # fmt: skip
    process = subprocess.Popen(
        args, env=env, cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        output = Output(process)
        url = output.wait_for(AUTHORIZE_URL, timeout=60)
        params = query(url)
        assert params["client_id"] == client["client_id"]
        assert params["redirect_uri"] == redirect_uri
        assert params["resource"] == RESOURCE
        assert params["code_challenge_method"] == "S256"

        with Browser(server.issuer) as browser:
            response, shown = browser.authorize(url)
            assert shown == ["login", "consent"]
            location = response.headers["location"]
            assert location.startswith(redirect_uri + "?")
            assert "code" in query(location)
            # the browser lands on the suite's callback server with the code
            delivered = httpx2.get(location, timeout=30)
            assert delivered.status_code == 200, delivered.text

        returncode = process.wait(timeout=120)
        transcript = output.rest(timeout=10)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)

    _keep(output_dir, transcript)
    checks = _checks(output_dir)
    assert set(checks) == SCENARIOS, transcript
    summary = {c["id"]: (c["status"], c.get("errorMessage")) for cs in checks.values() for c in cs}
    assert returncode == 0, f"{summary}\n{transcript}"
    assert set(summary) >= CHECKS, summary
    assert {check_id: status for check_id, (status, _) in summary.items()} == dict.fromkeys(
        summary, "SUCCESS"
    ), summary
