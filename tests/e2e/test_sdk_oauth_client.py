"""End to end with real processes on 127.0.0.1: `mcpauth serve` on a SQLite
file, and an official MCP Python SDK server (its streamable HTTP app) wrapped by
`ProtectedResourceMiddleware` under uvicorn. The official SDK client (`OAuthClientProvider` over
httpx2, in-memory storage, no prior state) discovers, registers dynamically, signs in through the
login and consent forms (the redirect handler below plays the browser), lists tools, calls a tool
that reports the caller's subject, refreshes once its access token has expired without a new
authorization, and steps up when a tool needs a scope it was not granted.

The MCP server is this module run as a program: `python -m tests.e2e.test_sdk_oauth_client
--port P --issuer URL`. The helpers here (`FormBrowser`, `MemoryStorage`, `Traffic`,
`oauth_provider`, `mcp_session`) are reused by the proxy and demo tests of this folder."""

from __future__ import annotations

import argparse
import base64
import json
import re
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import httpx2
import pytest
from mcp.client.auth import OAuthClientProvider
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)

from ..oauth import follow, forms, query, submit
from ..support import MCPAUTH, free_port, run_cli, running

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

ROOT = Path(__file__).resolve().parents[2]
USERNAME = "alice"
PASSWORD = "correct horse battery staple"
SECRET_KEY = "e2e-secret-key-0123456789abcdef0123"
ACCESS_TOKEN_TTL = 30  # the smallest lifetime `mcpauth serve` accepts


# --------------------------------------------------------------------------------------------
# the client side: storage, the stand-in browser, and a record of the HTTP traffic


class MemoryStorage:
    """The SDK's `TokenStorage` protocol in memory: the client starts with nothing."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client_info: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


@dataclass
class Authorization:
    """One trip of the stand-in browser through the authorization server."""

    url: str
    params: dict[str, str]
    pages: list[str] = field(default_factory=list)
    consent: str = ""  # the consent page's HTML, when one was shown
    error: str = ""  # what the user saw when the server refused the request


class AuthorizationRefused(Exception):
    """The authorization server showed an error page instead of redirecting back."""


def page_text(html: str) -> str:
    """What a person reads on a page: its <main>, without markup."""
    main = html[html.find("<main") : html.find("</main>")] if "<main" in html else html
    return " ".join(re.sub(r"<[^>]+>", " ", main).split())[:800]


class FormBrowser:
    """The SDK's redirect and callback handlers: the redirect handler follows the authorization
    URL with a cookie-keeping httpx client, fills the login form and approves the consent form,
    and keeps the code, state and iss of the redirect back to the client for the callback
    handler. Every authorization is recorded."""

    def __init__(self, username: str = USERNAME, password: str = PASSWORD) -> None:
        self.username = username
        self.password = password
        self.http = httpx2.AsyncClient(timeout=30)
        self.authorizations: list[Authorization] = []
        self._pending: AuthorizationCodeResult | None = None

    async def aclose(self) -> None:
        await self.http.aclose()

    async def redirect_handler(self, url: str) -> None:
        trip = Authorization(url=url, params=query(url))
        self.authorizations.append(trip)
        page = await follow(self.http, await self.http.get(url))
        for _ in range(4):
            if page.status_code != 200:
                break
            found = forms(page.text)
            assert found, f"a page without a form: {page.text[:500]}"
            if "password" in found[0].fields:
                trip.pages.append("login")
                values = {"username": self.username, "password": self.password}
                page = await follow(self.http, await submit(self.http, page, values))
            elif "action" in found[0].buttons:
                trip.pages.append("consent")
                trip.consent = page.text
                page = await follow(self.http, await submit(self.http, page, {"action": "approve"}))
            else:
                raise AssertionError(f"unexpected page: {page.text[:500]}")
        if page.status_code not in (302, 303):
            trip.error = f"{page.status_code}: {page_text(page.text)}"
            raise AuthorizationRefused(trip.error)
        back = query(page.headers["location"])
        assert "error" not in back, back
        self._pending = AuthorizationCodeResult(
            code=back["code"], state=back.get("state"), iss=back.get("iss")
        )

    async def callback_handler(self) -> AuthorizationCodeResult:
        assert self._pending is not None, "the callback came before the redirect"
        result, self._pending = self._pending, None
        return result


@dataclass
class Exchange:
    method: str
    url: str
    authorization: str
    form: dict[str, str]
    sent: Any = None  # a JSON request body
    status: int = 0
    challenge: str = ""
    content_type: str = ""
    body: dict[str, Any] = field(default_factory=dict)


class Traffic:
    """Every request the SDK client sends (MCP messages and its OAuth requests alike) with the
    answer's status, challenge and content type; token endpoint answers are kept parsed."""

    def __init__(self) -> None:
        self.exchanges: list[Exchange] = []

    async def on_request(self, request: httpx2.Request) -> None:
        form: dict[str, str] = {}
        if request.headers.get("content-type", "").startswith("application/x-www-form"):
            form = {k: v[0] for k, v in parse_qs(request.content.decode()).items()}
        sent = None
        if (
            request.headers.get("content-type", "").startswith("application/json")
            and request.content
        ):
            sent = json.loads(request.content)  # a session's DELETE carries the type but no body
        request.extensions["exchange"] = len(self.exchanges)
        authorization = request.headers.get("authorization", "")
        self.exchanges.append(Exchange(request.method, str(request.url), authorization, form, sent))

    async def on_response(self, response: httpx2.Response) -> None:
        exchange = self.exchanges[response.request.extensions["exchange"]]
        exchange.status = response.status_code
        exchange.challenge = response.headers.get("www-authenticate", "")
        exchange.content_type = response.headers.get("content-type", "")
        if exchange.form.get("grant_type"):
            exchange.body = json.loads(await response.aread())

    def to(self, url: str) -> list[Exchange]:
        return [e for e in self.exchanges if e.url.split("?")[0] == url]

    def grants(self, grant_type: str) -> list[Exchange]:
        return [e for e in self.exchanges if e.form.get("grant_type") == grant_type]


def oauth_provider(server_url: str, browser: FormBrowser) -> OAuthClientProvider:
    """The official SDK's OAuth client with no prior state: no client id, no tokens."""
    metadata = OAuthClientMetadata(
        client_name="mcpauth e2e: official SDK client",
        redirect_uris=[f"http://127.0.0.1:{free_port()}/callback"],  # type: ignore[list-item]
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        token_endpoint_auth_method="none",
    )
    return OAuthClientProvider(
        server_url,
        metadata,
        MemoryStorage(),
        redirect_handler=browser.redirect_handler,
        callback_handler=browser.callback_handler,
    )


@asynccontextmanager
async def mcp_session(
    url: str, auth: httpx2.Auth, traffic: Traffic
) -> AsyncIterator[ClientSession]:
    """An initialized SDK client session over streamable HTTP with ``auth`` on every request."""
    hooks = {"request": [traffic.on_request], "response": [traffic.on_response]}
    async with (
        httpx2.AsyncClient(auth=auth, timeout=30, event_hooks=hooks) as http,  # type: ignore[arg-type]
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


def text(result: Any) -> str:
    assert not result.is_error, result
    return str(result.content[0].text)


def claims(token: str) -> dict[str, Any]:
    """The payload of a JWT, unverified (the resource server verified it)."""
    payload = token.split(".")[1]
    return dict(json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))))


def scope_param(challenge: str) -> set[str]:
    """The space-separated `scope` of a `WWW-Authenticate: Bearer …` challenge."""
    start = challenge.index('scope="') + len('scope="')
    return set(challenge[start : challenge.index('"', start)].split())


# --------------------------------------------------------------------------------------------
# the servers


@dataclass
class AuthServer:
    issuer: str
    database: str
    env: dict[str, str]
    cwd: Path
    user_id: str = ""

    def cli(self, *args: str, stdin: str | None = None) -> str:
        result = run_cli(
            [*args, "--database", self.database], env=self.env, stdin=stdin, cwd=self.cwd
        )
        assert result.returncode == 0, f"mcpauth {' '.join(args)}: {result.stderr}"
        return result.stdout


@contextmanager
def auth_server(tmp_path: Path, resource: str, **env: str) -> Iterator[AuthServer]:
    """`mcpauth serve` on a fresh SQLite file with the user alice and ``resource`` (scopes
    mcp:tools and mcp:admin, default mcp:tools); ``env`` adds MCPAUTH_* settings."""
    port = free_port()
    server = AuthServer(
        issuer=f"http://127.0.0.1:{port}",
        database=f"sqlite:///{tmp_path / 'mcpauth.db'}",
        env={
            "MCPAUTH_SECRET_KEY": SECRET_KEY,
            "XDG_DATA_HOME": str(tmp_path / "data"),
            "HOME": str(tmp_path),
            **env,
        },
        cwd=tmp_path,
    )
    added = server.cli("users", "add", USERNAME, "--password-stdin", stdin=PASSWORD + "\n")
    server.user_id = json.loads(added)["id"]
    server.cli(
        "resources", "add", resource, "--name", "E2E MCP server",
        "--scope", "mcp:tools", "--scope", "mcp:admin", "--default-scope", "mcp:tools",
    )  # fmt: skip
    args = [MCPAUTH, "serve", "--issuer", server.issuer, "--port", str(port)]
    args += ["--database", server.database]
    with running(args, ready_url=f"{server.issuer}/health", env=server.env, cwd=tmp_path):
        yield server


def sdk_app(issuer: str, resource: str) -> Any:
    """The official SDK's MCP server, its own auth off, wrapped by the middleware."""
    from mcp.server.auth.middleware.auth_context import get_access_token
    from mcp.server.mcpserver import MCPServer

    from mcpauth.middleware import ProtectedResource, ProtectedResourceMiddleware, ScopePolicy

    server = MCPServer("e2e sdk")

    @server.tool()
    def whoami() -> str:
        """The caller as the SDK's get_access_token() reports it."""
        token = get_access_token()
        if token is None:
            return "anonymous"
        return json.dumps(
            {"subject": token.subject, "client_id": token.client_id, "scopes": token.scopes}
        )

    @server.tool()
    def admin_tool() -> str:
        """Needs mcp:admin."""
        return "admin done"

    return ProtectedResourceMiddleware(
        server.streamable_http_app(),
        resource=ProtectedResource(
            resource, scopes_supported=["mcp:tools", "mcp:admin"], name="E2E MCP server"
        ),
        authorization_servers=[issuer],
        policy=ScopePolicy(required="mcp:tools", tools={"admin_tool": "mcp:admin"}),
    )


def main(argv: list[str]) -> None:
    import uvicorn

    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--issuer", required=True)
    args = parser.parse_args(argv)
    resource = f"http://127.0.0.1:{args.port}/mcp"
    uvicorn.run(
        sdk_app(args.issuer, resource),
        host="127.0.0.1",
        port=args.port,
        log_level="warning",
        lifespan="on",
    )


@dataclass
class Stack:
    auth: AuthServer
    resource: str
    prm: str


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp_path = tmp_path_factory.mktemp("sdk-oauth")
    port = free_port()
    resource = f"http://127.0.0.1:{port}/mcp"
    prm = f"http://127.0.0.1:{port}/.well-known/oauth-protected-resource/mcp"
    ttl = {"MCPAUTH_ACCESS_TOKEN_TTL": str(ACCESS_TOKEN_TTL)}
    with auth_server(tmp_path, resource, **ttl) as auth:
        program = [sys.executable, "-m", "tests.e2e.test_sdk_oauth_client"]
        program += ["--port", str(port), "--issuer", auth.issuer]
        with running(program, ready_url=prm, env={"PYTHONPATH": str(ROOT)}, cwd=tmp_path):
            yield Stack(auth, resource, prm)


# --------------------------------------------------------------------------------------------
# the tests


async def test_rs01_rs08_a_new_sdk_client_discovers_registers_signs_in_and_the_tool_sees_the_user(
    stack: Stack,
) -> None:
    browser = FormBrowser()
    traffic = Traffic()
    provider = oauth_provider(stack.resource, browser)
    try:
        async with mcp_session(stack.resource, provider, traffic) as session:
            tools = sorted(tool.name for tool in (await session.list_tools()).tools)
            caller = json.loads(text(await session.call_tool("whoami", {})))
    finally:
        await browser.aclose()

    assert tools == ["admin_tool", "whoami"]
    assert caller["subject"] == stack.auth.user_id
    assert caller["scopes"] == ["mcp:tools"]
    # discovery: a 401 naming the metadata, the metadata, then the authorization server's
    first = traffic.exchanges[0]
    assert (first.status, first.authorization) == (401, "")
    assert f'resource_metadata="{stack.prm}"' in first.challenge
    assert [e.status for e in traffic.to(stack.prm)] == [200]
    metadata_url = f"{stack.auth.issuer}/.well-known/oauth-authorization-server"
    assert [e.status for e in traffic.to(metadata_url)] == [200]
    # dynamic registration, one authorization through both forms, one code redeemed
    assert [e.status for e in traffic.to(f"{stack.auth.issuer}/register")] == [201]
    assert caller["client_id"] == provider.context.client_info.client_id  # type: ignore[union-attr]
    assert len(browser.authorizations) == 1
    trip = browser.authorizations[0]
    assert trip.pages == ["login", "consent"]
    assert trip.params["resource"] == stack.resource
    assert trip.params["scope"] == "mcp:tools"
    assert trip.params["code_challenge_method"] == "S256"
    [redeemed] = traffic.grants("authorization_code")
    assert redeemed.status == 200
    assert redeemed.form["resource"] == stack.resource
    token = redeemed.body["access_token"]
    assert claims(token)["aud"] == stack.resource
    assert claims(token)["sub"] == stack.auth.user_id
    assert redeemed.body["expires_in"] == ACCESS_TOKEN_TTL
    # every MCP request after the sign-in carried the token and was accepted
    mcp_calls = [e for e in traffic.to(stack.resource) if e.authorization]
    assert mcp_calls
    assert {e.authorization for e in mcp_calls} == {f"Bearer {token}"}
    assert all(e.status in (200, 202) for e in mcp_calls)


async def test_rs21_once_the_access_token_expires_the_sdk_client_refreshes_without_reauthorizing(
    stack: Stack,
) -> None:
    browser = FormBrowser()
    traffic = Traffic()
    provider = oauth_provider(stack.resource, browser)
    try:
        async with mcp_session(stack.resource, provider, traffic) as session:
            before = json.loads(text(await session.call_tool("whoami", {})))
            [redeemed] = traffic.grants("authorization_code")
            old_access = redeemed.body["access_token"]
            old_refresh = redeemed.body["refresh_token"]
            issued = claims(old_access)
            assert issued["exp"] - issued["iat"] == ACCESS_TOKEN_TTL

            # The access token lives 30 s (the server's minimum). Rather than sleep through it,
            # move the SDK client's own clock for the token to its end, the state its
            # OAuthContext keeps from `expires_in`: the next request must refresh first.
            provider.context.token_expiry_time = time.time() - 1
            seen = len(traffic.exchanges)
            after = json.loads(text(await session.call_tool("whoami", {})))
            later = traffic.exchanges[seen:]
    finally:
        await browser.aclose()

    assert len(browser.authorizations) == 1, "the refresh must not need the browser"
    # the server saw a refresh_token grant for this resource and rotated the refresh token
    [refreshed] = traffic.grants("refresh_token")
    assert refreshed in later
    assert refreshed.form["refresh_token"] == old_refresh
    assert refreshed.form["resource"] == stack.resource
    assert refreshed.status == 200, refreshed.body
    new_access = refreshed.body["access_token"]
    assert new_access != old_access
    assert refreshed.body["refresh_token"] != old_refresh
    renewed = claims(new_access)
    assert renewed["sub"] == issued["sub"] == stack.auth.user_id
    assert renewed["jti"] != issued["jti"]
    assert renewed["aud"] == stack.resource
    # the resource server accepted the refreshed token, and the tool saw the same caller
    calls = [e for e in later if e.url == stack.resource and e.method == "POST"]
    assert calls
    assert {e.authorization for e in calls} == {f"Bearer {new_access}"}
    assert all(e.status == 200 for e in calls)
    assert after == before
    assert not [e for e in traffic.exchanges if e.status == 401][1:], "only the first 401"


async def test_rs12_rs13_a_403_insufficient_scope_makes_the_sdk_client_step_up_to_the_scope_union(
    stack: Stack,
) -> None:
    browser = FormBrowser()
    traffic = Traffic()
    provider = oauth_provider(stack.resource, browser)
    result: str | None = None
    after: dict[str, Any] = {}
    failure: Exception | None = None
    try:
        async with mcp_session(stack.resource, provider, traffic) as session:
            json.loads(text(await session.call_tool("whoami", {})))
            result = text(await session.call_tool("admin_tool", {}))
            after = json.loads(text(await session.call_tool("whoami", {})))
    except Exception as exc:  # the SDK's transport reports a failed step-up as an error group
        failure = exc
    finally:
        await browser.aclose()

    # the resource server's challenge: every scope the call needs (RS-12, RS-14)
    refused = [e for e in traffic.exchanges if e.status == 403]
    assert len(refused) == 1
    assert refused[0].challenge.startswith('Bearer error="insufficient_scope"')
    assert scope_param(refused[0].challenge) == {"mcp:admin", "mcp:tools"}
    assert f'resource_metadata="{stack.prm}"' in refused[0].challenge
    # what the official SDK client (mcp 2.3.0) does on it: a second authorization request, for
    # the union of the scopes, with the same client registration and the same resource
    assert len(browser.authorizations) == 2
    first, second = browser.authorizations
    assert first.params["scope"] == "mcp:tools"
    assert set(second.params["scope"].split()) == {"mcp:tools", "mcp:admin"}
    assert second.params["resource"] == stack.resource
    assert second.params["client_id"] == first.params["client_id"]
    [registration] = [e for e in traffic.exchanges if e.url.endswith("/register")]
    assert registration.sent["scope"] == "mcp:tools"  # the SDK registers the first challenge
    # the authorization server must let the user consent to the wider scope
    assert not second.error, (
        "the authorization server refused the SDK client's step-up: "
        f"GET /authorize?scope={second.params['scope']} -> {second.error}"
    )
    assert failure is None, failure
    assert second.pages == ["consent"]  # the session cookie spares the login
    assert "<code>mcp:admin</code>" in second.consent
    assert result == "admin done"
    assert len(traffic.grants("authorization_code")) == 2
    assert not traffic.grants("refresh_token")
    assert sorted(after["scopes"]) == ["mcp:admin", "mcp:tools"]
    assert after["subject"] == stack.auth.user_id


if __name__ == "__main__":
    main(sys.argv[1:])
