"""The device grant end to end with real processes: `mcpauth serve`, an MCP server behind the
middleware and `mcpauth login URL --device`, a person approving over HTTP (the same in Chromium:
tests/browser/test_device_flow.py), then the token at the MCP server."""

from __future__ import annotations

import os
import re
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urljoin

import httpx2
import pytest

from tests.client.test_e2e_server import PASSWORD, ROOT, USER, Stack, cli, stack  # noqa: F401
from tests.oauth import forms
from tests.support import MCPAUTH

pytestmark = [pytest.mark.e2e]

SHOWN = re.compile(r"open (?P<url>\S+) and type the code (?P<code>[A-Z]{4}-[A-Z]{4})")


class DeviceLogin:
    """`mcpauth login URL --device` running; its stderr read as it comes."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process
        self.lines: list[str] = []
        self._shown = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line)
            if SHOWN.search(line):
                self._shown.set()

    def shown(self, timeout: float = 30) -> tuple[str, str]:
        """The verification URL and the user code the command printed."""
        assert self._shown.wait(timeout), "".join(self.lines)
        found = next(m for m in map(SHOWN.search, self.lines) if m)
        return found["url"], found["code"]

    def finish(self, timeout: float = 60) -> int:
        code = self.process.wait(timeout=timeout)
        self._reader.join(timeout=5)
        return code

    @property
    def output(self) -> str:
        return "".join(self.lines)


@contextmanager
def device_login(url: str, env: dict[str, str], *extra: str) -> Iterator[DeviceLogin]:
    process = subprocess.Popen(
        [MCPAUTH, "login", url, "--device", "--timeout", "120", *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **env, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
    )
    try:
        yield DeviceLogin(process)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)


def works_at_the_mcp_server(resource: str, env: dict[str, str]) -> None:
    """`mcpauth token` prints the stored token, and the protected MCP server takes it."""
    token = cli("token", resource, env=env)
    assert token.returncode == 0, token.stderr
    headers = {
        "authorization": f"Bearer {token.stdout.strip()}",
        "accept": "application/json, text/event-stream",
    }
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "device e2e", "version": "1"},
        },
    }
    answered = httpx2.post(resource, json=initialize, headers=headers, timeout=20)
    assert answered.status_code == 200, answered.text
    assert "serverInfo" in answered.text
    anonymous = httpx2.post(resource, json=initialize, headers={"accept": headers["accept"]})
    assert anonymous.status_code == 401


def person_approves(url: str, code: str, action: str = "approve") -> httpx2.Response:
    """A person, over plain HTTP: the code, the sign-in, the decision."""
    with httpx2.Client(follow_redirects=True, timeout=20) as http:
        page = http.get(url)
        form = forms(page.text)[0]
        page = http.post(urljoin(url, form.action), data={**form.fields, "user_code": code})
        form = forms(page.text)[0]
        page = http.post(
            urljoin(str(page.url), form.action),
            data={**form.fields, "username": USER, "password": PASSWORD},
        )
        form = forms(page.text)[0]
        assert form.buttons["action"] == ["deny", "approve"]  # the consent page
        return http.post(
            urljoin(str(page.url), form.action), data={**form.fields, "action": action}
        )


def test_login_with_the_device_grant_and_use_the_token(stack: Stack) -> None:  # noqa: F811
    with device_login(stack.resource, stack.env) as login:
        url, code = login.shown()
        assert url == f"{stack.issuer}/device"
        done = person_approves(url, code)
        assert done.status_code == 200
        assert "Device connected" in done.text
        assert login.finish() == 0, login.output
    assert "Logged in" in login.output
    works_at_the_mcp_server(stack.resource, stack.env)


def test_a_denied_device_login_exits_with_authorization_failed(stack: Stack) -> None:  # noqa: F811
    with device_login(stack.resource, stack.env) as login:
        url, code = login.shown()
        assert person_approves(url, code, action="deny").status_code == 200
        assert login.finish() == 4, login.output  # EXIT_AUTHORIZATION_FAILED
    assert "denied" in login.output
    assert cli("token", stack.resource, env=stack.env).returncode == 3  # nothing stored
