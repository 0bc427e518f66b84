"""Without its extra, the client and the conformance driver say in one line what to install."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mcpauth.client import conformance

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("module", ["httpx2", "filelock"])
def test_importing_the_client_without_its_extra_names_the_extra(module: str) -> None:
    # the module made unimportable, as in an install without the client extra
    code = f"import sys; sys.modules[{module!r}] = None\nimport mcpauth.client\n"
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last == f"ImportError: mcpauth.client needs {module}: pip install 'mcpauth-kit[client]'"


def test_the_conformance_driver_without_the_mcp_sdk_says_which_extra_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "mcp", None)  # as in an install without the extra
    assert conformance.main(["http://127.0.0.1:1/mcp"]) == 2
    captured = capsys.readouterr()
    assert captured.err == (
        "conformance client: needs mcp: pip install 'mcpauth-kit[conformance]'\n"
    )
    assert captured.out == ""


@pytest.mark.parametrize(
    ("blocked", "command", "extra"),
    [("httpx2", "login", "client"), ("httpx2", "token", "client"), ("jwt", "proxy", "middleware")],
)
def test_a_command_whose_extra_is_missing_says_what_to_install(
    blocked: str, command: str, extra: str
) -> None:
    code = (
        f"import sys; sys.modules[{blocked!r}] = None\n"
        f"from mcpauth.cli import main\nsys.exit(main([{command!r}, 'http://127.0.0.1:1/mcp']))\n"
    )
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().endswith(f"pip install 'mcpauth-kit[{extra}]'")
    assert f"mcpauth {command} needs the {extra} extra" in done.stderr
