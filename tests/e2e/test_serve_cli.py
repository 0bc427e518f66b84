"""End to end: `mcpauth serve` in an empty directory starts on the embedded SQLite default;
discovery answers with the configured issuer byte for byte; `mcpauth keys rotate` from another
process is published by the running server."""

from __future__ import annotations

import time
from pathlib import Path

import httpx2
import pytest

from ..support import MCPAUTH, free_port, run_cli, running

pytestmark = pytest.mark.e2e


def _env(tmp_path: Path) -> dict[str, str]:
    # the per-user data directory (platformdirs) is redirected into the test's folder
    return {"XDG_DATA_HOME": str(tmp_path / "data"), "HOME": str(tmp_path)}


@pytest.mark.parametrize("path", ["", "/tenant1"])
def test_serve_starts_on_sqlite_and_serves_discovery(tmp_path: Path, path: str) -> None:
    port = free_port()
    issuer = f"http://127.0.0.1:{port}{path}"
    env = _env(tmp_path)
    args = [MCPAUTH, "serve", "--issuer", issuer, "--port", str(port)]
    with running(args, ready_url=f"{issuer}/health", env=env, cwd=tmp_path):
        for suffix in ("oauth-authorization-server", "openid-configuration"):
            response = httpx2.get(f"http://127.0.0.1:{port}/.well-known/{suffix}{path}")
            assert response.status_code == 200
            assert response.json()["issuer"] == issuer
        assert (tmp_path / "data" / "mcpauth" / "mcpauth.db").exists()
        jwks_uri = response.json()["jwks_uri"]
        before = httpx2.get(jwks_uri).json()["keys"]
        assert len(before) == 1
        rotated = run_cli(["keys", "rotate"], env=env, cwd=tmp_path)
        assert rotated.returncode == 0, rotated.stderr
        deadline = time.monotonic() + 15
        keys = before
        while len(keys) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
            keys = httpx2.get(jwks_uri).json()["keys"]
        assert len(keys) == 2
        assert all("d" not in key for key in keys)


def test_admin_commands_report_errors_with_a_nonzero_exit(tmp_path: Path) -> None:
    env = _env(tmp_path)
    added = run_cli(["users", "add", "alice", "--password-stdin"], env=env, stdin="correct horse\n")
    assert added.returncode == 0, added.stderr
    again = run_cli(["users", "add", "alice", "--password-stdin"], env=env, stdin="correct horse\n")
    assert again.returncode == 2
    assert "already exists" in again.stderr
    bad = run_cli(["resources", "add", "https://mcp.example/mcp#x"], env=env)
    assert bad.returncode == 2
    assert "fragment" in bad.stderr
    listed = run_cli(["users", "list"], env=env)
    assert '"alice"' in listed.stdout
    assert "correct horse" not in listed.stdout
