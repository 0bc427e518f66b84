"""Sign-in with GitHub in a real headless Chromium, against a stand-in for GitHub, not GitHub:
tests/github_standin.py started on 127.0.0.1 serves the responses GitHub documents (its
authorization page replaced by a plain account chooser), configured as a GitHub Enterprise
Server (``kind = "github"``, ``issuer`` the stand-in) and as a generic ``kind = "oauth2"``
provider on the same API, for a real `mcpauth serve`. The person presses "Continue with
GitHub", authorizes there and comes back to consent with an account keyed by GitHub's numeric
id; an unverified primary email is refused where a domain is required and kept as unverified
where none is; a GitHub API that is down is a plain page with a way back and no account."""

from __future__ import annotations

import re
import sqlite3
import sys
from collections.abc import Iterator
from contextlib import ExitStack, closing
from pathlib import Path
from typing import Any

import httpx2
import pytest

from ..e2e.chromium_opener import CallbackListener
from ..support import MCPAUTH, free_port, run_cli, running
from .test_upstream_sign_in import RESOURCE, World, claims_of

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
CLIENT_ID = "Iv1.browser0123456"
SECRET = "github-browser-secret-0123456789"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    folder = tmp_path_factory.mktemp("upstream-github")
    port, standin_port = free_port(), free_port()
    issuer = f"http://127.0.0.1:{port}"
    standin = f"http://127.0.0.1:{standin_port}"
    with ExitStack() as stack:
        command = [
            sys.executable, "-m", "tests.github_standin", "--port", str(standin_port),
            "--client-id", CLIENT_ID, "--client-secret", SECRET,
            "--redirect-uri", f"{issuer}/upstream/github/callback",
            "--redirect-uri", f"{issuer}/upstream/forge/callback",
        ]  # fmt: skip
        stack.enter_context(
            running(
                command,
                ready_url=f"{standin}/_standin/requests",
                env={"PYTHONPATH": str(ROOT)},
                cwd=folder,
            )
        )
        config = folder / "mcpauth.toml"
        config.write_text(
            f"""
[mcpauth]
service_name = "Example Corp sign-in"
local_accounts = false

[[mcpauth.upstream]]
id = "github"
name = "GitHub"
kind = "github"
issuer = "{standin}"
client_id = "{CLIENT_ID}"
client_secret_env = "GITHUB_SECRET"
allowed_email_domains = ["example.com"]

[[mcpauth.upstream]]
id = "forge"
name = "Forge"
kind = "oauth2"
issuer = "{standin}/forge"
authorization_endpoint = "{standin}/login/oauth/authorize"
token_endpoint = "{standin}/login/oauth/access_token"
userinfo_endpoint = "{standin}/api/v3/user"
token_endpoint_auth_method = "client_secret_post"
claim_mapping = {{ subject = "id", name = "login" }}
client_id = "{CLIENT_ID}"
client_secret_env = "GITHUB_SECRET"
"""
        )
        env = {
            "MCPAUTH_DATABASE_URL": f"sqlite:///{folder / 'mcpauth.db'}",
            "MCPAUTH_SECRET_KEY": "upstream-github-secret-0123456789",
            "MCPAUTH_ISSUER": issuer,
            "MCPAUTH_CONFIG": str(config),
            "GITHUB_SECRET": SECRET,
        }
        added = run_cli(
            ["resources", "add", RESOURCE, "--name", "Repositories", "--default",
             "--scope", "mcp:tools=Call the tools", "--default-scope", "mcp:tools"],
            env=env,
        )  # fmt: skip
        assert added.returncode == 0, added.stderr
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
        yield World(issuer, env, standin, standin, listener)


def standin_requests(world: World) -> dict[str, Any]:
    return dict(httpx2.get(f"{world.corp}/_standin/requests", timeout=10).json())


def identity(world: World, subject: str) -> tuple[Any, ...] | None:
    database = world.env["MCPAUTH_DATABASE_URL"].removeprefix("sqlite:///")
    with closing(sqlite3.connect(database)) as db:
        row = db.execute(
            "SELECT issuer, email, email_verified, name FROM upstream_identities WHERE subject = ?",
            (subject,),
        ).fetchone()
    return tuple(row) if row is not None else None


def authorize_at_github(page: Any, world: World, login: str) -> None:
    """The stand-in's authorization page: choose the account, press Authorize."""
    page.wait_for_url(re.compile(re.escape(world.corp) + "/login/oauth/authorize"))
    page.get_by_label("Account").select_option(login)
    page.get_by_role("button", name="Authorize").click()


def test_chromium_signs_in_with_github_reaches_consent_and_the_app_gets_a_code(
    world: World, visit: Any
) -> None:
    client_id = world.register()
    url, verifier = world.authorize_url(client_id)
    tab = visit()
    page = tab.page
    page.goto(url)
    assert page.get_by_role("button", name="Continue with GitHub").is_visible()
    assert page.get_by_role("button", name="Continue with Forge").is_visible()
    assert page.get_by_label("Password").count() == 0  # local_accounts = false
    page.get_by_role("button", name="Continue with GitHub").click()
    authorize_at_github(page, world, "octocat")
    page.wait_for_url(re.compile(re.escape(world.issuer) + "/interaction/"))
    assert page.get_by_role("heading", name="Authorize Upstream test app?").is_visible()
    assert page.get_by_text("octocat@example.com").is_visible()  # the verified primary email
    (user,) = [u for u in world.users() if u["username"].endswith("#583231")]
    assert user["username"] == f"{world.corp}#583231"  # GitHub's numeric id, not the login
    sent = standin_requests(world)["authorization"][-1]
    assert sent["code_challenge_method"] == "S256"
    assert "nonce" not in sent
    claims = claims_of(world.approve(page, client_id, verifier))
    assert claims["sub"] == user["id"]
    assert claims["aud"] == RESOURCE


def test_an_unverified_primary_email_is_refused_for_github_and_kept_unverified_by_forge(
    world: World, visit: Any
) -> None:
    """GitHub requires example.com, and hubot's primary address there is unverified: a plain
    page and no account. Forge has no domain policy: hubot signs in, the address unverified."""
    before = world.users()
    tab = visit()
    page = tab.page
    page.goto(world.authorize_url(world.register())[0])
    page.get_by_role("button", name="Continue with GitHub").click()
    authorize_at_github(page, world, "hubot")
    page.wait_for_url(re.compile(re.escape(world.issuer) + "/upstream/github/callback"))
    assert page.get_by_role("heading", name="You can't sign in with this account").is_visible()
    assert "is not verified" in page.get_by_role("alert").inner_text()
    tab.problems.expect_status(403)
    tab.check("upstream-github-unverified")
    assert world.users() == before
    assert identity(world, "1000002") is None
    page.get_by_role("link", name="Back to sign-in").click()
    page.get_by_role("button", name="Continue with Forge").click()
    authorize_at_github(page, world, "hubot")
    page.wait_for_url(re.compile(re.escape(world.issuer) + "/interaction/"))
    assert page.get_by_role("heading", name="Authorize Upstream test app?").is_visible()
    assert identity(world, "1000002") == (f"{world.corp}/forge", "hubot@example.com", 0, "hubot")


def test_a_github_api_that_is_down_is_a_plain_page_with_a_way_back(
    world: World, visit: Any
) -> None:
    before = world.users()
    tab = visit()
    page = tab.page
    page.goto(world.authorize_url(world.register())[0])
    page.get_by_role("button", name="Continue with GitHub").click()
    down = httpx2.post(f"{world.corp}/_standin/api", json={"down": True}, timeout=10)
    assert down.json() == {"down": True}
    try:
        authorize_at_github(page, world, "octocat")
        page.wait_for_url(re.compile(re.escape(world.issuer) + "/upstream/github/callback"))
        assert page.get_by_role("heading", name="GitHub can't be reached").is_visible()
        assert "not possible right now" in page.get_by_role("alert").inner_text()
        tab.problems.expect_status(502)
        tab.check("upstream-github-down")
        assert standin_requests(world)["api"][-1] == "GET /api/v3/user"
    finally:
        httpx2.post(f"{world.corp}/_standin/api", json={"down": False}, timeout=10)
    assert world.users() == before
    page.get_by_role("link", name="Back to sign-in").click()
    assert page.get_by_role("button", name="Continue with GitHub").is_visible()
