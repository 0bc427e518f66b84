"""The distribution installs under its own name: the README's wheel block, run in a copy of the
sources, builds ``mcpauth_kit-*.whl`` and installs it into a fresh virtual environment whose
``mcpauth`` command then runs from that environment (not from this checkout): it migrates a
database and runs the demo, whose pages render.

The fresh environment sees the dependencies of the test environment through a ``.pth`` line
(so nothing is downloaded but the build backend, which pip caches); the package itself comes
only from the wheel.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import sysconfig
from pathlib import Path

import httpx2
import pytest

from ..readme import ROOT, readme_block
from ..support import free_port
from .test_demo import wait_for_banner

pytestmark = pytest.mark.e2e


def _fresh_venv(path: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True, timeout=60)
    site = next((path / "lib").glob("python3*/site-packages"))
    (site / "test-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return path / "bin"


def test_the_readme_wheel_block_installs_mcpauth_kit_whose_mcpauth_command_runs(
    tmp_path: Path,
) -> None:
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(
        ROOT / "mcpauth", source / "mcpauth", ignore=shutil.ignore_patterns("__pycache__")
    )
    bin_dir = _fresh_venv(tmp_path / "venv")
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}} | {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "HOME": str(tmp_path),
        "XDG_DATA_HOME": str(tmp_path / "data"),
        "PIP_NO_INPUT": "1",
    }
    block = readme_block("install-wheel")
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block.text],
        cwd=source,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    wheels = [p.name for p in (source / "dist").glob("*.whl")]
    assert wheels == ["mcpauth_kit-0.1.0-py3-none-any.whl"]
    # every command, the optional ones included, from the command the wheel installed
    for command in ("serve", "users", "proxy", "login", "token", "demo"):
        assert command in done.stdout

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(args), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
        )

    where = run(str(bin_dir / "python"), "-c", "import mcpauth; print(mcpauth.__file__)")
    assert where.stdout.startswith(str(tmp_path / "venv")), where.stdout + where.stderr
    shown = run(str(bin_dir / "python"), "-m", "pip", "show", "mcpauth-kit")
    assert "Name: mcpauth-kit" in shown.stdout
    assert shutil.which("mcpauth", path=env["PATH"]) == str(bin_dir / "mcpauth")
    # the migrations ship in the wheel: the installed command creates a database
    database = f"sqlite:///{tmp_path / 'fresh.db'}"
    upgraded = run("mcpauth", "db", "upgrade", "--database", database)
    assert upgraded.returncode == 0, upgraded.stderr
    assert "database at revision" in upgraded.stderr

    # and the installed demo serves its pages (the templates ship too)
    auth_port, mcp_port = free_port(), free_port()
    err_path = tmp_path / "demo.log"
    with err_path.open("wb") as err:
        demo = subprocess.Popen(
            ["mcpauth", "demo", "--auth-port", str(auth_port), "--mcp-port", str(mcp_port)],
            cwd=tmp_path,
            env=env,
            stdout=err,
            stderr=err,
            start_new_session=True,
        )
        try:
            banner = wait_for_banner(err_path, demo)
            # `mcpauth` on PATH is this command, so the banner names it plainly
            database = f"sqlite:///{tmp_path / '.mcpauth-demo' / 'mcpauth.db'}"
            assert f"\n  mcpauth users add bob --password-stdin --database {database}\n" in banner
            page = httpx2.get(
                f"http://127.0.0.1:{auth_port}/account", follow_redirects=True, timeout=10
            )
            assert page.status_code == 200
            assert "<form" in page.text
        finally:
            os.killpg(demo.pid, signal.SIGTERM)
            demo.wait(timeout=20)
