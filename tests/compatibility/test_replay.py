"""Each real MCP client's way through the authorization server, replayed in process: its
registration (or the operator's), its authorization request with its redirect URI, scopes,
`resource` and `state`, sign-in and consent as a person does, its code exchange with its client
authentication, then its refresh pattern (parallel, retried, with a `scope`, without `resource`).
Every replay must end with an access token for the right audience and a grant still alive: one
more refresh with the newest refresh token works. docs/clients.md is the table of these."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx2
import pytest
from starlette.applications import Starlette

from mcpauth import jwt
from mcpauth.server import Settings, admin, create_app

from ..conftest import ISSUER
from ..oauth import pkce_pair, sign_in_and_approve
from ..server.conftest import PASSWORD, add_user
from .profiles import AS_ALL, CODE, ORIGIN_RESOURCE, PROFILES, RESOURCE, Profile, Refresh

pytestmark = pytest.mark.anyio


@pytest.fixture
def app(make_settings: Callable[..., Settings], password_hash: str) -> Starlette:
    """The server as an operator starts it: nothing set for any particular client."""
    app = create_app(make_settings())
    ctx = app.state.mcpauth
    admin.add_resource(
        ctx,
        RESOURCE,
        name="Files",
        scopes=["mcp:tools=Use the tools", "mcp:admin=Administer"],
        default_scopes=["mcp:tools"],
        is_default=True,
    )
    admin.add_resource(ctx, ORIGIN_RESOURCE + "/", name="Notes", scopes=["mcp:tools"])
    add_user(app, "alice", password_hash)
    return app


def client_at(app: Starlette, address: str) -> httpx2.AsyncClient:
    transport = httpx2.ASGITransport(app=app, client=(address, 50000))
    return httpx2.AsyncClient(transport=transport, base_url=ISSUER)


async def as_all(http: httpx2.AsyncClient) -> str:
    metadata = await http.get("/.well-known/oauth-authorization-server")
    return " ".join(metadata.json()["scopes_supported"])


def claims_of(app: Starlette, token: str) -> dict[str, Any]:
    keys = jwt.key_set(app.state.mcpauth.keys.jwks())
    return jwt.verify(token, keys, issuer=ISSUER, audience=None)


class Replay:
    """One client's state: its registration and its newest tokens."""

    def __init__(self, app: Starlette, http: httpx2.AsyncClient, profile: Profile) -> None:
        self.app, self.http, self.profile = app, http, profile
        self.client_id = ""
        self.secret: str | None = None

    async def register(self) -> None:
        p = self.profile
        if p.registration is None:
            made = admin.add_client(
                self.app.state.mcpauth,
                name=p.name,
                redirect_uris=[p.redirect_uri],
                grant_types=CODE,
                **p.static,
            )
            self.client_id, self.secret = made["client_id"], made.get("client_secret")
            return
        for _ in range(p.registrations):
            response = await self.http.post("/register", json=p.registration)
            assert response.status_code == 201, response.text
            body = response.json()
            # what the strict clients parse: metadata echoed, no null or "" URL fields
            assert body["redirect_uris"] == p.registration["redirect_uris"]
            assert all(v not in (None, "") for k, v in body.items() if k.endswith("_uri"))
            assert body["registration_client_uri"]
            assert body["registration_access_token"]
        self.client_id, self.secret = body["client_id"], body.get("client_secret")

    def authenticate(self, form: dict[str, str]) -> dict[str, Any]:
        """The request options for the token endpoint, as this client authenticates."""
        how = self.profile.token_auth if self.secret else "none"
        if how == "basic":
            return {"data": form, "auth": (self.client_id, self.secret)}
        if how == "basic+client_id":
            body = {**form, "client_id": self.client_id}
            return {"data": body, "auth": (self.client_id, self.secret)}
        if how == "post":
            return {"data": {**form, "client_id": self.client_id, "client_secret": self.secret}}
        return {"data": {**form, "client_id": self.client_id}}

    async def scope(self, value: str | None) -> str | None:
        if value is None:
            return None
        return value.replace(AS_ALL, await as_all(self.http)).strip()

    async def authorize(self) -> dict[str, Any]:
        p = self.profile
        verifier, challenge = pkce_pair()
        params = {
            "response_type": "code",
            "client_id": self.client_id,
            "redirect_uri": p.redirect_uri,
            "code_challenge": challenge,
            "code_challenge_method": "S256",
        }
        if p.state is not None:
            params["state"] = p.state
        if (scope := await self.scope(p.scope)) is not None:
            params["scope"] = scope
        if p.resource is not None:
            params["resource"] = p.resource
        back = await sign_in_and_approve(self.http, params, password=PASSWORD)
        assert back.status_code in (302, 303), back.text[:400]
        location = back.headers["location"]
        assert location.startswith(p.redirect_uri + "?"), location
        answer = {k: v[0] for k, v in parse_qs(urlsplit(location).query).items()}
        assert "error" not in answer, answer
        assert answer.get("state") == p.state  # byte for byte, or absent when not sent
        assert answer["iss"] == ISSUER
        form = {
            "grant_type": "authorization_code",
            "code": answer["code"],
            "redirect_uri": p.redirect_uri,
            "code_verifier": verifier,
        }
        token_resource = p.resource if p.token_resource == "same" else p.token_resource
        if token_resource is not None:
            form["resource"] = token_resource
        response = await self.http.post("/token", **self.authenticate(form))
        assert response.status_code == 200, response.text
        issued = self.check(response.json())
        if "openid" in (scope or "").split():  # answered as an OpenID Provider
            keys = jwt.key_set(self.app.state.mcpauth.keys.jwks())
            id_token = jwt.verify(
                issued["id_token"], keys, issuer=ISSUER, audience=self.client_id,
                typ=("JWT",), required=("iss", "sub", "aud", "exp", "iat"),
            )  # fmt: skip
            person = claims_of(self.app, issued["access_token"])["sub"]
            assert (id_token["aud"], id_token["sub"]) == (self.client_id, person)
        return issued

    def check(self, issued: dict[str, Any]) -> dict[str, Any]:
        # what the strict clients parse: token_type, a string scope, no nulls
        assert issued["token_type"] in ("Bearer", "DPoP")
        assert isinstance(issued["scope"], str)
        assert None not in issued.values()
        claims = claims_of(self.app, issued["access_token"])
        assert claims["aud"] == self.profile.expected_resource
        assert claims["client_id"] == self.client_id
        assert "refresh_token" in issued, "every profile here refreshes"
        return issued

    async def refresh(self, token: str, step: Refresh, http: httpx2.AsyncClient) -> httpx2.Response:
        form = {"grant_type": "refresh_token", "refresh_token": token}
        if step.resource == "same" and self.profile.resource is not None:
            form["resource"] = self.profile.resource
        elif isinstance(step.resource, str) and step.resource != "same":
            form["resource"] = step.resource
        if (scope := await self.scope(step.scope)) is not None:
            form["scope"] = scope
        return await http.post("/token", **self.authenticate(form))

    async def refresh_as_it_does(self, issued: dict[str, Any], step: Refresh) -> dict[str, Any]:
        token = issued["refresh_token"]
        if step.retried:  # the first answer is lost on the way back
            lost = await self.refresh(token, step, self.http)
            assert lost.status_code == 200, lost.text
            again = await self.refresh(token, step, self.http)
            assert again.status_code == 200, again.text
            return self.check(again.json())
        async with client_at(self.app, "198.51.100.77") as elsewhere:
            senders = [
                elsewhere if step.other_address and i % 2 else self.http
                for i in range(step.parallel)
            ]
            answers = await asyncio.gather(*(self.refresh(token, step, h) for h in senders))
        assert [a.status_code for a in answers] == [200] * step.parallel, [a.text for a in answers]
        results = [self.check(a.json()) for a in answers]
        # every caller's new refresh token works (the first one's is the one checked last)
        for other in results[1:]:
            again = await self.refresh(other["refresh_token"], Refresh(), self.http)
            assert again.status_code == 200, again.text
        return results[0]


@pytest.mark.parametrize("profile", PROFILES, ids=[p.name for p in PROFILES])
async def test_the_client_gets_a_token_for_its_server_and_stays_connected(
    app: Starlette, http: httpx2.AsyncClient, profile: Profile
) -> None:
    replay = Replay(app, http, profile)
    await replay.register()
    issued = await replay.authorize()
    for step in profile.refreshes:
        issued = await replay.refresh_as_it_does(issued, step)
    # the grant is alive: the newest refresh token still refreshes
    final = await replay.refresh(issued["refresh_token"], Refresh(), http)
    assert final.status_code == 200, final.text
    replay.check(final.json())


def test_every_client_of_the_table_has_a_profile() -> None:
    names = {p.name.split(" (")[0] for p in PROFILES}
    expected = {
        "claude.ai", "Claude Code", "ChatGPT", "Cursor", "VS Code", "Windsurf", "Codex CLI",
        "Gemini CLI", "Goose", "opencode", "Zed", "Cline 3.x", "Cline 4.x", "mcp-remote",
        "MCP Inspector 2.x", "TypeScript SDK 1.x", "TypeScript SDK 2.x", "Python SDK 1.22",
        "Python SDK 1.23+", "LibreChat", "Continue",
    }  # fmt: skip
    assert expected <= names
    table = (Path(__file__).parents[2] / "docs" / "clients.md").read_text()
    rows = [line.split("|")[1] for line in table.splitlines() if line.startswith("| ")]
    for name in expected:  # each client has its row in docs/clients.md
        family = name.split(" ")[0]
        assert any(family in row for row in rows), name
