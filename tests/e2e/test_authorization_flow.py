"""End to end with real processes on 127.0.0.1: `mcpauth serve` on a SQLite
file, a user from `mcpauth users add`, a resource from `mcpauth resources add`; a public client
registers dynamically, follows the authorization URL through the login and consent HTML forms,
redeems the code with its PKCE verifier and `resource`, and gets an RFC 9068 JWT that verifies
against the JWKS with `aud` = the resource. Refresh rotates; a rotated refresh token replayed
within the reuse grace gets a new pair and leaves the newest token live; a replayed code kills
its grant.

The helpers here (`auth_server`, `Browser`) are reused by the concurrency and conformance tests
of this folder."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urljoin, urlsplit

import httpx2
import pytest

from mcpauth import jwt

from ..oauth import forms, pkce_pair, query
from ..support import MCPAUTH, free_port, run_cli, running

pytestmark = pytest.mark.e2e

USERNAME = "alice"
PASSWORD = "correct horse battery staple"
RESOURCE = "https://mcp.example.com/mcp"
SCOPES = ("mcp:read=Read MCP tools", "mcp:write=Call MCP tools that change things")
SECRET_KEY = "e2e-secret-key-0123456789abcdef0123"


@dataclass
class AuthServer:
    """A running `mcpauth serve` process and the settings it was started with."""

    issuer: str
    port: int
    database: str
    env: dict[str, str]
    cwd: Path
    process: subprocess.Popen[bytes] | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    def cli(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        """Run an admin command against the server's database; fail loudly if it fails."""
        result = run_cli(
            [*args, "--database", self.database], env=self.env, stdin=stdin, cwd=self.cwd
        )
        assert result.returncode == 0, f"mcpauth {' '.join(args)}: {result.stderr}"
        return result

    def add_client(self, *args: str) -> dict[str, Any]:
        return dict(json.loads(self.cli("clients", "add", *args).stdout))

    @property
    def token_endpoint(self) -> str:
        return str(self.metadata["token_endpoint"])

    def key_set(self) -> dict[str, jwt.VerificationKey]:
        return jwt.key_set(httpx2.get(self.metadata["jwks_uri"], timeout=10).json())


@contextmanager
def auth_server(
    tmp_path: Path, *, port: int | None = None, extra_env: dict[str, str] | None = None
) -> Iterator[AuthServer]:
    """`mcpauth serve` on a fresh SQLite file with user alice and the resource RESOURCE
    (scopes mcp:read and mcp:write, default mcp:read), stopped when the block ends;
    ``extra_env`` goes to the server and the admin commands."""
    port = port or free_port()
    issuer = f"http://127.0.0.1:{port}"
    env = {
        "MCPAUTH_SECRET_KEY": SECRET_KEY,
        # nothing may leak into (or come from) the real per-user data directory
        "XDG_DATA_HOME": str(tmp_path / "data"),
        "HOME": str(tmp_path),
        **(extra_env or {}),
    }
    server = AuthServer(
        issuer=issuer,
        port=port,
        database=f"sqlite:///{tmp_path / 'mcpauth.db'}",
        env=env,
        cwd=tmp_path,
    )
    server.cli("users", "add", USERNAME, "--password-stdin", stdin=PASSWORD + "\n")
    scope_args = [a for s in SCOPES for a in ("--scope", s)]
    server.cli(
        "resources", "add", RESOURCE, "--name", "Example MCP server", *scope_args,
        "--default-scope", "mcp:read",
    )  # fmt: skip
    args = [
        MCPAUTH,
        "serve",
        "--issuer",
        issuer,
        "--port",
        str(port),
        "--database",
        server.database,
    ]
    with running(args, ready_url=f"{issuer}/health", env=env, cwd=tmp_path) as process:
        server.process = process
        response = httpx2.get(f"{issuer}/.well-known/oauth-authorization-server", timeout=10)
        assert response.status_code == 200, response.text
        server.metadata = response.json()
        assert server.metadata["issuer"] == issuer
        yield server


def _same_origin(a: str, b: str) -> bool:
    return urlsplit(a).netloc == urlsplit(b).netloc


class Browser:
    """A user agent with a cookie jar that follows the server's redirects and fills its forms;
    it stops at the first redirect that leaves the authorization server (to the client)."""

    def __init__(self, issuer: str) -> None:
        self.issuer = issuer
        self.http = httpx2.Client(timeout=30)

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def follow(self, response: httpx2.Response) -> httpx2.Response:
        for _ in range(10):
            if response.status_code not in (302, 303) or "location" not in response.headers:
                return response
            location = urljoin(str(response.request.url), response.headers["location"])
            if not _same_origin(location, self.issuer):
                return response
            response = self.http.get(location)
        raise AssertionError("too many redirects inside the authorization server")

    def submit(self, page: httpx2.Response, values: dict[str, str]) -> httpx2.Response:
        form = forms(page.text)[0]
        action = urljoin(str(page.request.url), form.action)
        return self.follow(self.http.post(action, data={**form.fields, **values}))

    def authorize(
        self,
        url: str,
        *,
        username: str = USERNAME,
        password: str = PASSWORD,
        action: str = "approve",
    ) -> tuple[httpx2.Response, list[str]]:
        """Open ``url`` and go through whatever pages come: login, consent. Returns the response
        that redirects back to the client and the names of the pages that were shown."""
        shown: list[str] = []
        page = self.follow(self.http.get(url))
        for _ in range(4):
            if page.status_code != 200:
                break
            found = forms(page.text)
            assert found, f"a page without a form: {page.text[:500]}"
            if "password" in found[0].fields:
                assert "csrf_token" in found[0].fields
                shown.append("login")
                page = self.submit(page, {"username": username, "password": password})
            elif "action" in found[0].buttons:
                assert "csrf_token" in found[0].fields
                assert sorted(found[0].buttons["action"]) == ["approve", "deny"]
                shown.append("consent")
                page = self.submit(page, {"action": action})
            else:
                raise AssertionError(f"unexpected page: {page.text[:500]}")
        assert page.status_code in (302, 303), f"{page.status_code}: {page.text[:500]}"
        return page, shown


@dataclass
class Authorization:
    client_id: str
    redirect_uri: str
    verifier: str
    code: str
    state: str


def register_public_client(server: AuthServer, redirect_uri: str) -> str:
    response = httpx2.post(
        server.metadata["registration_endpoint"],
        json={
            "client_name": "E2E test client",
            "redirect_uris": [redirect_uri],
            "token_endpoint_auth_method": "none",
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
        },
        timeout=10,
    )
    assert response.status_code == 201, response.text
    body = response.json()
    assert "client_secret" not in body
    return str(body["client_id"])


def authorization_url(
    server: AuthServer, client_id: str, redirect_uri: str, challenge: str, state: str, **extra: str
) -> str:
    params = {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": redirect_uri,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "state": state,
        "resource": RESOURCE,
        "scope": "mcp:read mcp:write",
        **extra,
    }
    return f"{server.metadata['authorization_endpoint']}?{urlencode(params)}"


def authorize(
    server: AuthServer, browser: Browser, client_id: str, redirect_uri: str, *, pages: list[str]
) -> Authorization:
    """One authorization request through the forms; asserts which pages were shown and the
    RFC 9207 / state parameters of the redirect back to the client."""
    verifier, challenge = pkce_pair()
    state = os.urandom(8).hex()
    response, shown = browser.authorize(
        authorization_url(server, client_id, redirect_uri, challenge, state)
    )
    assert shown == pages
    location = response.headers["location"]
    assert location.startswith(redirect_uri + "?")
    params = query(location)
    assert "error" not in params, params
    assert params["state"] == state
    assert params["iss"] == server.issuer
    return Authorization(client_id, redirect_uri, verifier, params["code"], state)


def redeem(server: AuthServer, auth: Authorization, **extra: str) -> httpx2.Response:
    return httpx2.post(
        server.token_endpoint,
        data={
            "grant_type": "authorization_code",
            "code": auth.code,
            "redirect_uri": auth.redirect_uri,
            "code_verifier": auth.verifier,
            "client_id": auth.client_id,
            "resource": RESOURCE,
            **extra,
        },
        timeout=30,
    )


def refresh(server: AuthServer, client_id: str, refresh_token: str) -> httpx2.Response:
    return httpx2.post(
        server.token_endpoint,
        data={
            "grant_type": "refresh_token",
            "refresh_token": refresh_token,
            "client_id": client_id,
            "resource": RESOURCE,
        },
        timeout=30,
    )


def assert_invalid_grant(response: httpx2.Response) -> None:
    assert response.status_code == 400, response.text
    assert response.json()["error"] == "invalid_grant"
    assert "no-store" in response.headers["cache-control"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuthServer]:
    """One server for the tests of this module; each test registers its own client."""
    with auth_server(tmp_path_factory.mktemp("authserver")) as running_server:
        yield running_server


def assert_token_response(
    server: AuthServer, response: httpx2.Response, client_id: str
) -> dict[str, Any]:
    """A successful token response whose access token is an RFC 9068 JWT for RESOURCE, signed by
    a key the JWKS publishes; returns the body with the verified claims under ``claims``."""
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/json")
    assert "no-store" in response.headers["cache-control"]
    body = dict(response.json())
    assert body["token_type"] == "Bearer"
    assert 0 < body["expires_in"] <= 3600
    token = body["access_token"]
    assert jwt.unverified_header(token)["typ"] == "at+jwt"
    claims = jwt.verify(token, server.key_set(), issuer=server.issuer, audience=RESOURCE)
    assert claims["aud"] == RESOURCE
    assert claims["client_id"] == client_id
    assert claims["sub"]
    assert claims["sub"] != USERNAME
    assert claims["exp"] - claims["iat"] == body["expires_in"]
    assert sorted(claims["scope"].split()) == ["mcp:read", "mcp:write"]
    assert sorted(body["scope"].split()) == ["mcp:read", "mcp:write"]
    body["claims"] = claims
    return body


def test_a_public_client_signs_in_consents_and_gets_an_audience_bound_jwt_that_rotates(
    server: AuthServer,
) -> None:
    redirect_uri = f"http://127.0.0.1:{free_port()}/callback"
    with Browser(server.issuer) as browser:
        client_id = register_public_client(server, redirect_uri)
        auth = authorize(server, browser, client_id, redirect_uri, pages=["login", "consent"])

        first = assert_token_response(server, redeem(server, auth), client_id)
        refresh_1 = first["refresh_token"]

        rotated = assert_token_response(server, refresh(server, client_id, refresh_1), client_id)
        refresh_2 = rotated["refresh_token"]
        assert refresh_2 != refresh_1
        assert rotated["access_token"] != first["access_token"]
        assert rotated["claims"]["sub"] == first["claims"]["sub"]
        assert rotated["claims"]["jti"] != first["claims"]["jti"]

        # the rotated token again rotates: the new one is the live one
        again = assert_token_response(server, refresh(server, client_id, refresh_2), client_id)
        refresh_3 = again["refresh_token"]

        # a rotated token replayed within the grace (a retry, a parallel refresh) gets a new
        # pair of the same family, and the newest token stays live (reuse past the grace:
        # tests/server/test_refresh_grace.py, and test_crash.py with no grace)
        replayed = assert_token_response(server, refresh(server, client_id, refresh_1), client_id)
        assert replayed["claims"]["sub"] == first["claims"]["sub"]
        for token in (refresh_3, replayed["refresh_token"]):
            assert_token_response(server, refresh(server, client_id, token), client_id)


def test_a_returning_client_skips_consent_and_a_replayed_code_kills_the_grant(
    server: AuthServer,
) -> None:
    redirect_uri = "http://127.0.0.1/callback"  # loopback without a port: any port matches
    with Browser(server.issuer) as browser:
        client_id = register_public_client(server, redirect_uri)
        used_redirect = f"http://127.0.0.1:{free_port()}/callback"
        first = authorize(server, browser, client_id, used_redirect, pages=["login", "consent"])
        assert_token_response(server, redeem(server, first), client_id)

        # same user, same client, same resource and scopes: consent is remembered
        second = authorize(server, browser, client_id, used_redirect, pages=[])
        issued = assert_token_response(server, redeem(server, second), client_id)

        # a replayed code is refused and revokes everything issued from its grant
        assert_invalid_grant(redeem(server, second))
        assert_invalid_grant(refresh(server, client_id, issued["refresh_token"]))


def test_a_code_is_refused_without_the_right_verifier_or_resource_and_then_is_spent(
    server: AuthServer,
) -> None:
    redirect_uri = "http://127.0.0.1/callback"
    with Browser(server.issuer) as browser:
        client_id = register_public_client(server, redirect_uri)
        auth = authorize(server, browser, client_id, redirect_uri, pages=["login", "consent"])
        wrong_verifier, _ = pkce_pair()
        assert_invalid_grant(redeem(server, auth, code_verifier=wrong_verifier))
        # a code presented wrongly once is never good again
        assert_invalid_grant(redeem(server, auth))

        other = authorize(server, browser, client_id, redirect_uri, pages=[])
        response = redeem(server, other, resource="https://other.example.com/mcp")
        assert response.status_code == 400
        assert response.json()["error"] == "invalid_target"
        assert_invalid_grant(redeem(server, other))


def test_denying_consent_sends_access_denied_with_state_and_iss_to_the_client(
    server: AuthServer,
) -> None:
    redirect_uri = "http://127.0.0.1/callback"
    with Browser(server.issuer) as browser:
        client_id = register_public_client(server, redirect_uri)
        _, challenge = pkce_pair()
        url = authorization_url(server, client_id, redirect_uri, challenge, "s-42")
        response, shown = browser.authorize(url, action="deny")
        assert shown == ["login", "consent"]
        params = query(response.headers["location"])
        assert params["error"] == "access_denied"
        assert params["state"] == "s-42"
        assert params["iss"] == server.issuer
        assert "code" not in params
