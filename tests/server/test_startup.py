"""What a process loads to start: the application, the admin API and the ``mcpauth`` commands on
a current database import no Alembic (only a migration needs it), no Authlib (only a call to an
upstream provider), no Jinja2 (only a page), nothing of passkeys or TOTP (only a second
factor), no TLS stack for outbound fetches (only a fetch),
and the application and the admin API not each other. Each case runs in a fresh interpreter,
whose ``sys.modules`` is the evidence."""

from __future__ import annotations

import gc
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ..conftest import TEST_SECRET

# loaded only by the work that needs them (httpcore2 is not among them: the SSRF guard of
# clients/ssrf.py is a network backend of httpx2's transport, defined on import)
ON_DEMAND = ("alembic", "authlib", "jinja2", "webauthn", "pyotp", "segno")


def _loaded(code: str, tmp_path: Path, *names: str, database: str = "") -> list[str]:
    """Which of ``names`` (and ON_DEMAND) a fresh interpreter has imported after ``code``
    (``database`` in ``MCPAUTH_DATABASE_URL``)."""
    watched = names + ON_DEMAND
    check = f"\nimport sys\nprint(json.dumps([n for n in {watched!r} if n in sys.modules]))\n"
    env = {**os.environ, "MCPAUTH_SECRET_KEY": TEST_SECRET, "MCPAUTH_DATABASE_URL": database}
    done = subprocess.run(
        [sys.executable, "-c", "import json\n" + code + check],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    loaded: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return loaded


@pytest.fixture
def current_database(tmp_path: Path, sqlite_template: Path) -> str:
    """A SQLite database already at the newest revision."""
    shutil.copyfile(sqlite_template, tmp_path / "current.db")
    return f"sqlite:///{tmp_path / 'current.db'}"


def test_importing_the_application_loads_no_admin_api_and_nothing_on_demand(
    tmp_path: Path,
) -> None:
    assert _loaded("import mcpauth.server.app", tmp_path, "mcpauth.server.admin") == []


def test_importing_the_admin_api_loads_no_application_and_nothing_on_demand(
    tmp_path: Path,
) -> None:
    loaded = _loaded("import mcpauth.server.admin", tmp_path, "mcpauth.server.app", "uvicorn")
    assert loaded == []


def test_an_app_on_a_current_database_starts_and_is_ready_without_them(
    tmp_path: Path, current_database: str
) -> None:
    code = textwrap.dedent(
        """
        import asyncio, httpx2
        from mcpauth.server import create_app, load_settings

        app = create_app(load_settings({"issuer": "http://127.0.0.1:9000"}))

        async def ready():
            transport = httpx2.ASGITransport(app=app)
            async with httpx2.AsyncClient(transport=transport, base_url="http://x") as http:
                response = await http.get("/health/ready")
            assert response.status_code == 200, response.text

        asyncio.run(ready())
        """
    )
    assert _loaded(code, tmp_path, "mcpauth.server.admin", database=current_database) == []


@pytest.mark.parametrize("command", [["users", "list"], ["keys", "list"], ["db", "upgrade"]])
def test_an_admin_command_on_a_current_database_loads_no_application(
    tmp_path: Path, current_database: str, command: list[str]
) -> None:
    code = f"from mcpauth.cli import main\nassert main({command!r}) == 0\n"
    loaded = _loaded(code, tmp_path, "mcpauth.server.app", "uvicorn", database=current_database)
    assert loaded == []


def test_a_database_behind_is_still_migrated_at_start(tmp_path: Path) -> None:
    code = textwrap.dedent(
        """
        import os
        from mcpauth.cli import main
        from mcpauth.server.storage import migrate
        from mcpauth.server.storage.database import make_engine

        assert main(["users", "list"]) == 0
        engine = make_engine(os.environ["MCPAUTH_DATABASE_URL"])
        assert migrate.current_revision(engine) == migrate.HEAD
        """
    )
    database = f"sqlite:///{tmp_path / 'new.db'}"
    assert _loaded(code, tmp_path, database=database) == ["alembic"]


def test_an_admin_command_runs_with_the_cycle_collector_paused_then_restores_it(
    monkeypatch: pytest.MonkeyPatch, current_database: str
) -> None:
    from mcpauth.cli import main
    from mcpauth.server import admin

    during: list[bool] = []
    listing = admin.list_users
    monkeypatch.setattr(
        admin, "list_users", lambda ctx: during.append(gc.isenabled()) or listing(ctx)
    )
    assert gc.isenabled()
    assert main(["users", "list", "--database", current_database]) == 0
    assert during == [False]
    assert gc.isenabled()
    assert main(["users", "remove", "nobody", "--database", current_database]) == 2  # refused
    assert gc.isenabled()


def test_serve_starts_with_the_cycle_collector_paused_and_serves_with_it_on(
    tmp_path: Path, current_database: str
) -> None:
    code = textwrap.dedent(
        """
        import gc, uvicorn
        from mcpauth.cli import main
        from mcpauth.server import app as app_module

        seen = {}
        creating = app_module.create_app

        def create_app(settings):
            seen["start"] = gc.isenabled()
            return creating(settings)

        def run(app, **options):
            seen["serving"] = gc.isenabled()

        app_module.create_app = create_app
        uvicorn.run = run
        assert main(["serve", "--issuer", "http://127.0.0.1:9000"]) == 0
        assert seen == {"start": False, "serving": True}, seen
        """
    )
    _loaded(code, tmp_path, database=current_database)


def test_the_demo_serves_with_the_cycle_collector_on(monkeypatch: pytest.MonkeyPatch) -> None:
    import mcpauth.demo
    from mcpauth.cli import main

    serving: list[bool] = []
    monkeypatch.setattr(mcpauth.demo, "run_demo", lambda *args: serving.append(gc.isenabled()) or 0)
    assert main(["demo"]) == 0
    assert serving == [True]
