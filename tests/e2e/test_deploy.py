"""Deployment on PostgreSQL: the container's entry point script, run
outside Docker against the test PostgreSQL with the environment compose gives it, migrates an
empty database, creates the bootstrap resource and user, and serves; `mcpauth serve` refuses a
PostgreSQL database whose schema is behind until `mcpauth db upgrade`; docker/compose.yaml
validates (`docker compose config`, or Debian's docker-compose where the plugin is missing) and
names only settings the server knows; the Dockerfile is multi-stage and runs as non-root."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx2
import pytest
import yaml

from mcpauth.server.config import Settings
from mcpauth.server.storage import migrate
from mcpauth.server.storage.database import make_engine

from ..support import MCPAUTH, free_port, run_cli, running
from .test_authorization_flow import SECRET_KEY

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"
ENTRYPOINT = DOCKER / "entrypoint.sh"
COMPOSE = DOCKER / "compose.yaml"
ENTRYPOINT_ONLY = {
    "MCPAUTH_COMMAND",
    "MCPAUTH_DB_WAIT_SECONDS",
    "MCPAUTH_BOOTSTRAP_RESOURCE",
    "MCPAUTH_BOOTSTRAP_SCOPES",
    "MCPAUTH_BOOTSTRAP_USER",
    "MCPAUTH_BOOTSTRAP_PASSWORD",
    "MCPAUTH_BOOTSTRAP_PASSWORD_FILE",
}
DEMO_MCP_ONLY = {"MCPAUTH_RESOURCE", "MCPAUTH_AUTHORIZATION_SERVER"}


def _compose() -> dict[str, Any]:
    return dict(yaml.safe_load(COMPOSE.read_text()))


def _base_env(tmp_path: Path) -> dict[str, str]:
    """The process environment without any MCPAUTH_* of the caller; the venv first on PATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCPAUTH_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["HOME"] = str(tmp_path)
    env["XDG_DATA_HOME"] = str(tmp_path / "data")
    return env


@pytest.mark.postgres
def test_the_entrypoint_migrates_an_empty_database_bootstraps_and_serves(
    empty_postgres_url: str, tmp_path: Path
) -> None:
    database = empty_postgres_url
    port = free_port()
    auth = _compose()["services"]["auth"]["environment"]
    env = {
        **_base_env(tmp_path),
        # what compose sets, pointed at the test database and a loopback port
        "MCPAUTH_DATABASE_URL": database,
        "MCPAUTH_SECRET_KEY": SECRET_KEY,
        "MCPAUTH_ISSUER": f"http://127.0.0.1:{port}",
        "MCPAUTH_HOST": "127.0.0.1",
        "MCPAUTH_PORT": str(port),
        "MCPAUTH_BOOTSTRAP_RESOURCE": auth["MCPAUTH_BOOTSTRAP_RESOURCE"],
        "MCPAUTH_BOOTSTRAP_SCOPES": auth["MCPAUTH_BOOTSTRAP_SCOPES"],
        "MCPAUTH_BOOTSTRAP_USER": auth["MCPAUTH_BOOTSTRAP_USER"],
        "MCPAUTH_DB_WAIT_SECONDS": "20",
    }
    engine = make_engine(database)
    try:
        assert migrate.current_revision(engine) is None
        for attempt in range(2):  # a restart finds everything in place and starts again
            with running(
                ["sh", str(ENTRYPOINT)],
                ready_url=f"http://127.0.0.1:{port}/health",
                env=env,
                cwd=tmp_path,
                timeout=60,
            ):
                assert migrate.is_current(engine)
                metadata = httpx2.get(
                    f"http://127.0.0.1:{port}/.well-known/oauth-authorization-server", timeout=10
                ).json()
                assert metadata["issuer"] == env["MCPAUTH_ISSUER"]
                assert httpx2.get(metadata["jwks_uri"], timeout=10).json()["keys"]
            logs = "".join(p.read_text() for p in tmp_path.glob("process-*.log"))
            assert logs.count("created user demo with password") == 1, logs
            assert logs.count("registered resource") == 1, logs
            assert "Traceback" not in logs, logs
            assert attempt in (0, 1)
    finally:
        engine.dispose()
    listed = run_cli(["resources", "list", "--database", database], env=env)
    (resource,) = json.loads(listed.stdout)
    assert resource["uri"] == auth["MCPAUTH_BOOTSTRAP_RESOURCE"]
    assert sorted(resource["scopes"]) == ["mcp:admin", "mcp:tools"]
    assert resource["scopes"]["mcp:tools"] == "Call the demo tools"
    assert resource["default_scopes"] == ["mcp:tools"]
    users = json.loads(run_cli(["users", "list", "--database", database], env=env).stdout)
    assert [u["username"] for u in users] == ["demo"]


def test_the_entrypoint_stops_with_a_clear_message_when_the_database_never_answers(
    tmp_path: Path,
) -> None:
    env = {
        **_base_env(tmp_path),
        "MCPAUTH_DATABASE_URL": f"postgresql://postgres@127.0.0.1:{free_port()}/nothing",
        "MCPAUTH_SECRET_KEY": SECRET_KEY,
        "MCPAUTH_DB_WAIT_SECONDS": "1",
    }
    done = subprocess.run(
        ["sh", str(ENTRYPOINT)], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 1
    assert "the migrations did not succeed within 1 s" in done.stderr


@pytest.mark.postgres
def test_serve_refuses_a_postgresql_database_that_is_behind_until_db_upgrade(
    empty_postgres_url: str, tmp_path: Path
) -> None:
    database = empty_postgres_url  # behind: no schema yet
    port = free_port()
    env = {**_base_env(tmp_path), "MCPAUTH_SECRET_KEY": SECRET_KEY}
    serve = [
        "serve", "--issuer", f"http://127.0.0.1:{port}", "--port", str(port),
        "--database", database,
    ]  # fmt: skip
    refused = run_cli(serve, env=env)
    assert refused.returncode == 2, refused.stderr
    assert "the database schema is at revision None" in refused.stderr
    assert "run `mcpauth db upgrade` first" in refused.stderr
    assert "Traceback" not in refused.stderr

    upgraded = run_cli(["db", "upgrade", "--database", database], env=env)
    assert upgraded.returncode == 0, upgraded.stderr
    assert f"database at revision {migrate.head_revision()}" in upgraded.stderr
    with running(
        [MCPAUTH, *serve], ready_url=f"http://127.0.0.1:{port}/health", env=env, cwd=tmp_path
    ):
        assert httpx2.get(f"http://127.0.0.1:{port}/health", timeout=10).status_code == 200


def _compose_command() -> list[str] | None:
    docker = shutil.which("docker")
    if docker:
        probe = subprocess.run(
            [docker, "compose", "version"], capture_output=True, timeout=30, check=False
        )
        if probe.returncode == 0:
            return [docker, "compose"]
    legacy = shutil.which("docker-compose")
    return [legacy] if legacy else None


def test_the_compose_file_validates_with_docker_compose_config(tmp_path: Path) -> None:
    command = _compose_command()
    if command is None:
        pytest.skip("neither `docker compose` nor docker-compose: run scripts/ensure-compose.sh")
    env = {**_base_env(tmp_path), "MCPAUTH_SECRET_KEY": SECRET_KEY}
    done = subprocess.run(
        [*command, "-f", str(COMPOSE), "config"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    resolved = yaml.safe_load(done.stdout)
    assert set(resolved["services"]) == {"postgres", "auth", "mcp"}
    auth = resolved["services"]["auth"]["environment"]
    assert auth["MCPAUTH_SECRET_KEY"] == SECRET_KEY
    # without the secret the file refuses to resolve: no built-in default key
    env.pop("MCPAUTH_SECRET_KEY")
    missing = subprocess.run(
        [*command, "-f", str(COMPOSE), "config"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert missing.returncode != 0
    assert "MCPAUTH_SECRET_KEY" in missing.stderr


def test_the_compose_file_wires_postgres_the_server_and_a_protected_mcp_server() -> None:
    compose = _compose()
    services = compose["services"]
    assert set(services) == {"postgres", "auth", "mcp"}
    assert services["postgres"]["healthcheck"]["test"]
    auth, mcp = services["auth"], services["mcp"]
    assert auth["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert mcp["depends_on"]["auth"]["condition"] == "service_healthy"
    assert auth["build"] == {"context": "..", "dockerfile": "docker/Dockerfile", "target": "server"}
    assert mcp["build"]["target"] == "demo-mcp"
    assert mcp["network_mode"] == "service:auth"
    for service in (auth, mcp):  # tests/e2e/test_container.py shows both run so
        assert service["read_only"] is True
        assert service["tmpfs"] == ["/tmp"]
    assert auth["environment"]["MCPAUTH_DATABASE_URL"].startswith("postgresql://")
    assert "@postgres:5432/" in auth["environment"]["MCPAUTH_DATABASE_URL"]
    # every MCPAUTH_* variable is a server setting or one the entry point script reads
    settings = {"MCPAUTH_" + name.upper() for name in Settings.model_fields}
    for name in auth["environment"]:
        assert name in settings | ENTRYPOINT_ONLY, name
    for name in mcp["environment"]:
        assert name in DEMO_MCP_ONLY | {"MCP_HOST", "MCP_PORT"}, name
    entrypoint = ENTRYPOINT.read_text()
    for name in ENTRYPOINT_ONLY:
        assert name in entrypoint, name
    issuer = auth["environment"]["MCPAUTH_ISSUER"]
    assert mcp["environment"]["MCPAUTH_AUTHORIZATION_SERVER"] in issuer
    assert (
        auth["environment"]["MCPAUTH_BOOTSTRAP_RESOURCE"] == mcp["environment"]["MCPAUTH_RESOURCE"]
    )
    published = {p.split(":")[-1] for p in auth["ports"]}
    assert published == {"9000", "8000"}
    assert all(p.startswith("127.0.0.1:") for p in auth["ports"])


def test_the_dockerfile_is_multi_stage_non_root_and_runs_the_entrypoint() -> None:
    text = (DOCKER / "Dockerfile").read_text()
    stages = re.findall(r"^FROM\s+\S+\s+AS\s+(\S+)", text, flags=re.MULTILINE)
    assert stages == ["build", "runtime", "demo-mcp", "server"]
    runtime = text.split(" AS runtime", 1)[1].split(" AS demo-mcp", 1)[0]
    assert re.search(r"^USER mcpauth", runtime, flags=re.MULTILINE)
    assert '"mcpauth-kit[server,middleware]"' in runtime
    assert 'ENTRYPOINT ["mcpauth-entrypoint"]' in runtime
    assert "docker/entrypoint.sh /usr/local/bin/mcpauth-entrypoint" in runtime
    # the last USER of every stage that runs is unprivileged
    for stage in text.split("\nFROM ")[2:]:
        users = re.findall(r"^USER (\S+)", stage, flags=re.MULTILINE)
        assert not users or users[-1] != "root"
    assert "db upgrade" in ENTRYPOINT.read_text()
    assert 'exec "$mcpauth_cmd" serve "$@"' in ENTRYPOINT.read_text()


def test_the_compose_demo_mcp_server_challenges_for_a_token_from_the_issuer(
    tmp_path: Path,
) -> None:
    port = free_port()
    resource = f"http://127.0.0.1:{port}/mcp"
    env = {
        **_base_env(tmp_path),
        "MCPAUTH_RESOURCE": resource,
        "MCPAUTH_AUTHORIZATION_SERVER": "http://127.0.0.1:9",
        "MCP_HOST": "127.0.0.1",
        "MCP_PORT": str(port),
    }
    with running(
        [sys.executable, str(DOCKER / "demo_mcp.py")],
        ready_url=f"http://127.0.0.1:{port}/",
        env=env,
        cwd=tmp_path,
    ):
        response = httpx2.post(resource, json={}, timeout=10)
        assert response.status_code == 401
        assert "resource_metadata=" in response.headers["www-authenticate"]
        metadata = httpx2.get(
            f"http://127.0.0.1:{port}/.well-known/oauth-protected-resource/mcp", timeout=10
        ).json()
        assert metadata["resource"] == resource
        assert metadata["authorization_servers"] == ["http://127.0.0.1:9"]
