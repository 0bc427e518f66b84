"""`mcpauth idps add|remove`: a provider's table added to or removed from the TOML settings
file, with the rest of the file (comments, order, other settings) as it was; the changed file
validated as a whole before it replaces the old one, so a bad provider leaves the file
untouched; secrets only ever named, never written."""

from __future__ import annotations

import json
import shlex
import shutil
import tomllib
from pathlib import Path

import pytest

from mcpauth.server.config import load_settings

from ..readme import readme_block
from ..support import run_cli

FILE = """# mcpauth settings: kept by hand
[mcpauth]
service_name = "Example sign-in"  # the pages' title

[[mcpauth.upstream]]
id = "corp"
name = "Example Corp"
issuer = "https://login.example.com"
client_id = "mcpauth"
client_secret_env = "CORP_SECRET"
"""


@pytest.fixture
def env(tmp_path: Path, sqlite_template: Path) -> dict[str, str]:
    shutil.copyfile(sqlite_template, tmp_path / "db.sqlite")  # migrated once per session
    config = tmp_path / "mcpauth.toml"
    config.write_text(FILE)
    config.chmod(0o640)
    return {
        "MCPAUTH_DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite'}",
        "MCPAUTH_SECRET_KEY": "idps-command-secret-0123456789",
        "MCPAUTH_ISSUER": "https://auth.example.com",
        "MCPAUTH_CONFIG": str(config),
    }


def settings_of(env: dict[str, str]) -> dict[str, object]:
    return tomllib.loads(Path(env["MCPAUTH_CONFIG"]).read_text())["mcpauth"]  # type: ignore[no-any-return]


def test_add_appends_a_table_and_keeps_the_rest_of_the_file(env: dict[str, str]) -> None:
    added = run_cli(
        ["idps", "add", "gh", "--name", "GitHub", "--kind", "github", "--client-id", "Iv1.abc",
         "--client-secret-file", "/run/secrets/github", "--allowed-email-domain", "example.com",
         "--require-claim", "sub=123,456", "--require-claim", "sub=789",
         "--param", "allow_signup=false", "--keep-tokens",
         "--release-to", "https://tools.example.com/mcp"],
        env=env,
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    row = json.loads(added.stdout)
    assert row["id"] == "gh"
    assert row["redirect_uri"] == "https://auth.example.com/upstream/gh/callback"
    assert row["client_secret"] == "file /run/secrets/github"
    assert "restart mcpauth serve" in added.stderr
    text = Path(env["MCPAUTH_CONFIG"]).read_text()
    assert text.startswith(FILE)  # comments and the first provider as they were
    assert Path(env["MCPAUTH_CONFIG"]).stat().st_mode & 0o777 == 0o640
    corp, gh = settings_of(env)["upstream"]  # type: ignore[misc]
    assert corp["id"] == "corp"
    assert gh == {
        "id": "gh", "name": "GitHub", "kind": "github", "client_id": "Iv1.abc",
        "client_secret_file": "/run/secrets/github", "allowed_email_domains": ["example.com"],
        "required_claims": {"sub": ["123", "456", "789"]}, "authorization_params":
        {"allow_signup": "false"}, "keep_tokens": True,
        "release_to": ["https://tools.example.com/mcp"],
    }  # fmt: skip
    listed = run_cli(["idps", "list"], env=env)
    assert [p["id"] for p in json.loads(listed.stdout)] == ["corp", "gh"]


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["corp", "--name", "Again", "--issuer", "https://x.example", "--client-id", "c"],
         "already has a provider with the id 'corp'"),
        (["Bad Id", "--name", "X", "--issuer", "https://x.example", "--client-id", "c"],
         "must be 1 to 32 of a-z"),
        (["x", "--name", "X", "--issuer", "http://x.example", "--client-id", "c"], "issuer"),
        (["x", "--name", "X", "--kind", "oauth2", "--issuer", "https://api.example.com",
          "--client-id", "c"], "endpoint"),
        (["x", "--name", "X", "--issuer", "https://x.example", "--client-id", "c",
          "--require-claim", "groups"], "--require-claim takes NAME=VALUE"),
        (["x", "--name", "X", "--issuer", "https://x.example", "--client-id", "c",
          "--release-to", "https://tools.example.com/mcp"], "keep_tokens"),
    ],
)  # fmt: skip
def test_a_provider_that_would_not_load_leaves_the_file_untouched(
    env: dict[str, str], argv: list[str], words: str
) -> None:
    refused = run_cli(["idps", "add", *argv], env=env)
    assert refused.returncode != 0
    assert words in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr
    assert Path(env["MCPAUTH_CONFIG"]).read_text() == FILE
    assert [p.name for p in Path(env["MCPAUTH_CONFIG"]).parent.iterdir() if ".tmp" in p.name] == []


def test_remove_takes_out_one_table_and_refuses_an_unknown_id(env: dict[str, str]) -> None:
    run_cli(
        ["idps", "add", "kc", "--name", "Keycloak", "--issuer", "https://kc.example.com/realms/a",
         "--client-id", "mcpauth", "--client-secret-env", "KC_SECRET"],
        env=env,
    )  # fmt: skip
    removed = run_cli(["idps", "remove", "corp"], env=env)
    assert removed.returncode == 0, removed.stderr
    (kc,) = settings_of(env)["upstream"]  # type: ignore[misc]
    assert kc["id"] == "kc"
    assert settings_of(env)["service_name"] == "Example sign-in"
    unknown = run_cli(["idps", "remove", "corp"], env=env)
    assert unknown.returncode != 0
    assert "has no provider with the id 'corp'" in unknown.stderr
    assert run_cli(["idps", "remove", "kc"], env=env).returncode == 0
    assert "upstream" not in settings_of(env)


def test_the_last_provider_of_a_server_without_local_accounts_stays(
    env: dict[str, str],
) -> None:
    path = Path(env["MCPAUTH_CONFIG"])
    path.write_text(FILE.replace("[mcpauth]\n", "[mcpauth]\nlocal_accounts = false\n"))
    before = path.read_text()
    refused = run_cli(["idps", "remove", "corp"], env=env)
    assert refused.returncode != 0
    assert "local_accounts = false needs at least one upstream provider" in refused.stderr
    assert path.read_text() == before


def test_add_makes_the_file_when_there_is_none_and_needs_one_named(
    env: dict[str, str], tmp_path: Path
) -> None:
    fresh = tmp_path / "new.toml"
    made = run_cli(
        ["idps", "add", "corp", "--name", "Example Corp", "--issuer", "https://login.example.com",
         "--client-id", "mcpauth", "--config", str(fresh)],
        env={**env, "MCPAUTH_CONFIG": ""},
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert tomllib.loads(fresh.read_text())["mcpauth"]["upstream"][0]["id"] == "corp"
    unnamed = run_cli(
        ["idps", "add", "x", "--name", "X", "--issuer", "https://x.example", "--client-id", "c"],
        env={**env, "MCPAUTH_CONFIG": ""},
    )
    assert unnamed.returncode == 2
    assert "--config FILE" in unnamed.stderr


def test_the_readme_s_command_makes_the_readme_s_table(env: dict[str, str], tmp_path: Path) -> None:
    """The README's `mcpauth idps add` and its `[[mcpauth.upstream]]` table are one provider."""
    written = tmp_path / "from-the-command.toml"
    argv = shlex.split(readme_block("idps-add").text.replace("\\\n", " "))
    assert argv[:3] == ["mcpauth", "idps", "add"]
    made = run_cli([*argv[1:], "--config", str(written)], env={**env, "MCPAUTH_CONFIG": ""})
    assert made.returncode == 0, made.stderr
    by_hand = tmp_path / "by-hand.toml"
    by_hand.write_text(readme_block("upstream-config").text)
    environ = {"MCPAUTH_ISSUER": "https://auth.example.com"}
    (ours,) = load_settings(config_file=written, environ=environ).upstream
    (theirs,) = load_settings(config_file=by_hand, environ=environ).upstream
    assert ours == theirs


def test_a_symbolic_link_is_followed_and_the_real_file_changed(
    env: dict[str, str], tmp_path: Path
) -> None:
    """As with a configuration mounted through a link (a Kubernetes ConfigMap): the link stays,
    the file it points to gets the provider."""
    real = Path(env["MCPAUTH_CONFIG"])
    link = tmp_path / "linked.toml"
    link.symlink_to(real)
    added = run_cli(
        ["idps", "add", "kc", "--name", "Keycloak", "--issuer", "https://kc.example.com/realms/a",
         "--client-id", "mcpauth", "--config", str(link)],
        env={**env, "MCPAUTH_CONFIG": ""},
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    assert link.is_symlink()
    assert [p["id"] for p in tomllib.loads(real.read_text())["mcpauth"]["upstream"]] == [
        "corp",
        "kc",
    ]
    assert real.stat().st_mode & 0o777 == 0o640
