"""The admin commands answer an unusable database or file with one line and exit status 2,
never a traceback, and never echo a password from the database URL."""

from __future__ import annotations

from pathlib import Path

import pytest

from .support import free_port, run_cli

pytestmark = pytest.mark.e2e


def one_line_error(args: list[str], tmp_path: Path, stdin: str | None = None) -> str:
    done = run_cli(
        args,
        env={
            "HOME": str(tmp_path),
            "XDG_DATA_HOME": str(tmp_path / "data"),
            "MCPAUTH_SECRET_KEY": "a-test-secret-key-0123456789abcdef",  # no warning line
        },
        cwd=tmp_path,
        stdin=stdin,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("mcpauth: ")
    return lines[0]


@pytest.mark.parametrize("url", ["foo://bar", "not a url"])
def test_a_database_url_of_no_known_kind_is_one_line_naming_the_kinds_that_work(
    url: str, tmp_path: Path
) -> None:
    line = one_line_error(["users", "list", "--database", url], tmp_path)
    assert "not a database URL" in line
    assert "sqlite:///PATH" in line


def test_a_postgresql_server_that_does_not_answer_is_one_line_without_the_password(
    tmp_path: Path,
) -> None:
    url = f"postgresql://mcpauth:hunter2-secret@127.0.0.1:{free_port()}/mcpauth"
    line = one_line_error(["resources", "list", "--database", url], tmp_path)
    assert line.startswith("mcpauth: cannot use the database: ")
    assert "hunter2-secret" not in line


def test_a_sqlite_file_in_a_folder_that_cannot_be_created_is_one_line_naming_it(
    tmp_path: Path,
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    url = f"sqlite:///{blocker / 'sub' / 'mcpauth.db'}"
    line = one_line_error(
        ["users", "add", "bob", "--password-stdin", "--database", url],
        tmp_path,
        stdin="long enough password\n",
    )
    assert str(blocker) in line


def test_a_missing_jwks_file_is_one_line_naming_it(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'mcpauth.db'}"
    missing = tmp_path / "jwks.json"
    args = ["clients", "add", "--name", "bot", "--grant-type", "client_credentials"]
    args += ["--auth-method", "private_key_jwt", "--jwks-file", str(missing), "--database", url]
    line = one_line_error(args, tmp_path)
    assert line == f"mcpauth: cannot read --jwks-file '{missing}': No such file or directory"
