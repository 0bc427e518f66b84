"""Sign-in through a real upstream OpenID provider in a real headless Chromium: two
node-oidc-provider instances (tests/e2e/node/upstream_provider.mjs, on 127.0.0.1) configured as
`[[mcpauth.upstream]]` providers of a real `mcpauth serve`. The person presses "Continue with
Example Corp", signs in at the provider's own page, comes back to mcpauth's consent page with
an account made just in time, approves, and the application gets a code whose token names that
account. A person from a refused email domain gets a plain page and no account; the response of
the second provider, replayed at the first one's callback, is refused (mix-up). The new pages
pass the suite's axe audit, light and dark."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import secrets
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urljoin

import httpx2
import jwt as pyjwt
import pytest
from playwright.sync_api import expect

from ..e2e.chromium_opener import CallbackListener
from ..support import MCPAUTH, free_port, run_cli, running

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
NODE = ROOT / ".node22" / "node_modules" / ".bin" / "node"
PROVIDER = ROOT / "tests" / "e2e" / "node" / "upstream_provider.mjs"
RESOURCE = "http://127.0.0.1:8124/mcp"


@dataclass
class World:
    issuer: str
    env: dict[str, str]
    corp: str  # the issuer of "Example Corp" (allowed domain example.com)
    other: str  # the issuer of "Other Corp" (no policy)
    listener: CallbackListener

    def register(self) -> str:
        response = httpx2.post(
            f"{self.issuer}/register",
            json={
                "client_name": "Upstream test app",
                "redirect_uris": [self.listener.redirect_uri],
                "token_endpoint_auth_method": "none",
            },
            timeout=10,
        )
        assert response.status_code == 201, response.text
        return str(response.json()["client_id"])

    def authorize_url(self, client_id: str) -> tuple[str, str]:
        verifier = secrets.token_urlsafe(48)
        challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest())
        params = {
            "response_type": "code",
            "client_id": client_id,
            "redirect_uri": self.listener.redirect_uri,
            "code_challenge": challenge.rstrip(b"=").decode(),
            "code_challenge_method": "S256",
            "resource": RESOURCE,
            "scope": "mcp:tools",
            "state": secrets.token_urlsafe(12),
        }
        return f"{self.issuer}/authorize?{urlencode(params)}", verifier

    def approve(self, page: Any, client_id: str, verifier: str) -> str:
        """Press Approve on mcpauth's consent page in ``page`` and redeem the code the
        application receives (RFC 9207 ``iss`` checked): the access token."""
        arrived = len(self.listener.received)
        page.get_by_role("button", name="Approve").click()
        callback = self.listener.wait(arrived + 1)
        assert callback["iss"] == self.issuer
        token = httpx2.post(
            f"{self.issuer}/token",
            data={
                "grant_type": "authorization_code", "code": callback["code"],
                "redirect_uri": self.listener.redirect_uri, "client_id": client_id,
                "code_verifier": verifier, "resource": RESOURCE,
            },
            timeout=10,
        )  # fmt: skip
        assert token.status_code == 200, token.text
        return str(token.json()["access_token"])

    def users(self) -> list[dict[str, Any]]:
        listed = run_cli(["users", "list"], env=self.env)
        assert listed.returncode == 0, listed.stderr
        return list(json.loads(listed.stdout))


def claims_of(access_token: str) -> dict[str, Any]:
    return dict(pyjwt.decode(access_token, options={"verify_signature": False}))


def _provider(stack: ExitStack, folder: Path, name: str, callback: str) -> str:
    port = free_port()
    issuer = f"http://127.0.0.1:{port}"
    command = [
        str(NODE),
        str(PROVIDER),
        str(ROOT / ".npm-peers"),
        str(port),
        name,
        f"mcpauth-at-{name}",
        f"{name}-client-secret-0123456789",
        callback,
    ]
    stack.enter_context(
        running(command, ready_url=f"{issuer}/.well-known/openid-configuration", cwd=folder)
    )
    return issuer


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    folder = tmp_path_factory.mktemp("upstream-sign-in")
    port = free_port()
    issuer = f"http://127.0.0.1:{port}"
    with ExitStack() as stack:
        corp = _provider(stack, folder, "corp", f"{issuer}/upstream/corp/callback")
        other = _provider(stack, folder, "other", f"{issuer}/upstream/other/callback")
        config = folder / "mcpauth.toml"
        config.write_text(
            f"""
[mcpauth]
service_name = "Example Corp sign-in"

[[mcpauth.upstream]]
id = "corp"
name = "Example Corp"
issuer = "{corp}"
client_id = "mcpauth-at-corp"
client_secret_env = "CORP_SECRET"
allowed_email_domains = ["example.com"]
scopes = ["openid", "email", "profile", "groups"]  # as Okta: groups only when asked for

[[mcpauth.upstream]]
id = "other"
name = "Other Corp"
issuer = "{other}"
client_id = "mcpauth-at-other"
client_secret_file = "{folder / "other.secret"}"
"""
        )
        (folder / "other.secret").write_text("other-client-secret-0123456789\n")
        env = {
            "MCPAUTH_DATABASE_URL": f"sqlite:///{folder / 'mcpauth.db'}",
            "MCPAUTH_SECRET_KEY": "upstream-browser-secret-0123456789",
            "MCPAUTH_ISSUER": issuer,
            "MCPAUTH_CONFIG": str(config),
            "CORP_SECRET": "corp-client-secret-0123456789",
        }
        added = run_cli(
            [
                "resources",
                "add",
                RESOURCE,
                "--name",
                "Example files",
                "--default",
                "--scope",
                "mcp:tools=Call the tools",
                "--default-scope",
                "mcp:tools",
                "--claim",
                "email",
                "--claim",
                "groups",
            ],
            env=env,
        )
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
        yield World(issuer, env, corp, other, listener)


def sign_in_at_the_provider(page: Any, login: str) -> None:
    """oidc-provider's own sign-in form (devInteractions): any password will do."""
    page.locator("input[name=login]").fill(login)
    page.locator("input[name=password]").fill("any password")
    page.locator("button.login-submit").click()


def test_chromium_signs_in_through_the_provider_reaches_consent_and_the_app_gets_a_code(
    world: World, visit: Any
) -> None:
    client_id = world.register()
    url, verifier = world.authorize_url(client_id)
    tab = visit()
    page = tab.page
    page.goto(url)
    assert page.get_by_role("button", name="Continue with Example Corp").is_visible()
    assert page.get_by_role("button", name="Continue with Other Corp").is_visible()
    assert page.get_by_label("Password").is_visible()  # local accounts stay on by default
    tab.check("login-upstream")
    page.get_by_role("button", name="Continue with Example Corp").click()
    page.wait_for_url(re.compile(re.escape(world.corp) + "/interaction/"))
    sign_in_at_the_provider(page, "alice")
    page.wait_for_url(re.compile(re.escape(world.issuer) + "/interaction/"))
    assert page.get_by_role("heading", name="Authorize Upstream test app?").is_visible()
    assert page.get_by_text("alice@example.com").is_visible()  # the account's name on the page
    # the resource's tokens carry the person's email and groups (--claim): the page says so
    told = "Example files will be told your verified email address and the groups you belong to."
    assert page.get_by_text(told).is_visible()
    (user,) = world.users()  # made just in time, named by (issuer, subject)
    assert user["username"] == f"{world.corp}#alice"
    claims = claims_of(world.approve(page, client_id, verifier))
    assert claims["sub"] == user["id"]
    assert claims["aud"] == RESOURCE
    # the resource asks for the person's email and groups, as the provider's ID token had them
    assert (claims["email"], claims["groups"]) == ("alice@example.com", ["mcp-users"])


def test_a_person_from_another_email_domain_gets_a_plain_page_and_no_account(
    world: World, visit: Any
) -> None:
    before = world.users()
    tab = visit()
    page = tab.page
    page.goto(world.authorize_url(world.register())[0])
    page.get_by_role("button", name="Continue with Example Corp").click()
    page.wait_for_url(re.compile(re.escape(world.corp) + "/interaction/"))
    sign_in_at_the_provider(page, "mallory")  # mallory@other.example, verified
    page.wait_for_url(re.compile(re.escape(world.issuer) + "/upstream/corp/callback"))
    assert page.get_by_role("heading", name="You can't sign in with this account").is_visible()
    assert "other.example can't sign in to this service" in page.get_by_role("alert").inner_text()
    # the provider's own pages (a web font from the internet) are not ours to audit
    tab.problems.console_errors.clear()
    tab.problems.failed_requests.clear()
    tab.problems.expect_status(403)
    tab.check("upstream-refused")
    page.get_by_role("link", name="Back to sign-in").click()
    assert page.get_by_role("button", name="Continue with Example Corp").is_visible()
    assert world.users() == before
    assert not world.listener.received or "error" not in world.listener.received[-1]


def test_mix_up_the_second_provider_s_response_at_the_first_one_s_callback_is_refused(
    world: World, visit: Any
) -> None:
    before = world.users()
    tab = visit()
    page = tab.page
    held: list[str] = []

    def hold(route: Any) -> None:
        """The provider's sign-in form post and its last redirect, made here: keep the URL it
        sends the browser to at mcpauth's callback, and do not let the browser deliver it (the
        attacker will, at the other callback)."""
        if route.request.method != "POST":
            route.continue_()
            return
        signed_in = route.fetch(max_redirects=0)  # 303 to the provider's resume step
        resume = urljoin(world.other, signed_in.headers["location"])
        answer = page.context.request.get(resume, max_redirects=0)
        held.append(answer.headers["location"])
        route.fulfill(
            status=200, content_type="text/html", body="<!doctype html><title>held</title>"
        )

    page.route(re.compile(re.escape(world.other) + r"/interaction/"), hold)
    page.goto(world.authorize_url(world.register())[0])
    page.get_by_role("button", name="Continue with Other Corp").click()
    page.wait_for_url(re.compile(re.escape(world.other) + "/interaction/"))
    sign_in_at_the_provider(page, "bob")
    expect(page).to_have_title("held")  # waits for the form post to be answered
    (response,) = held
    assert response.startswith(f"{world.issuer}/upstream/other/callback?")
    assert "code=" in response
    assert f"iss={quote(world.other, safe='')}" in response  # RFC 9207: the provider's own
    replayed = response.replace("/upstream/other/callback", "/upstream/corp/callback")
    page.goto(replayed)
    assert page.get_by_role("heading", name="This sign-in was refused").is_visible()
    assert "another sign-in option" in page.get_by_role("alert").inner_text()
    # and the response is spent: delivering it where it belonged is refused too
    page.goto(response)
    assert page.get_by_role("heading", name="This page has expired").is_visible()
    assert world.users() == before
