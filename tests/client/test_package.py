"""Package hygiene: the dependency direction and an honest ``__all__``."""

from __future__ import annotations

import subprocess
import sys

import mcpauth.client


def test_importing_the_client_pulls_in_no_server_authlib_or_sqlmodel() -> None:
    code = (
        "import sys, mcpauth.client, mcpauth.client.cli; "
        "bad = [m for m in ('mcpauth.server', 'mcpauth.middleware', 'authlib', 'sqlmodel', 'mcp') "
        "if m in sys.modules]; "
        "print(','.join(bad))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == ""


def test_all_names_exist_and_are_sorted() -> None:
    names = mcpauth.client.__all__
    assert names == sorted(names)
    for name in names:
        assert getattr(mcpauth.client, name) is not None


def test_all_lists_every_public_name_the_package_exports() -> None:
    # dir(): the names bound so far and those bound on first use (the package's __getattr__)
    public = {n for n in dir(mcpauth.client) if not n.startswith("_")}
    modules = {n for n in public if type(getattr(mcpauth.client, n)).__name__ == "module"}
    assert public - modules == set(mcpauth.client.__all__)


def test_oauth_is_both_an_httpx_and_an_httpx2_auth() -> None:
    import httpx2

    assert issubclass(mcpauth.client.OAuth, httpx2.Auth)
    assert issubclass(mcpauth.client.OAuth, httpx2.Auth)
