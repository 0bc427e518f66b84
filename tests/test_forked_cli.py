"""An admin command run forked (tests/forked_cli.py) behaves as the same command started with
exec: the same output, error output and exit status, standard input passed through, the
environment and directory it is given, and a process of its own."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from . import forked_cli
from .support import MCPAUTH


def exec_cli(
    args: list[str], env: dict[str, str], stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [MCPAUTH, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )


def forked(
    args: list[str], env: dict[str, str], stdin: str | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    assert forked_cli.forkable(args, env)
    return forked_cli.run(args, env=env, stdin=stdin, cwd=cwd, timeout=60)


@pytest.fixture
def env(tmp_path: Path, sqlite_template: Path) -> dict[str, str]:
    shutil.copyfile(sqlite_template, tmp_path / "db.sqlite")
    return {
        **os.environ,
        "MCPAUTH_DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite'}",
        "MCPAUTH_SECRET_KEY": "forked-cli-secret-0123456789",
        "MCPAUTH_ISSUER": "https://auth.example.com",
    }


def test_output_and_status_are_those_of_the_command_started_with_exec(env: dict[str, str]) -> None:
    added = forked(["users", "add", "bob", "--password-stdin"], env, stdin="a long passphrase\n")
    assert added.returncode == 0, added.stderr
    for args in (["users", "list"], ["resources", "list"], ["users", "remove", "nobody"]):
        mine, theirs = forked(args, env), exec_cli(args, env)
        assert (mine.returncode, mine.stdout, mine.stderr) == (
            theirs.returncode,
            theirs.stdout,
            theirs.stderr,
        )
    assert [u["username"] for u in json.loads(exec_cli(["users", "list"], env).stdout)] == ["bob"]


def test_a_bad_database_is_the_same_plain_error_and_status(
    env: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "not.db").write_bytes(b"not a database, " * 512)
    bad = env | {"MCPAUTH_DATABASE_URL": f"sqlite:///{tmp_path / 'not.db'}"}
    mine, theirs = forked(["users", "list"], bad), exec_cli(["users", "list"], bad)
    assert mine.returncode == theirs.returncode != 0
    assert mine.stderr == theirs.stderr
    assert "Traceback" not in mine.stderr


def test_each_command_has_its_own_environment_and_directory(
    env: dict[str, str], tmp_path: Path
) -> None:
    config = tmp_path / "conf" / "mcpauth.toml"
    config.parent.mkdir()
    config.write_text('[mcpauth]\nservice_name = "Forked"\n')
    config.chmod(0o640)
    added = forked(
        [
            "idps",
            "add",
            "gh",
            "--name",
            "GitHub",
            "--kind",
            "github",
            "--client-id",
            "Iv1.abc",
            "--client-secret-file",
            "/run/s",
        ],
        env | {"MCPAUTH_CONFIG": "mcpauth.toml"},
        cwd=config.parent,
    )
    assert added.returncode == 0, added.stderr
    assert "[[mcpauth.upstream]]" in config.read_text()
    # the next command sees neither that variable nor that directory
    again = forked(
        [
            "idps",
            "add",
            "gh2",
            "--name",
            "Other",
            "--kind",
            "github",
            "--client-id",
            "x",
            "--client-secret-file",
            "/s",
        ],
        env,
        cwd=tmp_path,
    )
    assert again.returncode != 0
    assert "gh2" not in config.read_text()


def test_only_admin_commands_in_the_same_interpreter_setting_are_forked() -> None:
    assert forked_cli.forkable(["users", "list"], dict(os.environ))
    assert not forked_cli.forkable(["serve"], dict(os.environ))
    assert not forked_cli.forkable(["token", "https://x"], dict(os.environ))
    assert not forked_cli.forkable(["users", "list"], {**os.environ, "PYTHONPATH": "/elsewhere"})
