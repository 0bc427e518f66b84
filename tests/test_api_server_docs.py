"""docs/api/server.md names every public name of ``mcpauth.server``, and its Admin example
runs as written (on a data directory of the test's own)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import mcpauth.server

DOC = Path(__file__).resolve().parents[1] / "docs" / "api" / "server.md"


def test_every_public_name_is_documented() -> None:
    text = DOC.read_text()
    missing = [name for name in mcpauth.server.__all__ if f"`{name}" not in text]
    assert not missing


def test_the_admin_example_runs(tmp_path: Path) -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    example = next(block for block in blocks if "Admin.open" in block)
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path)}  # the default database's directory
    env = {k: v for k, v in env.items() if not k.startswith("MCPAUTH_")}
    result = subprocess.run(
        [sys.executable, "-c", example], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    client_id, secret = result.stdout.split()
    assert len(client_id) >= 20
    assert len(secret) >= 32
    assert list(tmp_path.rglob("*.db")), "the example's database is under the test's directory"
