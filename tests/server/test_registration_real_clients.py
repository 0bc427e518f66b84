"""Registration bodies exactly as the real MCP clients send them are accepted, echoed in a form
every client parses, and carry through a full authorization: an ephemeral loopback port, a
private-use scheme, a secret sent by Basic or in the body. Nothing liberal here widens what a
token grants: PKCE, the exact redirect path and host, and audience binding are unchanged."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx2
import pytest
from starlette.applications import Starlette

from mcpauth import jwt
from mcpauth.oauth import basic_authorization
from mcpauth.server import admin
from mcpauth.server.clients.metadata_documents import resolve_client_metadata_document
from mcpauth.server.clients.redirect_uris import redirect_uri_matches
from mcpauth.server.clients.ssrf import FetchedResponse
from mcpauth.server.config import Settings

from ..conftest import ISSUER
from ..oauth import authorization_params, follow, pkce_pair, query, sign_in_and_approve
from .conftest import RESOURCE

pytestmark = pytest.mark.anyio

CODE_FLOW = {"grant_types": ["authorization_code", "refresh_token"], "response_types": ["code"]}
CURSOR: dict[str, Any] = {
    "client_name": "Cursor",
    "redirect_uris": [
        "http://localhost:8787/callback",
        "https://www.cursor.com/agents/mcp/oauth/callback",
        "cursor://anysphere.cursor-mcp/oauth/callback",
    ],
    "token_endpoint_auth_method": "none",
    "application_type": "web",
    **CODE_FLOW,
}
CLINE_3 = {
    "client_name": "Cline",
    "redirect_uris": ["vscode://saoudrizwan.claude-dev/mcp-auth/callback/3f9a0c17e2b4"],
    "token_endpoint_auth_method": "none",
    **CODE_FLOW,
}
VS_CODE = {
    "client_name": "Visual Studio Code",
    "redirect_uris": [
        "http://127.0.0.1:33418/",
        "http://127.0.0.1/",
        "https://vscode.dev/redirect",
        "https://insiders.vscode.dev/redirect",
    ],
    "token_endpoint_auth_method": "none",
    "application_type": "native",
    "scope": "mcp:tools",
    **CODE_FLOW,
}
BODIES: dict[str, dict[str, Any]] = {
    "Cursor": CURSOR,
    "Cursor without application_type": {k: v for k, v in CURSOR.items() if k != "application_type"},
    "Cline 3.x": CLINE_3,
    "VS Code": VS_CODE,
    "Gemini CLI": {
        "client_name": "Gemini CLI MCP Client",
        "redirect_uris": ["http://localhost:7777/oauth/callback"],
        "token_endpoint_auth_method": "none",
        "scope": "",
        **CODE_FLOW,
    },
    "Inspector v2": {
        "client_name": "MCP Inspector",
        "redirect_uris": ["http://localhost:6274/oauth/callback"],
        "token_endpoint_auth_method": "none",
        "application_type": "native",
        "scope": "",
        **CODE_FLOW,
    },
    "Claude Code": {
        "client_name": "Claude Code (my-server)",
        "redirect_uris": ["http://localhost:51234/callback"],
        "token_endpoint_auth_method": "none",
        **CODE_FLOW,
    },
    "opencode, web beside loopback": {
        "client_name": "OpenCode",
        "redirect_uris": ["http://127.0.0.1:19876/mcp/oauth/callback"],
        "token_endpoint_auth_method": "none",
        "application_type": "web",
        **CODE_FLOW,
    },
    "Python SDK 1.23, no auth method": {
        "client_name": "python-sdk client",
        "redirect_uris": ["http://localhost:3030/callback"],
        **CODE_FLOW,
    },
    "LibreChat, basic and the AS's response_types": {
        "client_name": "LibreChat MCP Client",
        "redirect_uris": ["https://chat.example.org/api/mcp/files/oauth/callback"],
        "token_endpoint_auth_method": "client_secret_basic",
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],  # the AS's response_types_supported, copied
    },
    "Continue, a query in the redirect": {
        "client_name": "Continue",
        "redirect_uris": ["http://localhost:3000/?state=0b7c3f8e-5d2a-4e61-9a40-7f1d2c3b4a55"],
        "token_endpoint_auth_method": "none",
    },
}


def _no_empty_members(value: Any) -> bool:
    if isinstance(value, dict):
        return all(v is not None and v != "" and _no_empty_members(v) for v in value.values())
    if isinstance(value, list):
        return all(_no_empty_members(v) for v in value)
    return True


@pytest.mark.parametrize("body", list(BODIES.values()), ids=list(BODIES))
async def test_a_real_clients_registration_is_accepted_as_sent_and_echoed(
    http: httpx2.AsyncClient, seeded: Starlette, body: dict[str, Any]
) -> None:
    response = await http.post("/register", json=body)
    assert response.status_code == 201, response.text
    info = response.json()
    assert info["redirect_uris"] == body["redirect_uris"]
    assert info["client_name"] == body["client_name"]
    assert info["grant_types"] == body.get("grant_types", ["authorization_code"])
    assert _no_empty_members(info)  # TS SDK's zod schema fails on null or "" members
    assert "scope" not in info or info["scope"] == body.get("scope")
    assert info["registration_access_token"]
    assert info["registration_client_uri"] == f"{ISSUER}/register/{info['client_id']}"
    method = body.get("token_endpoint_auth_method", "client_secret_basic")  # RFC 7591 §2
    assert info["token_endpoint_auth_method"] == method
    assert ("client_secret" in info) is (method != "none")


@pytest.mark.parametrize(
    ("asked", "registered"),
    [
        ("claudeai mcp:tools", "mcp:tools"),
        ("read write", None),
        ("openid mcp:tools", "openid mcp:tools"),
    ],
)
async def test_guessed_scopes_at_registration_are_left_out_not_refused(
    http: httpx2.AsyncClient, seeded: Starlette, asked: str, registered: str | None
) -> None:
    body = {**BODIES["Claude Code"], "scope": asked}
    response = await http.post("/register", json=body)
    assert response.status_code == 201, response.text
    assert response.json().get("scope") == registered  # RFC 7591 §3.2.1: what was registered
    # an operator's unknown scope is a typo: refused
    with pytest.raises(admin.AdminError, match="unknown scope 'claudeai'"):
        admin.add_client(seeded.state.mcpauth, name="Typo", redirect_uris=["http://127.0.0.1/cb"],
                         scopes=["claudeai"])  # fmt: skip


def _claims(app: Starlette, token: str) -> dict[str, Any]:
    keys = jwt.key_set(app.state.mcpauth.keys.jwks())
    return jwt.verify(token, keys, issuer=ISSUER, audience=RESOURCE)


async def _authorize_and_redeem(
    http: httpx2.AsyncClient,
    app: Starlette,
    info: dict[str, Any],
    redirect_uri: str,
    headers: dict[str, str] | None = None,
    **body: str,
) -> dict[str, Any]:
    verifier, challenge = pkce_pair()
    params = authorization_params(
        info["client_id"], challenge, redirect_uri=redirect_uri, resource=RESOURCE
    )
    response = await sign_in_and_approve(http, params)
    assert response.status_code == 303, response.text
    location = response.headers["location"]
    assert location.startswith(redirect_uri + "?")
    form = {
        "grant_type": "authorization_code",
        "code": query(location)["code"],
        "redirect_uri": redirect_uri,
        "code_verifier": verifier,
        "client_id": info["client_id"],
        **body,
    }
    token = await http.post("/token", data=form, headers=headers or {})
    assert token.status_code == 200, token.text
    assert _claims(app, token.json()["access_token"])["client_id"] == info["client_id"]
    return dict(token.json())


@pytest.mark.parametrize(
    ("body", "sent"),
    [
        (CURSOR, "http://localhost:61234/callback"),  # registered :8787, listening elsewhere
        (VS_CODE, "http://127.0.0.1:50123/"),  # registered :33418 and port-less
        (CLINE_3, CLINE_3["redirect_uris"][0]),
        (CURSOR, "cursor://anysphere.cursor-mcp/oauth/callback"),
        (CURSOR, "https://www.cursor.com/agents/mcp/oauth/callback"),
    ],
    ids=["Cursor loopback", "VS Code loopback", "Cline 3.x scheme", "Cursor scheme", "Cursor web"],
)
async def test_a_real_client_completes_the_flow_after_registering(
    http: httpx2.AsyncClient, seeded: Starlette, body: dict[str, Any], sent: str
) -> None:
    info = (await http.post("/register", json=body)).json()
    tokens = await _authorize_and_redeem(http, seeded, info, sent)
    assert tokens["refresh_token"]


async def test_an_omitted_auth_method_gets_a_secret_usable_by_basic_or_in_the_body(
    http: httpx2.AsyncClient, seeded: Starlette
) -> None:
    info = (await http.post("/register", json=BODIES["Python SDK 1.23, no auth method"])).json()
    cid, secret = info["client_id"], info["client_secret"]
    sent = "http://localhost:40001/callback"
    # the MCP Python SDK: Basic, and its client_id in the body as well
    await _authorize_and_redeem(
        http, seeded, info, sent, headers={"Authorization": basic_authorization(cid, secret)}
    )
    # VS Code, Gemini CLI and Zed put the secret in the body whatever was registered
    await _authorize_and_redeem(http, seeded, info, sent, client_secret=secret)


async def test_a_post_registered_client_may_send_its_secret_by_basic(
    http: httpx2.AsyncClient, seeded: Starlette
) -> None:
    body = {**BODIES["Claude Code"], "token_endpoint_auth_method": "client_secret_post"}
    info = (await http.post("/register", json=body)).json()
    header = {"Authorization": basic_authorization(info["client_id"], info["client_secret"])}
    await _authorize_and_redeem(http, seeded, info, "http://localhost:40002/callback", header)


@pytest.mark.parametrize(
    "sent",
    [
        "http://127.0.0.1:61234/callback",  # another host: localhost is not 127.0.0.1
        "http://localhost:61234/callback/",  # another path
        "http://localhost:61234/other",
        "http://localhost:61234/callback?x=1",
        "https://localhost:61234/callback",
        "cursor://anysphere.cursor-mcp/oauth/other",
        "cursor://evil.example/oauth/callback",
        "https://www.cursor.com/agents/mcp/oauth/callback/..",
    ],
)
async def test_nothing_but_the_loopback_port_is_relaxed(
    http: httpx2.AsyncClient, seeded: Starlette, sent: str
) -> None:
    info = (await http.post("/register", json=CURSOR)).json()
    _, challenge = pkce_pair()
    params = authorization_params(info["client_id"], challenge, redirect_uri=sent)
    response = await http.get("/authorize", params=params)
    assert response.status_code == 400
    assert "location" not in response.headers
    assert "not registered for this client" in response.text


@pytest.mark.parametrize(
    ("registered", "sent"),
    [
        ("http://localhost/callback", "http://localhost:49152/callback"),
        ("http://127.0.0.1/callback", "http://127.0.0.1:49152/callback"),
        ("http://[::1]/callback", "http://[::1]:49152/callback"),
        ("http://127.0.0.1:8080/", "http://127.0.0.1:49152"),  # an empty path is "/"
    ],
)
async def test_a_port_less_loopback_registration_matches_any_port(
    http: httpx2.AsyncClient, seeded: Starlette, registered: str, sent: str
) -> None:
    body = {**BODIES["Claude Code"], "redirect_uris": [registered]}
    info = (await http.post("/register", json=body)).json()
    _, challenge = pkce_pair()
    params = authorization_params(info["client_id"], challenge, redirect_uri=sent)
    response = await http.get("/authorize", params=params)
    assert response.status_code == 303
    assert "/interaction/" in response.headers["location"]


async def test_the_consent_page_names_a_private_use_scheme_and_a_self_named_web_address(
    http: httpx2.AsyncClient, seeded: Starlette
) -> None:
    info = (await http.post("/register", json=CURSOR)).json()
    pages = {}
    for sent in CURSOR["redirect_uris"][1:]:
        _, challenge = pkce_pair()
        params = authorization_params(info["client_id"], challenge, redirect_uri=sent)
        pages[sent] = await sign_in_and_approve(http, params, action=None)
    scheme_page = pages["cursor://anysphere.cursor-mcp/oauth/callback"].text
    assert "the application that handles cursor: links on this device" in scheme_page
    assert "Any application installed on this device can ask to handle cursor: links" in (
        scheme_page
    )
    web_page = pages["https://www.cursor.com/agents/mcp/oauth/callback"].text
    assert "The application gave the address www.cursor.com itself" in web_page


async def test_an_unknown_client_at_the_token_endpoint_is_a_json_401_invalid_client(
    http: httpx2.AsyncClient, seeded: Starlette
) -> None:
    form = {
        "grant_type": "authorization_code",
        "code": "x" * 43,
        "redirect_uri": "http://localhost:8787/callback",
        "code_verifier": "v" * 43,
        "client_id": "pruned-long-ago",
    }
    for headers in ({}, {"Authorization": basic_authorization("pruned-long-ago", "s")}):
        response = await http.post("/token", data=form, headers=headers)
        assert response.status_code == 401
        assert response.headers["content-type"] == "application/json"
        assert response.json()["error"] == "invalid_client"  # the TS SDK re-registers on it


async def test_an_unknown_client_at_authorize_gets_a_page_that_says_to_reconnect(
    http: httpx2.AsyncClient, seeded: Starlette
) -> None:
    _, challenge = pkce_pair()
    params = authorization_params("pruned-long-ago", challenge)
    response = await follow(http, await http.get("/authorize", params=params))
    assert response.status_code == 400
    assert "location" not in response.headers
    assert "This application is not recognised" in response.text
    assert "reconnect it to this server" in response.text


def test_port_less_loopback_entries_of_a_metadata_document_match_any_port(
    make_settings: Callable[..., Settings],
) -> None:
    client_id = "https://claude.ai/oauth/claude-code-client-metadata"
    document = {
        "client_id": client_id,
        "client_name": "Claude Code",
        "redirect_uris": ["http://localhost/callback", "http://127.0.0.1/callback"],
        "token_endpoint_auth_method": "none",
        "grant_types": ["authorization_code", "refresh_token"],
    }

    def publish(url: str) -> FetchedResponse:
        headers = httpx2.Headers({"content-type": "application/json"})
        return FetchedResponse(url, 200, headers, json.dumps(document).encode())

    client = resolve_client_metadata_document(make_settings(), client_id, fetcher=publish)
    registered = client.redirect_uris
    assert redirect_uri_matches("http://localhost:53682/callback", registered)
    assert redirect_uri_matches("http://127.0.0.1:53682/callback", registered)
    assert not redirect_uri_matches("http://localhost:53682/callback/x", registered)
    assert not redirect_uri_matches("http://[::1]:53682/callback", registered)
