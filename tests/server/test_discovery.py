"""RFC 8414 metadata and OpenID Connect discovery (AS-02, AS-03, AS-04, AS-28)."""

from __future__ import annotations

from collections.abc import Callable

import httpx2
import pytest

from mcpauth.server import Settings, create_app

from ..conftest import ISSUER

pytestmark = pytest.mark.anyio


async def test_as02_metadata_has_the_mcp_must_haves(http: httpx2.AsyncClient) -> None:
    response = await http.get("/.well-known/oauth-authorization-server")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    meta = response.json()
    assert meta["issuer"] == ISSUER
    assert meta["response_types_supported"] == ["code"]
    assert meta["code_challenge_methods_supported"] == ["S256"]  # AS-04
    assert meta["authorization_response_iss_parameter_supported"] is True  # AS-28
    assert "authorization_code" in meta["grant_types_supported"]
    assert "none" in meta["token_endpoint_auth_methods_supported"]
    for key in ("authorization_endpoint", "token_endpoint", "jwks_uri", "registration_endpoint"):
        assert meta[key].startswith(ISSUER + "/")


async def test_openid_configuration_serves_the_same_document(http: httpx2.AsyncClient) -> None:
    oauth = (await http.get("/.well-known/oauth-authorization-server")).json()
    oidc = (await http.get("/.well-known/openid-configuration")).json()
    assert oidc == oauth


@pytest.mark.parametrize("issuer", ["http://127.0.0.1:9000/tenant1", "http://127.0.0.1:9000/a/b/"])
async def test_as03_issuer_with_a_path_is_served_byte_identical_at_path_inserted_urls(
    make_settings: Callable[..., Settings], issuer: str
) -> None:
    app = create_app(make_settings(issuer=issuer))
    path = issuer.removeprefix("http://127.0.0.1:9000").rstrip("/")
    async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app), base_url=ISSUER) as http:
        urls = [
            f"/.well-known/oauth-authorization-server{path}",
            f"/.well-known/openid-configuration{path}",
            f"{path}/.well-known/openid-configuration",
        ]
        documents = [(await http.get(url)).json() for url in urls]
        root = await http.get("/.well-known/oauth-authorization-server")
    assert all(doc["issuer"] == issuer for doc in documents)
    assert documents[0]["token_endpoint"] == f"{issuer.rstrip('/')}/token"
    assert root.status_code == 404  # not the root document: the issuer has a path


async def test_scopes_supported_lists_the_registered_resources_scopes(
    http: httpx2.AsyncClient, app: object
) -> None:
    from mcpauth.server import admin

    ctx = app.state.mcpauth  # type: ignore[attr-defined]
    admin.add_resource(ctx, "http://127.0.0.1:8000/mcp", scopes=["files:read", "files:write"])
    meta = (await http.get("/.well-known/oauth-authorization-server")).json()
    # the OpenID scopes are the server's own (answered with an ID token and UserInfo)
    assert meta["scopes_supported"] == ["email", "files:read", "files:write", "openid", "profile"]
    assert "offline_access" not in meta["scopes_supported"]


async def test_metadata_and_jwks_allow_cors(http: httpx2.AsyncClient) -> None:
    for url in ("/.well-known/oauth-authorization-server", "/jwks.json"):
        response = await http.get(url, headers={"Origin": "https://app.example"})
        assert response.headers["access-control-allow-origin"] == "*"


async def test_unknown_paths_get_a_json_404(http: httpx2.AsyncClient) -> None:
    response = await http.get("/nope")
    assert response.status_code == 404
    assert response.json()["error"] == "invalid_request"


async def test_health_answers(http: httpx2.AsyncClient) -> None:
    response = await http.get("/health")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
