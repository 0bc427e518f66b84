"""The admin commands (``mcpauth users|clients|resources ...``) answer bad input with one line
on stderr and a non-zero exit status, never a traceback."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from mcpauth.cli import main


@pytest.fixture
def database(tmp_path: Path) -> list[str]:
    url = f"sqlite:///{tmp_path / 'admin.db'}"
    assert main(["db", "upgrade", "--database", url]) == 0
    return ["--database", url]


def _one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("mcpauth: ")
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize(
    "argv",
    [
        ["resources", "add", "http://[::1/mcp"],
        ["resources", "add", "https://xn--zz.example/mcp"],
        ["resources", "remove", "https://[x/y"],
        ["clients", "add", "--name", "n", "--redirect-uri", "http://[::1/cb"],
        ["clients", "add", "--name", "n", "--redirect-uri", "https://a:99999/cb"],
        [
            "clients",
            "add",
            "--name",
            "n",
            "--grant-type",
            "client_credentials",
            "--auth-method",
            "private_key_jwt",
            "--jwks-uri",
            "https://[::1",
        ],
    ],
)
def test_a_malformed_url_is_a_one_line_error(
    database: list[str], capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    capsys.readouterr()
    assert main([*argv, *database]) == 2
    _one_line_error(capsys)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "cannot read --jwks-file"),
        (b"{not json", "is not valid JSON"),
        (b'{"keys": [], "keys": []}', "is not valid JSON"),
        (b"\xff\xfe", "is not valid JSON"),
        (b'{"keys": "nope"}', "jwks"),
    ],
)
def test_a_missing_or_invalid_jwks_file_is_a_one_line_error(
    database: list[str],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    content: bytes | None,
    expected: str,
) -> None:
    path = tmp_path / "jwks.json"
    if content is not None:
        path.write_bytes(content)
    argv = ["clients", "add", "--name", "bot", "--grant-type", "client_credentials"]
    argv += ["--auth-method", "private_key_jwt", "--jwks-file", str(path)]
    capsys.readouterr()
    assert main([*argv, *database]) == 2
    assert expected in _one_line_error(capsys)


def test_a_password_on_stdin_that_is_not_utf8_is_a_one_line_error(
    database: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"caf\xe9 password\n")))
    capsys.readouterr()
    assert main(["users", "add", "alice", "--password-stdin", *database]) == 2
    assert "not valid UTF-8" in _one_line_error(capsys)


def test_a_utf8_password_on_stdin_still_adds_the_user(
    database: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    stdin = io.TextIOWrapper(io.BytesIO("caf\u00e9 password\r\n".encode()))
    monkeypatch.setattr("sys.stdin", stdin)
    assert main(["users", "add", "alice", "--password-stdin", *database]) == 0
    assert "alice" in capsys.readouterr().out


def test_a_resource_requires_mfa_when_added_or_edited_so(
    database: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    uri = "https://mcp.example.com/mcp"
    assert main(["resources", "add", uri, "--require-mfa", *database]) == 0
    assert json.loads(capsys.readouterr().out)["require_mfa"] is True
    assert main(["resources", "edit", uri, "--no-require-mfa", *database]) == 0
    assert json.loads(capsys.readouterr().out)["require_mfa"] is False
    assert main(["resources", "edit", "https://other.example/mcp", "--require-mfa", *database]) == 2
    assert "no resource" in _one_line_error(capsys)


def test_reset_mfa_says_what_it_removed_and_refuses_an_unknown_user(
    database: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"a long password\n")))
    assert main(["users", "add", "alice", "--password-stdin", *database]) == 0
    capsys.readouterr()
    assert main(["users", "reset-mfa", "alice", *database]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "username": "alice",
        "totp": False,
        "passkeys": 0,
    }
    assert main(["users", "reset-mfa", "nobody", *database]) == 2
    assert "no user 'nobody'" in _one_line_error(capsys)


def _add_user(database: list[str], monkeypatch: pytest.MonkeyPatch, *extra: str) -> None:
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"a long password\n")))
    assert main(["users", "add", "alice", "--password-stdin", *extra, *database]) == 0


def test_an_administrator_is_added_granted_and_dropped_and_each_change_is_audited(
    database: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    _add_user(database, monkeypatch, "--admin")
    capsys.readouterr()
    assert main(["users", "list", *database]) == 0
    assert [u["admin"] for u in json.loads(capsys.readouterr().out)] == [True]
    assert main(["users", "admin", "alice", "--drop", *database]) == 0
    assert json.loads(capsys.readouterr().out)["admin"] is False
    assert main(["users", "admin", "alice", "--grant", *database]) == 0
    assert json.loads(capsys.readouterr().out)["admin"] is True
    assert main(["users", "admin", "nobody", "--grant", *database]) == 2
    assert "no user 'nobody'" in _one_line_error(capsys)
    assert main(["audit", "search", "--user", "alice", "--event", "admin.", *database]) == 0
    events = json.loads(capsys.readouterr().out)
    assert [e["event"] for e in events] == [
        "admin.admin_granted",
        "admin.admin_dropped",
        "admin.user_added",
    ]
    assert {e["actor"] for e in events} == {"command line"}
    assert events[-1]["details"]["admin"] == "True"


def test_users_admin_needs_grant_or_drop(
    database: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["users", "admin", "alice", *database])
    assert exited.value.code == 2


def test_audit_search_filters_by_event_client_and_time_and_refuses_a_bad_time(
    database: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    assert main(["resources", "add", "https://mcp.example.com/mcp", *database]) == 0
    assert main(["keys", "rotate", *database]) == 0
    capsys.readouterr()
    assert main(["audit", "search", "--event", "admin.keys_rotated", *database]) == 0
    rotated = json.loads(capsys.readouterr().out)
    assert [e["event"] for e in rotated] == ["admin.keys_rotated"]
    assert rotated[0]["details"]["kid"]
    assert main(["audit", "search", "--since", "2999-01-01", *database]) == 0
    assert json.loads(capsys.readouterr().out) == []
    assert main(["audit", "search", "--until", "1000", *database]) == 0
    assert json.loads(capsys.readouterr().out) == []
    assert main(["audit", "search", "--client", "nobody", *database]) == 0
    assert json.loads(capsys.readouterr().out) == []
    assert main(["audit", "search", "--since", "yesterday", *database]) == 2
    assert "--since: not a time" in _one_line_error(capsys)
    assert main(["audit", "search", "--limit", "0", *database]) == 2
    assert "--limit" in _one_line_error(capsys)


def test_a_persons_grants_are_listed_and_revoked_and_her_sessions_ended(
    database: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    _add_user(database, monkeypatch)
    capsys.readouterr()
    assert main(["users", "grants", "alice", *database]) == 0
    assert json.loads(capsys.readouterr().out) == []
    assert main(["users", "sessions", "alice", *database]) == 0
    assert json.loads(capsys.readouterr().out) == []
    assert main(["users", "sign-out", "alice", *database]) == 0
    assert json.loads(capsys.readouterr().out) == {"ended": 0}
    assert main(["users", "revoke", "alice", *database]) == 2
    assert "no live grant of 'alice'" in _one_line_error(capsys)


def test_a_user_is_disabled_and_enabled_again(
    database: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    _add_user(database, monkeypatch)
    capsys.readouterr()
    assert main(["users", "disable", "alice", *database]) == 0
    assert json.loads(capsys.readouterr().out)["disabled"] is True
    assert main(["users", "enable", "alice", *database]) == 0
    assert json.loads(capsys.readouterr().out)["disabled"] is False
    assert main(["users", "disable", "nobody", *database]) == 2
    assert "no user 'nobody'" in _one_line_error(capsys)
