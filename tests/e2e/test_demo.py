"""`mcpauth demo` as a real process on 127.0.0.1: it starts the authorization server and the
protected demo MCP server, prints the demo user's password on stderr once both ports accept
connections, publishes RFC 9728 metadata naming the authorization server; the official SDK
client signs in as `demo` through the forms and calls `whoami`; `reset_counter` needs
`mcp:admin` and is refused with 403. A busy port is a one-line error with exit status 1, and
the admin command the banner prints reaches the running demo's database."""

from __future__ import annotations

import base64
import json
import os
import re
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx2
import pytest

from ..support import MCPAUTH, free_port, run_cli, stop, wait_for
from .test_sdk_oauth_client import (
    FormBrowser,
    Traffic,
    mcp_session,
    oauth_provider,
    scope_param,
    text,
)

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

PASSWORD_LINE = re.compile(r"^\s*sign in as\s+demo / (\S+)\s*$", re.MULTILINE)
BANNER_END = "Press Ctrl-C to stop."
ROOT = Path(__file__).resolve().parents[2]
TEST_BROWSER = f"{sys.executable} {ROOT / 'tests' / 'client' / 'browser.py'} %s"


def wait_for_banner(err_path: Path, process: subprocess.Popen[bytes], timeout: float = 30) -> str:
    """The demo's stderr once its banner is complete (at most ``timeout`` seconds)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = err_path.read_text(errors="replace")
        if BANNER_END in text:
            return text
        if process.poll() is not None:
            raise RuntimeError(f"the demo exited with {process.returncode}:\n{text}")
        time.sleep(0.01)
    raise TimeoutError(f"no banner within {timeout} s:\n{err_path.read_text(errors='replace')}")


def accepts(port: int) -> bool:
    """Whether 127.0.0.1:``port`` accepts a TCP connection right now (one attempt)."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    except OSError:
        return False
    return True


@dataclass
class Demo:
    issuer: str
    resource: str
    prm: str
    data_dir: Path
    stdout: str
    stderr: str
    env: dict[str, str]
    accepted_at_banner: tuple[bool, bool] = (False, False)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    """`mcpauth demo --data-dir … --auth-port … --mcp-port …`, its stdout and stderr kept apart,
    stopped (TERM, then KILL) at the end."""
    tmp_path = tmp_path_factory.mktemp("demo")
    auth_port, mcp_port = free_port(), free_port()
    data_dir = tmp_path / "data"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("MCPAUTH_")},
        "HOME": str(tmp_path),
        "XDG_DATA_HOME": str(tmp_path / "xdg"),
    }
    args = [MCPAUTH, "demo", "--data-dir", str(data_dir)]
    args += ["--auth-port", str(auth_port), "--mcp-port", str(mcp_port)]
    issuer = f"http://127.0.0.1:{auth_port}"
    resource = f"http://127.0.0.1:{mcp_port}/mcp"
    prm = f"http://127.0.0.1:{mcp_port}/.well-known/oauth-protected-resource/mcp"
    out_path, err_path = tmp_path / "stdout.log", tmp_path / "stderr.log"
    with out_path.open("wb") as out, err_path.open("wb") as err:
        process = subprocess.Popen(
            args, env=env, cwd=tmp_path, stdout=out, stderr=err, start_new_session=True
        )
        try:
            stderr = wait_for_banner(err_path, process)
            accepted = (accepts(auth_port), accepts(mcp_port))  # at once, no retry
            try:
                wait_for(prm, timeout=30, process=process)
                wait_for(f"{issuer}/health", timeout=30, process=process)
            except (RuntimeError, TimeoutError) as exc:
                raise RuntimeError(f"{exc}\n{err_path.read_text(errors='replace')}") from exc
            yield Demo(
                issuer=issuer,
                resource=resource,
                prm=prm,
                data_dir=data_dir,
                stdout=out_path.read_text(),
                stderr=stderr,
                env=env,
                accepted_at_banner=accepted,
            )
        finally:
            stop(process)


def demo_password(demo: Demo) -> str:
    found = PASSWORD_LINE.search(demo.stderr)
    assert found, f"no password in the banner:\n{demo.stderr}"
    return found.group(1)


def demo_user_id(demo: Demo) -> str:
    database = f"sqlite:///{demo.data_dir / 'mcpauth.db'}"
    listed = run_cli(["users", "list", "--database", database], env=demo.env)
    assert listed.returncode == 0, listed.stderr
    return next(str(u["id"]) for u in json.loads(listed.stdout) if u["username"] == "demo")


def test_the_demo_banner_prints_the_demo_password_and_how_to_connect_on_stderr(
    demo: Demo,
) -> None:
    password = demo_password(demo)
    assert password == (demo.data_dir / "demo-password").read_text().strip()
    assert password not in demo.stdout
    assert f"claude mcp add --transport http mcpauth-demo {demo.resource}" in demo.stderr
    assert demo.issuer in demo.stderr
    assert (demo.data_dir / "demo-password").stat().st_mode & 0o077 == 0


def test_rs01_rs03_the_demo_server_publishes_metadata_naming_its_authorization_server(
    demo: Demo,
) -> None:
    response = httpx2.get(demo.prm, timeout=10)
    assert response.status_code == 200
    metadata = response.json()
    assert metadata["resource"] == demo.resource
    assert metadata["authorization_servers"] == [demo.issuer]
    assert "offline_access" not in metadata.get("scopes_supported", [])
    issuer = httpx2.get(f"{demo.issuer}/.well-known/oauth-authorization-server", timeout=10)
    assert issuer.json()["issuer"] == demo.issuer
    anonymous = httpx2.post(demo.resource, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
    assert anonymous.status_code == 401
    assert f'resource_metadata="{demo.prm}"' in anonymous.headers["www-authenticate"]


async def test_rs12_rs14_signed_in_as_demo_whoami_answers_and_reset_counter_is_403_for_mcp_admin(
    demo: Demo,
) -> None:
    browser = FormBrowser(username="demo", password=demo_password(demo))
    traffic = Traffic()
    provider = oauth_provider(demo.resource, browser)
    try:
        async with mcp_session(demo.resource, provider, traffic) as session:
            tools = {tool.name for tool in (await session.list_tools()).tools}
            whoami = text(await session.call_tool("whoami", {}))
    finally:
        await browser.aclose()

    assert {"whoami", "reset_counter"} <= tools
    assert [trip.pages for trip in browser.authorizations] == [["login", "consent"]]
    client_id = provider.context.client_info.client_id  # type: ignore[union-attr]
    assert whoami == f"subject={demo_user_id(demo)} client={client_id} scopes=mcp:tools"

    # the same token on reset_counter: refused by the middleware before the tool runs
    token = provider.context.current_tokens.access_token  # type: ignore[union-attr]
    headers = {
        "Authorization": f"Bearer {token}",
        "Accept": "application/json, text/event-stream",
    }
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "e2e", "version": "1"},
        },
    }
    call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "reset_counter", "arguments": {}},
    }
    async with httpx2.AsyncClient(timeout=30, headers=headers) as http:
        opened = await http.post(demo.resource, json=initialize)
        assert opened.status_code == 200, opened.text
        session_headers = {
            "Mcp-Session-Id": opened.headers["mcp-session-id"],
            "MCP-Protocol-Version": "2025-06-18",
        }
        refused = await http.post(demo.resource, json=call, headers=session_headers)
    assert refused.status_code == 403
    challenge = refused.headers["www-authenticate"]
    assert challenge.startswith('Bearer error="insufficient_scope"')
    assert "mcp:admin" in scope_param(challenge)
    assert scope_param(challenge) == {"mcp:admin", "mcp:tools"}  # every scope the call needs
    assert f'resource_metadata="{demo.prm}"' in challenge
    assert "counter reset" not in refused.text


def test_the_banner_appears_only_once_both_ports_accept_connections(demo: Demo) -> None:
    # the fixture connected to both ports the moment the banner was complete, without retrying
    assert demo.accepted_at_banner == (True, True)


@pytest.mark.parametrize("busy", ["--auth-port", "--mcp-port"])
def test_a_busy_port_ends_the_demo_with_a_one_line_message_naming_it_and_exit_status_1(
    busy: str, tmp_path: Path
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        ports = {"--auth-port": free_port(), "--mcp-port": free_port(), busy: port}
        options = [str(part) for pair in ports.items() for part in pair]
        done = run_cli(
            ["demo", "--data-dir", str(tmp_path / "data"), *options],
            env={"HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path / "xdg")},
            cwd=tmp_path,
        )
    assert done.returncode == 1
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"mcpauth demo: port {port} ")
    assert "already in use" in lines[0]
    assert busy in lines[0]  # how to choose another
    assert not (tmp_path / "data").exists()  # nothing written


def test_the_demo_refuses_port_0_and_one_port_for_both_servers(tmp_path: Path) -> None:
    zero = run_cli(["demo", "--data-dir", str(tmp_path / "d"), "--auth-port", "0"], cwd=tmp_path)
    assert zero.returncode == 2
    assert "not a port number" in zero.stderr
    port = str(free_port())
    same = run_cli(
        ["demo", "--data-dir", str(tmp_path / "d"), "--auth-port", port, "--mcp-port", port],
        cwd=tmp_path,
    )
    assert same.returncode == 1
    assert same.stderr.strip() == f"mcpauth demo: --auth-port and --mcp-port are both {port}"


def printed_admin_command(demo: Demo) -> list[str]:
    lines = demo.stderr.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("Add a user"))
    return shlex.split(lines[at + 1])


def test_the_admin_command_the_banner_prints_adds_a_user_who_can_sign_in_to_the_running_demo(
    demo: Demo, tmp_path: Path
) -> None:
    command = printed_admin_command(demo)
    database = f"sqlite:///{demo.data_dir.resolve() / 'mcpauth.db'}"
    assert command[1:] == ["users", "add", "bob", "--password-stdin", "--database", database]
    assert database.startswith("sqlite:////")  # an absolute path: works from any directory
    added = subprocess.run(
        command,
        input="bob's long passphrase\n",
        capture_output=True,
        text=True,
        env={**os.environ, **demo.env},
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    assert added.returncode == 0, added.stderr

    store = tmp_path / "client.json"
    browser = {
        **demo.env,
        "BROWSER": TEST_BROWSER,
        "MCPAUTH_TEST_USERNAME": "bob",
        "MCPAUTH_TEST_PASSWORD": "bob's long passphrase",
    }
    login = run_cli(["login", demo.resource, "--store", str(store), "--timeout", "30"], env=browser)
    assert login.returncode == 0, login.stderr
    token = run_cli(["token", demo.resource, "--store", str(store)], env=demo.env)
    assert token.returncode == 0, token.stderr
    claims = json.loads(base64url(token.stdout.strip().split(".")[1]))
    listed = run_cli(["users", "list", "--database", database], env=demo.env)
    bob = next(u for u in json.loads(listed.stdout) if u["username"] == "bob")
    assert claims["sub"] == str(bob["id"])


def base64url(segment: str) -> bytes:
    return base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))


def test_without_the_mcp_sdk_the_demo_says_which_extra_to_install_in_one_line(
    tmp_path: Path,
) -> None:
    # the MCP SDK made unimportable, as in an install without the demo extra
    code = (
        "import sys; sys.modules['mcp'] = None\n"
        "from mcpauth.cli import main\n"
        "sys.exit(main(['demo', '--data-dir', 'data']))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr == "mcpauth demo: needs mcp: pip install 'mcpauth-kit[demo]'\n"
    assert not (tmp_path / "data").exists()
