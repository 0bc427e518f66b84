"""`resource` (RFC 8707) as clients spell it: compared in canonical form (case of scheme and
host, default port, a trailing slash added by WHATWG `href` or stripped by Zed); missing on the
token or refresh request it means the grant's resource; repeated with two values it is a clear
invalid_request. The token's audience is always the registered resource, whatever the spelling."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

import httpx2
import pytest
from starlette.applications import Starlette

from mcpauth import jwt
from mcpauth.server import admin

from ..conftest import ISSUER
from ..oauth import authorization_params, pkce_pair, query, sign_in_and_approve
from .conftest import RESOURCE

pytestmark = pytest.mark.anyio
ORIGIN_ONLY = "https://mcp.example.com/"  # as registered (canonical, with its slash)
REDIRECT = "http://127.0.0.1:5555/callback"


@pytest.fixture
def resources(seeded: Starlette) -> Starlette:
    admin.add_resource(seeded.state.mcpauth, ORIGIN_ONLY, scopes=["mcp:tools"])
    return seeded


async def _code(http: httpx2.AsyncClient, client_id: str, resource: str | None) -> tuple[str, str]:
    verifier, challenge = pkce_pair()
    params = authorization_params(client_id, challenge, resource=resource)
    response = await sign_in_and_approve(http, params)
    assert response.status_code == 303, response.text
    return query(response.headers["location"])["code"], verifier


async def _token(
    http: httpx2.AsyncClient, client_id: str, code: str, verifier: str, resource: str | None
) -> httpx2.Response:
    form = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": REDIRECT,
        "code_verifier": verifier,
        "client_id": client_id,
    }
    if resource is not None:
        form["resource"] = resource
    return await http.post("/token", data=form)


async def _post_pairs(http: httpx2.AsyncClient, pairs: list[tuple[str, str]]) -> httpx2.Response:
    headers = {"content-type": "application/x-www-form-urlencoded"}
    return await http.post("/token", content=urlencode(pairs), headers=headers)


def _audience(app: Starlette, token: str, audience: str) -> str:
    keys = jwt.key_set(app.state.mcpauth.keys.jwks())
    return str(jwt.verify(token, keys, issuer=ISSUER, audience=audience)["aud"])


SPELLINGS = [
    (ORIGIN_ONLY, "https://mcp.example.com"),  # trailing slash stripped (Zed)
    (ORIGIN_ONLY, "https://mcp.example.com/"),  # WHATWG href
    (ORIGIN_ONLY, "HTTPS://MCP.Example.COM/"),
    (ORIGIN_ONLY, "https://mcp.example.com:443"),
    (ORIGIN_ONLY, "https://mcp.example.com:443/"),
    (RESOURCE, "http://127.0.0.1:8000/mcp/"),  # trailing slash added
    (RESOURCE, "HTTP://127.0.0.1:8000/mcp"),
]


@pytest.mark.parametrize(("registered", "sent"), SPELLINGS)
async def test_a_resource_in_another_spelling_resolves_to_the_registered_one_on_every_leg(
    http: httpx2.AsyncClient,
    resources: Starlette,
    public_client: dict[str, Any],
    registered: str,
    sent: str,
) -> None:
    cid = public_client["client_id"]
    code, verifier = await _code(http, cid, sent)
    response = await _token(http, cid, code, verifier, sent)
    assert response.status_code == 200, response.text
    tokens = response.json()
    assert _audience(resources, tokens["access_token"], registered) == registered
    refreshed = await http.post(
        "/token",
        data={
            "grant_type": "refresh_token",
            "refresh_token": tokens["refresh_token"],
            "client_id": cid,
            "resource": sent,
        },
    )
    assert refreshed.status_code == 200, refreshed.text
    assert _audience(resources, refreshed.json()["access_token"], registered) == registered


async def test_a_resource_missing_on_the_token_and_refresh_requests_is_the_grants(
    http: httpx2.AsyncClient, resources: Starlette, public_client: dict[str, Any]
) -> None:
    cid = public_client["client_id"]
    code, verifier = await _code(http, cid, "https://mcp.example.com")
    response = await _token(http, cid, code, verifier, None)  # VS Code before 1.104
    assert response.status_code == 200, response.text
    refreshed = await http.post(
        "/token",
        data={
            "grant_type": "refresh_token",
            "refresh_token": response.json()["refresh_token"],
            "client_id": cid,
        },  # Codex CLI and LibreChat send no resource on refresh
    )
    assert refreshed.status_code == 200, refreshed.text
    assert _audience(resources, refreshed.json()["access_token"], ORIGIN_ONLY) == ORIGIN_ONLY


async def test_another_resource_on_the_token_request_is_still_refused(
    http: httpx2.AsyncClient, resources: Starlette, public_client: dict[str, Any]
) -> None:
    cid = public_client["client_id"]
    code, verifier = await _code(http, cid, "https://mcp.example.com")
    response = await _token(http, cid, code, verifier, "https://mcp.example.com/other")
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_target"


async def test_a_resource_repeated_with_two_values_is_invalid_request_on_both_endpoints(
    http: httpx2.AsyncClient, resources: Starlette, public_client: dict[str, Any]
) -> None:
    cid = public_client["client_id"]
    _, challenge = pkce_pair()
    pairs = [
        *authorization_params(cid, challenge, resource=RESOURCE).items(),
        ("resource", ORIGIN_ONLY),
    ]
    page = await http.get("/authorize", params=pairs)
    assert page.status_code == 400  # a self-registered client: explained on a page first
    assert "invalid_request" in page.text
    assert "more than once with different values" in page.text
    form = [
        ("grant_type", "refresh_token"),
        ("refresh_token", "x"),
        ("client_id", cid),
        ("resource", RESOURCE),
        ("resource", ORIGIN_ONLY),
    ]
    response = await _post_pairs(http, form)
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_request"
    assert "more than once with different values" in response.json()["error_description"]


async def test_the_same_resource_twice_is_one_resource(
    http: httpx2.AsyncClient, resources: Starlette, public_client: dict[str, Any]
) -> None:
    cid = public_client["client_id"]
    verifier, challenge = pkce_pair()
    pairs = [*authorization_params(cid, challenge, resource=RESOURCE).items()]
    pairs.append(("resource", RESOURCE))  # Codex CLI with oauth_resource set
    response = await sign_in_and_approve(http, pairs)  # type: ignore[arg-type]
    assert response.status_code == 303, response.text
    code = query(response.headers["location"])["code"]
    form = [
        ("grant_type", "authorization_code"),
        ("code", code),
        ("redirect_uri", REDIRECT),
        ("code_verifier", verifier),
        ("client_id", cid),
        ("resource", RESOURCE),
        ("resource", RESOURCE),
    ]
    token = await _post_pairs(http, form)
    assert token.status_code == 200, token.text
