"""docs/upstream-providers.md: every TOML block is a valid `[[mcpauth.upstream]]` table (each
marked with the provider it configures), and the page covers Google, Microsoft Entra ID, Okta,
Keycloak and GitHub and is linked from the README."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mcpauth.server.config import load_settings

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "upstream-providers.md"
BLOCK = re.compile(r"<!-- settings: (\w+) -->\n```toml\n(.*?)```", re.DOTALL)
EXPECTED = {
    "google": ("oidc", "https://accounts.google.com"),
    "entra": (
        "oidc",
        "https://login.microsoftonline.com/00000000-0000-0000-0000-000000000000/v2.0",
    ),
    "okta": ("oidc", "https://example.okta.com/oauth2/default"),
    "keycloak": ("oidc", "https://sso.example.com/realms/corp"),
    "github": ("github", "https://github.com"),
    "oauth2": ("oauth2", "https://forge.example.com"),
    "keep": ("github", "https://github.com"),
}


def _blocks() -> dict[str, str]:
    return dict(BLOCK.findall(PAGE.read_text()))


def test_every_toml_block_is_marked() -> None:
    assert PAGE.read_text().count("```toml") == len(_blocks()) == len(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_provider_s_settings_load(name: str, tmp_path: Path) -> None:
    path = tmp_path / "mcpauth.toml"
    path.write_text(_blocks()[name])
    (provider,) = load_settings(config_file=path, environ={}).upstream
    assert (provider.kind, provider.issuer) == EXPECTED[name]
    assert provider.client_secret_env or provider.client_secret_file


def test_the_page_covers_each_provider_and_the_readme_links_it() -> None:
    headings = re.findall(r"^## (.+)$", PAGE.read_text(), re.MULTILINE)
    for provider in ("Google", "Microsoft Entra ID", "Okta", "Keycloak", "GitHub"):
        assert provider in headings
    assert "docs/upstream-providers.md" in (ROOT / "README.md").read_text()
