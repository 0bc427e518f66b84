"""The README's blocks, run as a newcomer would: ``make run`` (with the documented
``AUTH_PORT``/``MCP_PORT``) in a folder whose ``.venv`` is this test environment, then the
shell and Python blocks against that demo. The only change to a block is its loopback ports
(``tests.readme.on_ports``), so that tests run on free ports; the browser sign-in is done by
``tests/client/browser.py`` as ``$BROWSER``."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest

from ..readme import ROOT, on_ports, readme_block
from ..support import free_port, running, stop
from .test_demo import BANNER_END, PASSWORD_LINE, base64url, wait_for_banner

pytestmark = pytest.mark.e2e

BROWSER_SCRIPT = ROOT / "tests" / "client" / "browser.py"


@dataclass
class Demo:
    folder: Path  # the "clone": .venv, pyproject.toml, .mcpauth-demo/
    auth_port: int
    mcp_port: int
    password: str
    env: dict[str, str]

    @property
    def issuer(self) -> str:
        return f"http://127.0.0.1:{self.auth_port}"

    @property
    def resource(self) -> str:
        return f"http://127.0.0.1:{self.mcp_port}/mcp"

    def ports(self, more: dict[int, int] | None = None) -> dict[int, int]:
        """The README's ports (9000, 8000 and ``more``) mapped to this test's."""
        return {9000: self.auth_port, 8000: self.mcp_port} | (more or {})

    def browser_env(self, state: Path, browser: str | None = None) -> dict[str, str]:
        """The environment with a stand-in browser that signs in as ``demo`` and approves."""
        return self.env | {
            "XDG_STATE_HOME": str(state),
            "BROWSER": browser or f"{sys.executable} {BROWSER_SCRIPT} %s",
            "MCPAUTH_TEST_USERNAME": "demo",
            "MCPAUTH_TEST_PASSWORD": self.password,
        }

    def bash(self, script: str, env: dict[str, str], stdin: str | None = None) -> str:
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=self.folder,
            env=env,
            input=stdin,
            capture_output=True,
            text=True,
            # a bound, not a measure: the admin block starts twelve `mcpauth` processes, a
            # second of CPU each, which a loaded 2-core machine stretched past 120 s once
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, (
            f"{script}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
        )
        return done.stdout

    def mcpauth(
        self, *args: str, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.folder / ".venv" / "bin" / "mcpauth"), *args],
            cwd=self.folder,
            env=env or self.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def demo_user_id(self) -> str:
        database = f"sqlite:///{self.folder / '.mcpauth-demo' / 'mcpauth.db'}"
        users = json.loads(self.mcpauth("users", "list", "--database", database).stdout)
        return next(str(u["id"]) for u in users if u["username"] == "demo")


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    """The README's ``make run``, with ``AUTH_PORT``/``MCP_PORT`` on free ports, in a folder
    that looks like a clone whose ``.venv`` is installed (``STAMP`` points at a fresh file so
    that make installs nothing)."""
    folder = tmp_path_factory.mktemp("clone")
    (folder / ".venv").symlink_to(sys.prefix)
    (folder / "pyproject.toml").symlink_to(ROOT / "pyproject.toml")
    stamp = folder / "installed.stamp"
    stamp.touch()
    auth_port, mcp_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCPAUTH_")} | {
        "HOME": str(folder),
        "XDG_DATA_HOME": str(folder / "xdg-data"),
        "XDG_STATE_HOME": str(folder / "xdg-state"),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    first, second = readme_block("two-commands").text.splitlines()
    assert first.split("#")[0].split() == ["make", "run"]
    assert second.split("#")[0].split() == ["make", "test"]
    args = ["make", "-f", str(ROOT / "Makefile"), "run", f"STAMP={stamp}"]
    args += [f"AUTH_PORT={auth_port}", f"MCP_PORT={mcp_port}"]
    err_path = folder / "make-run.log"
    with err_path.open("wb") as err:
        process = subprocess.Popen(
            args, cwd=folder, env=env, stdout=err, stderr=err, start_new_session=True
        )
        try:
            banner = wait_for_banner(err_path, process)
            found = PASSWORD_LINE.search(banner)
            assert found, banner
            yield Demo(folder, auth_port, mcp_port, found.group(1), env)
        finally:
            stop(process)


def call_tool(resource: str, token: str, name: str, arguments: dict[str, Any]) -> httpx2.Response:
    """A complete MCP exchange over streamable HTTP: initialize, initialized, tools/call."""
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"}
    with httpx2.Client(timeout=30, headers=headers) as http:
        opened = http.post(
            resource,
            json={
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "readme", "version": "1"},
                },
            },
        )
        assert opened.status_code == 200, opened.text
        session = {
            "Mcp-Session-Id": opened.headers["mcp-session-id"],
            "MCP-Protocol-Version": "2025-06-18",
        }
        http.post(
            resource,
            json={"jsonrpc": "2.0", "method": "notifications/initialized"},
            headers=session,
        )
        call = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": name, "arguments": arguments},
        }
        return http.post(resource, json=call, headers=session)


def tool_text(response: httpx2.Response) -> str:
    body = response.text
    if "text/event-stream" in response.headers.get("content-type", ""):
        body = next(line[5:] for line in body.splitlines() if line.startswith("data:"))
    return str(json.loads(body)["result"]["content"][0]["text"])


def claims(token: str) -> dict[str, Any]:
    return dict(json.loads(base64url(token.split(".")[1])))


def test_make_run_starts_the_demo_on_the_ports_given_and_make_test_runs_every_check(
    demo: Demo,
) -> None:
    assert httpx2.get(f"{demo.issuer}/health", timeout=10).status_code == 200
    assert httpx2.post(demo.resource, json={}, timeout=10).status_code == 401
    banner = (demo.folder / "make-run.log").read_text()
    assert f"--auth-port {demo.auth_port} --mcp-port {demo.mcp_port}" in banner  # make's echo
    assert BANNER_END in banner
    planned = subprocess.run(
        [
            "make",
            "-n",
            "-f",
            str(ROOT / "Makefile"),
            "test",
            f"STAMP={demo.folder / 'installed.stamp'}",
        ],
        cwd=demo.folder,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    # every check, the tests in parallel (pytest-xdist), the PostgreSQL lane beside SQLite;
    # coverage is `make coverage`'s, not the inner loop's
    for check in ("ruff check .", "ruff format --check .", "mypy", "bin/pytest -n"):
        assert check in planned
    assert "MCPAUTH_TEST_DATABASE=sqlite,postgresql" in planned
    assert "--cov" not in planned


def test_the_shell_blocks_log_in_print_a_token_step_up_to_mcp_admin_and_log_out(
    demo: Demo, tmp_path: Path
) -> None:
    env = demo.browser_env(tmp_path / "state")
    login = on_ports(readme_block("shell-login").text, demo.ports())
    demo.bash(login + 'printf "%s" "$TOKEN" > token.txt\n', env)
    token = (demo.folder / "token.txt").read_text()
    assert claims(token)["scope"].split() == ["mcp:tools"]
    assert tool_text(call_tool(demo.resource, token, "whoami", {})).startswith(
        f"subject={demo.demo_user_id()} "
    )
    refused = call_tool(demo.resource, token, "reset_counter", {})
    assert refused.status_code == 403
    assert 'error="insufficient_scope"' in refused.headers["www-authenticate"]

    # where the README says the tokens are: $XDG_STATE_HOME/mcpauth/client.json, 0600 in 0700
    store = tmp_path / "state" / "mcpauth" / "client.json"
    assert stat.S_IMODE(store.stat().st_mode) == 0o600
    assert stat.S_IMODE(store.parent.stat().st_mode) == 0o700
    assert token in store.read_text()

    step_up, logout = on_ports(readme_block("shell-step-up").text, demo.ports()).splitlines()
    demo.bash(step_up, env)
    wider = demo.mcpauth("token", demo.resource, env=env)
    assert wider.returncode == 0, wider.stderr
    assert set(claims(wider.stdout.strip())["scope"].split()) == {"mcp:tools", "mcp:admin"}
    allowed = call_tool(demo.resource, wider.stdout.strip(), "reset_counter", {})
    assert tool_text(allowed) == "counter reset"

    demo.bash(logout, env)
    gone = demo.mcpauth("token", demo.resource, env=env)
    assert gone.returncode == 3  # login required
    assert "login" in gone.stderr


def test_the_admin_block_runs_against_a_database_of_its_own(demo: Demo, tmp_path: Path) -> None:
    env = demo.env | {"MCPAUTH_DATABASE_URL": f"sqlite:///{tmp_path / 'admin.db'}"}
    demo.bash(readme_block("admin").text, env, stdin="alice's long passphrase\n")
    users = json.loads(demo.mcpauth("users", "list", env=env).stdout)
    assert [u["username"] for u in users] == ["alice"]
    clients = {
        c["client_name"] for c in json.loads(demo.mcpauth("clients", "list", env=env).stdout)
    }
    assert {"CI bot", "Our app"} <= clients


def test_the_wrapping_example_protects_its_tools_with_tokens_from_the_demo_server(
    demo: Demo, tmp_path: Path
) -> None:
    port = free_port()
    ports = demo.ports({8001: port})
    demo.bash(on_ports(readme_block("wrap-register").text, ports), demo.env)
    server = demo.folder / "files_server.py"
    server.write_text(on_ports(readme_block("wrap-server").text, ports))
    resource = f"http://127.0.0.1:{port}/mcp"
    prm = f"http://127.0.0.1:{port}/.well-known/oauth-protected-resource/mcp"
    with running([sys.executable, str(server)], ready_url=prm, env=demo.env, cwd=tmp_path):
        metadata = httpx2.get(prm, timeout=10).json()
        assert metadata["authorization_servers"] == [demo.issuer]
        env = demo.browser_env(tmp_path / "state")
        assert demo.mcpauth("login", resource, "--timeout", "30", env=env).returncode == 0
        token = demo.mcpauth("token", resource, env=env).stdout.strip()
        assert claims(token)["aud"] in (resource, [resource])
        read = call_tool(resource, token, "read_file", {"path": "notes.txt"})
        assert tool_text(read) == "the contents of notes.txt"
        refused = call_tool(resource, token, "delete_file", {"path": "notes.txt"})
        assert refused.status_code == 403
        assert "files:write" in refused.headers["www-authenticate"]


def test_the_proxy_example_listens_on_its_port_and_challenges_for_a_token_from_the_demo(
    demo: Demo, tmp_path: Path
) -> None:
    port = free_port()
    command = on_ports(readme_block("proxy-http").text, demo.ports({8002: port}))
    assert f"--port {port}" in command
    prm = f"http://127.0.0.1:{port}/.well-known/oauth-protected-resource/mcp"
    with running(["bash", "-c", command], ready_url=prm, env=demo.env, cwd=tmp_path):
        assert httpx2.get(prm, timeout=10).json()["authorization_servers"] == [demo.issuer]
        anonymous = httpx2.post(f"http://127.0.0.1:{port}/mcp", json={}, timeout=10)
        assert anonymous.status_code == 401
        assert f'resource_metadata="{prm}"' in anonymous.headers["www-authenticate"]


def run_client_helper(demo: Demo, env: dict[str, str], tmp_path: Path) -> str:
    script = tmp_path / "agent.py"
    script.write_text(on_ports(readme_block("client-helper").text, demo.ports()))
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.strip()


def registered_clients(demo: Demo) -> dict[str, str]:
    database = f"sqlite:///{demo.folder / '.mcpauth-demo' / 'mcpauth.db'}"
    listed = json.loads(demo.mcpauth("clients", "list", "--database", database).stdout)
    return {str(c["client_id"]): str(c["client_name"]) for c in listed}


def test_the_client_helper_example_signs_in_registers_as_its_client_name_and_calls_whoami(
    demo: Demo, tmp_path: Path
) -> None:
    printed = run_client_helper(demo, demo.browser_env(tmp_path / "state"), tmp_path)
    found = re.fullmatch(r"subject=(\S+) client=(\S+) scopes=mcp:tools", printed)
    assert found, printed
    assert found.group(1) == demo.demo_user_id()
    assert registered_clients(demo)[found.group(2)] == "My agent"


def test_after_mcpauth_login_the_client_helper_uses_its_registration_and_tokens_without_a_browser(
    demo: Demo, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    demo.bash(on_ports(readme_block("shell-login").text, demo.ports()), demo.browser_env(state))
    cli_client = json.loads((state / "mcpauth" / "client.json").read_text())["clients"]
    (cli_client_id,) = [c["client_id"] for c in cli_client.values()]
    opened = tmp_path / "browser-was-opened"
    recorder = tmp_path / "browser.sh"
    recorder.write_text(f'#!/bin/sh\ntouch {opened}\nexec {sys.executable} {BROWSER_SCRIPT} "$1"\n')
    recorder.chmod(0o700)
    printed = run_client_helper(demo, demo.browser_env(state, f"{recorder} %s"), tmp_path)
    assert printed.endswith(f" client={cli_client_id} scopes=mcp:tools")
    assert not opened.exists()  # no new sign-in
    assert registered_clients(demo)[cli_client_id] == "mcpauth"  # client_name was not used
