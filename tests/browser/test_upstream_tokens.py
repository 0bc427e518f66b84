"""Upstream tokens kept for downstream APIs, end to end (docs/security.md T37): a real `mcpauth
serve` with a real node-oidc-provider (tests/e2e/node/upstream_provider.mjs) configured with
``keep_tokens``, ``offline_access`` and ``authorization_params = { prompt = "consent" }`` (as
Google's ``access_type``/``prompt`` pair), people signing in through it in headless Chromium. The
provider's access tokens live 20 seconds, inside mcpauth's refresh margin, so every token exchange
refreshes at the provider's token endpoint (no waiting for a clock). The tokens are in no byte of
the database file; the provider's own userinfo endpoint accepts what the exchange hands out; a
refresh token the provider has revoked deletes what was kept; revoking the application on
``/account`` and removing the account each delete the kept tokens (issue #14, done-when 4)."""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterator
from contextlib import ExitStack, closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest

from mcpauth.oauth import TOKEN_EXCHANGE
from mcpauth.server.crypto import derive_key
from mcpauth.server.storage.upstream_tokens import unseal

from ..e2e.chromium_opener import CallbackListener
from ..support import MCPAUTH, free_port, run_cli, running
from .test_upstream_sign_in import NODE, PROVIDER, RESOURCE, World, sign_in_at_the_provider

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
ACCESS = "urn:ietf:params:oauth:token-type:access_token"
SECRET_KEY = "upstream-tokens-secret-0123456789"
CORP_SECRET = "corp-client-secret-0123456789"


@dataclass
class Kept(World):
    server: dict[str, str]  # the MCP server allowed to exchange: client_id, client_secret

    @property
    def database(self) -> Path:
        return Path(self.env["MCPAUTH_DATABASE_URL"].removeprefix("sqlite:///"))

    def user_id(self, login: str) -> str:
        (user,) = [u for u in self.users() if u["username"] == f"{self.corp}#{login}"]
        return str(user["id"])

    def rows(self, user_id: str) -> list[tuple[str, str, str]]:
        with closing(sqlite3.connect(self.database)) as db:
            return list(
                db.execute(
                    "SELECT user_id, provider_id, sealed FROM upstream_tokens WHERE user_id = ?",
                    (user_id,),
                )
            )

    def opened(self, user_id: str) -> tuple[str, str | None]:
        """The kept tokens, opened with the key mcpauth derives from its secret."""
        ((_, provider_id, sealed),) = self.rows(user_id)
        key = derive_key(SECRET_KEY, f"mcpauth upstream tokens {self.issuer}")
        tokens = unseal(key, user_id, provider_id, sealed)
        assert tokens is not None
        return tokens.access_token, tokens.refresh_token

    def exchange(self, subject: str) -> httpx2.Response:
        return httpx2.post(
            f"{self.issuer}/token",
            data={"grant_type": TOKEN_EXCHANGE, "subject_token": subject,
                  "subject_token_type": ACCESS, "audience": "corp"},
            auth=(self.server["client_id"], self.server["client_secret"]),
            timeout=20,
        )  # fmt: skip

    def userinfo(self, access_token: str) -> httpx2.Response:
        """The provider's own API, called with what the exchange handed out."""
        return httpx2.get(
            f"{self.corp}/me", headers={"Authorization": f"Bearer {access_token}"}, timeout=10
        )


@pytest.fixture(scope="module")
def kept(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kept]:
    folder = tmp_path_factory.mktemp("upstream-tokens")
    port, corp_port = free_port(), free_port()
    issuer, corp = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{corp_port}"
    with ExitStack() as stack:
        command = [
            str(NODE), str(PROVIDER), str(ROOT / ".npm-peers"), str(corp_port), "corp",
            "mcpauth-at-corp", CORP_SECRET, f"{issuer}/upstream/corp/callback",
        ]  # fmt: skip
        stack.enter_context(
            running(
                command,
                ready_url=f"{corp}/.well-known/openid-configuration",
                env={"UPSTREAM_ACCESS_TOKEN_TTL": "20"},
                cwd=folder,
            )
        )
        config = folder / "mcpauth.toml"
        config.write_text(
            f"""
[mcpauth]
local_accounts = false

[[mcpauth.upstream]]
id = "corp"
name = "Example Corp"
issuer = "{corp}"
client_id = "mcpauth-at-corp"
client_secret_env = "CORP_SECRET"
scopes = ["openid", "email", "profile", "offline_access"]
authorization_params = {{ prompt = "consent" }}
keep_tokens = true
release_to = ["{RESOURCE}"]
"""
        )
        env = {
            "MCPAUTH_DATABASE_URL": f"sqlite:///{folder / 'mcpauth.db'}",
            "MCPAUTH_SECRET_KEY": SECRET_KEY,
            "MCPAUTH_ISSUER": issuer,
            "MCPAUTH_CONFIG": str(config),
            "CORP_SECRET": CORP_SECRET,
        }
        added = run_cli(
            ["resources", "add", RESOURCE, "--name", "Example files", "--default",
             "--scope", "mcp:tools=Call the tools", "--default-scope", "mcp:tools"],
            env=env,
        )  # fmt: skip
        assert added.returncode == 0, added.stderr
        server = run_cli(
            ["clients", "add", "--name", "Files MCP server", "--grant-type", TOKEN_EXCHANGE,
             "--exchange-from", RESOURCE, "--exchange-to", RESOURCE],
            env=env,
        )  # fmt: skip
        assert server.returncode == 0, server.stderr
        listener = CallbackListener()
        stack.callback(listener.close)
        stack.enter_context(
            running(
                [MCPAUTH, "serve", "--port", str(port)],
                ready_url=f"{issuer}/health",
                env=env,
                cwd=folder,
            )
        )
        yield Kept(issuer, env, corp, corp, listener, json.loads(server.stdout))


def signed_in(kept: Kept, visit: Any, login: str = "alice") -> tuple[str, Any]:
    """Sign in through the provider in a fresh browser (its consent page too), approve at
    mcpauth: the MCP access token the application redeems, and the tab."""
    client_id = kept.register()
    url, verifier = kept.authorize_url(client_id)
    tab = visit()
    page = tab.page
    page.goto(url)
    page.get_by_role("button", name="Continue with Example Corp").click()
    page.wait_for_url(re.compile(re.escape(kept.corp) + "/interaction/"))
    sign_in_at_the_provider(page, login)
    page.get_by_role("button", name="Continue").click()  # the provider's own consent page
    page.wait_for_url(re.compile(re.escape(kept.issuer) + "/interaction/"))
    return kept.approve(page, client_id, verifier), tab


def stored_bytes(kept: Kept) -> bytes:
    files = [kept.database, kept.database.with_name(kept.database.name + "-wal")]
    return b"".join(path.read_bytes() for path in files if path.exists())


def test_kept_tokens_are_sealed_and_refreshed_at_the_provider_before_they_are_handed_out(
    kept: Kept, visit: Any
) -> None:
    subject, _ = signed_in(kept, visit)
    alice = kept.user_id("alice")
    first_access, first_refresh = kept.opened(alice)
    assert first_refresh is not None  # offline_access with prompt=consent
    first = kept.exchange(subject)
    assert first.status_code == 200, first.text
    handed = first.json()["access_token"]
    assert handed != first_access  # 20 s left is inside the margin: refreshed first
    me = kept.userinfo(handed)
    assert me.status_code == 200, me.text
    assert me.json()["sub"] == "alice"
    access, refresh = kept.opened(alice)
    assert access == handed
    # oidc-provider does not rotate a confidential client's young refresh token: still kept
    assert refresh == first_refresh
    second = kept.exchange(subject)
    assert second.status_code == 200, second.text
    assert second.json()["access_token"] not in (handed, first_access)
    raw = stored_bytes(kept)
    for token in (first_access, first_refresh, handed, refresh, second.json()["access_token"]):
        assert token is not None
        assert token.encode() not in raw


def test_a_refresh_token_revoked_at_the_provider_deletes_what_was_kept(
    kept: Kept, visit: Any
) -> None:
    subject, _ = signed_in(kept, visit, "bob")
    bob = kept.user_id("bob")
    _, refresh_token = kept.opened(bob)
    assert refresh_token is not None
    revoked = httpx2.post(
        f"{kept.corp}/token/revocation",
        data={"token": refresh_token, "token_type_hint": "refresh_token"},
        auth=("mcpauth-at-corp", CORP_SECRET),
        timeout=10,
    )
    assert revoked.status_code == 200, revoked.text
    refused = kept.exchange(subject)
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"] == "invalid_grant"
    assert kept.rows(bob) == []


def test_revoking_the_application_on_account_deletes_the_kept_tokens(
    kept: Kept, visit: Any
) -> None:
    """Issue #14, done-when 4: in the browser, on mcpauth's own account page."""
    subject, tab = signed_in(kept, visit, "carol")
    carol = kept.user_id("carol")
    assert len(kept.rows(carol)) == 1
    page = tab.page
    page.goto(f"{kept.issuer}/account")
    page.get_by_role("link", name=re.compile("Revoke access for Upstream test app")).click()
    page.get_by_role("button", name="Revoke access").click()
    assert "was revoked" in page.get_by_role("status").inner_text()
    assert kept.rows(carol) == []
    assert kept.exchange(subject).status_code == 400  # the subject token died with its grant


def test_removing_the_account_deletes_the_kept_tokens(kept: Kept, visit: Any) -> None:
    signed_in(kept, visit, "dave")
    dave = kept.user_id("dave")
    assert len(kept.rows(dave)) == 1
    removed = run_cli(["users", "remove", f"{kept.corp}#dave"], env=kept.env)
    assert removed.returncode == 0, removed.stderr
    assert kept.rows(dave) == []
