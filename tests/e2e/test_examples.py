"""examples/ run as a newcomer would run them (examples/README.md): the embedded authorization
server and the protected MCP server as real processes on free loopback ports, then the machine
agent, which must get a token and call the tool. Also: the protected server refuses a call
without a token, and the command block in examples/README.md is the one run here."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import httpx2

from ..support import free_port, running

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
PYTHON = sys.executable


def test_the_three_examples_work_together(tmp_path: Path) -> None:
    auth_port, mcp_port = free_port(), free_port()
    issuer = f"http://127.0.0.1:{auth_port}"
    url = f"http://127.0.0.1:{mcp_port}/mcp"
    credentials = tmp_path / "agent.json"
    auth_server = [
        PYTHON, str(EXAMPLES / "embedded_auth_server.py"), "--port", str(auth_port),
        "--resource", url, "--credentials", str(credentials), "--data", str(tmp_path),
    ]  # fmt: skip
    mcp_server = [
        PYTHON, str(EXAMPLES / "protected_server.py"), "--port", str(mcp_port), "--issuer", issuer
    ]  # fmt: skip
    with (
        running(auth_server, ready_url=f"{issuer}/health", cwd=tmp_path),
        running(mcp_server, ready_url=url, cwd=tmp_path),
    ):
        assert credentials.stat().st_mode & 0o777 == 0o600
        client_id = json.loads(credentials.read_text())["client_id"]
        anonymous = httpx2.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
        assert anonymous.status_code == 401
        assert "resource_metadata=" in anonymous.headers["www-authenticate"]
        agent = subprocess.run(
            [PYTHON, str(EXAMPLES / "machine_agent.py"), "--url", url,
             "--credentials", str(credentials)],
            capture_output=True, text=True, timeout=120, cwd=tmp_path,
        )  # fmt: skip
    assert agent.returncode == 0, agent.stderr
    assert agent.stdout.strip() == f"{client_id}: buy milk; write the report"


def test_the_readme_runs_the_same_commands() -> None:
    readme = (EXAMPLES / "README.md").read_text()
    block = re.search(r"```bash\n(.*?)```", readme, re.S)
    assert block is not None
    commands = block.group(1)
    for name in ("embedded_auth_server.py", "protected_server.py", "machine_agent.py"):
        assert f"examples/{name}" in commands
        assert (EXAMPLES / name).exists()


def test_the_gateway_calls_the_notes_server_as_its_caller(tmp_path: Path) -> None:
    """examples/gateway_server.py: the agent calls the gateway; the gateway's tool exchanges
    the agent's token (RFC 8693) and calls the notes server with the new one; the notes
    server sees the gateway acting for the agent, and never the agent's own token."""
    auth_port, notes_port, gateway_port = free_port(), free_port(), free_port()
    issuer = f"http://127.0.0.1:{auth_port}"
    notes = f"http://127.0.0.1:{notes_port}/mcp"
    gateway = f"http://127.0.0.1:{gateway_port}/mcp"
    agent_file, gateway_file = tmp_path / "agent.json", tmp_path / "gateway.json"
    auth_server = [
        PYTHON, str(EXAMPLES / "embedded_auth_server.py"), "--port", str(auth_port),
        "--resource", notes, "--credentials", str(agent_file), "--data", str(tmp_path),
        "--gateway", gateway, "--gateway-credentials", str(gateway_file),
    ]  # fmt: skip
    notes_server = [
        PYTHON, str(EXAMPLES / "protected_server.py"), "--port", str(notes_port),
        "--issuer", issuer,
    ]  # fmt: skip
    gateway_server = [
        PYTHON, str(EXAMPLES / "gateway_server.py"), "--port", str(gateway_port),
        "--issuer", issuer, "--downstream", notes, "--credentials", str(gateway_file),
    ]  # fmt: skip
    with (
        running(auth_server, ready_url=f"{issuer}/health", cwd=tmp_path),
        running(notes_server, ready_url=notes, cwd=tmp_path),
        running(gateway_server, ready_url=gateway, cwd=tmp_path),
    ):
        assert gateway_file.stat().st_mode & 0o777 == 0o600
        gateway_id = json.loads(gateway_file.read_text())["client_id"]
        agent = subprocess.run(
            [PYTHON, str(EXAMPLES / "machine_agent.py"), "--url", gateway,
             "--credentials", str(agent_file), "--tool", "notes_elsewhere",
             "--scope", "gateway:use"],
            capture_output=True, text=True, timeout=120, cwd=tmp_path,
        )  # fmt: skip
        # the agent's own token is for the gateway only: the notes server refuses it
        direct = subprocess.run(
            [PYTHON, str(EXAMPLES / "machine_agent.py"), "--url", notes,
             "--credentials", str(agent_file), "--scope", "gateway:use"],
            capture_output=True, text=True, timeout=120, cwd=tmp_path,
        )  # fmt: skip
    assert agent.returncode == 0, agent.stderr
    # the notes server names the client acting (the gateway), as the exchanged token says
    assert agent.stdout.strip() == f"{gateway_id}: buy milk; write the report"
    assert direct.returncode != 0
