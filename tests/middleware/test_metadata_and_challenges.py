"""RFC 9728 metadata routes and the 401/403 challenges (MCP RS-01..RS-04, RS-07, RS-10..RS-12,
spec §5 wire formats)."""

from __future__ import annotations

from typing import Any

import pytest

from mcpauth.middleware import ProtectedResource, ScopePolicy

from .helpers import (
    ISSUER,
    RESOURCE,
    FakeAuthorizationServer,
    RecordingApp,
    bearer,
    client_for,
    rpc,
)

pytestmark = pytest.mark.anyio
PRM_URL = "https://mcp.example.com/.well-known/oauth-protected-resource/mcp"


@pytest.mark.parametrize(
    "path", ["/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"]
)
async def test_metadata_is_served_at_the_path_aware_and_root_well_known_urls_rs_01_rs_02_rs_03(
    path: str, protect: Any, recording_app: RecordingApp
) -> None:
    middleware = protect(
        resource=ProtectedResource(
            RESOURCE, scopes_supported=["mcp:basic", "offline_access"], name="Demo"
        )
    )
    async with client_for(middleware) as client:
        response = await client.get(path, headers={"Origin": "https://app.example"})
    assert response.status_code == 200
    assert response.headers["access-control-allow-origin"] == "*"
    assert response.json() == {
        "resource": "https://mcp.example.com/mcp",
        "authorization_servers": [ISSUER],
        "scopes_supported": ["mcp:basic"],
        "bearer_methods_supported": ["header"],
        "resource_name": "Demo",
    }
    assert recording_app.calls == []


async def test_metadata_never_advertises_offline_access_rs_07(protect: Any) -> None:
    async with client_for(
        protect(resource=ProtectedResource(RESOURCE, scopes_supported=["offline_access", "a"]))
    ) as client:
        document = (await client.get("/.well-known/oauth-protected-resource")).json()
    assert document["scopes_supported"] == ["a"]


async def test_the_resource_is_published_in_canonical_form_rs_03(protect: Any) -> None:
    middleware = protect(resource="HTTPS://MCP.Example.com:443/mcp")
    async with client_for(middleware) as client:
        document = (await client.get("/.well-known/oauth-protected-resource/mcp")).json()
    assert document["resource"] == "https://mcp.example.com/mcp"


async def test_metadata_answers_cors_preflight_and_refuses_post(protect: Any) -> None:
    async with client_for(protect()) as client:
        preflight = await client.options(
            "/.well-known/oauth-protected-resource",
            headers={"Origin": "https://x", "Access-Control-Request-Method": "GET"},
        )
        post = await client.post("/.well-known/oauth-protected-resource")
    assert preflight.status_code == 204
    assert preflight.headers["access-control-allow-origin"] == "*"
    assert post.status_code == 405


async def test_a_request_without_a_token_gets_401_with_resource_metadata_and_scope_rs_02_rs_04(
    protect: Any, recording_app: RecordingApp
) -> None:
    async with client_for(protect(policy=ScopePolicy(required=["mcp:basic"]))) as client:
        response = await client.post("/mcp", json=rpc("initialize"))
    assert response.status_code == 401
    assert response.headers.get_list("www-authenticate")[0] == (
        f'Bearer resource_metadata="{PRM_URL}", scope="mcp:basic"'
    )
    assert recording_app.calls == []


async def test_the_401_challenge_omits_scope_when_none_is_configured(protect: Any) -> None:
    async with client_for(protect()) as client:
        response = await client.get("/mcp")
    assert response.headers.get_list("www-authenticate") == [
        f'Bearer resource_metadata="{PRM_URL}"',
        f'DPoP resource_metadata="{PRM_URL}", algs="ES256 EdDSA RS256 PS256"',
    ]


@pytest.mark.parametrize("scheme", ["Basic dXNlcjpwYXNz", "Token abc", "Bearerabc"])
async def test_other_authorization_schemes_count_as_no_token(
    scheme: str, protect: Any, recording_app: RecordingApp
) -> None:
    async with client_for(protect()) as client:
        response = await client.get("/mcp", headers={"Authorization": scheme})
    assert response.status_code == 401
    assert "error=" not in response.headers["www-authenticate"]
    assert recording_app.calls == []


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER", "BeArEr"])
async def test_the_bearer_scheme_is_case_insensitive(
    scheme: str, protect: Any, auth_server: FakeAuthorizationServer
) -> None:
    async with client_for(protect()) as client:
        response = await client.get(
            "/mcp", headers={"Authorization": f"{scheme} {auth_server.mint()}"}
        )
    assert response.status_code == 200


async def test_an_invalid_token_gets_401_with_error_description_and_resource_metadata_rs_10(
    protect: Any, auth_server: FakeAuthorizationServer
) -> None:
    token = auth_server.mint(exp=1, iat=0)
    async with client_for(protect(policy=ScopePolicy(required="mcp:basic"))) as client:
        response = await client.get("/mcp", headers=bearer(token))
    assert response.status_code == 401
    assert response.headers.get_list("www-authenticate")[0] == (
        'Bearer error="invalid_token", error_description="The access token has expired", '
        f'resource_metadata="{PRM_URL}", scope="mcp:basic"'
    )
    assert response.json() == {
        "error": "invalid_token",
        "error_description": "The access token has expired",
    }


async def test_a_token_with_characters_outside_b64token_is_invalid(protect: Any) -> None:
    async with client_for(protect()) as client:
        response = await client.get("/mcp", headers={"Authorization": 'Bearer a"b'})
    assert response.status_code == 401
    assert 'error="invalid_token"' in response.headers["www-authenticate"]


async def test_two_authorization_headers_are_a_malformed_request_rs_11(
    protect: Any, auth_server: FakeAuthorizationServer, recording_app: RecordingApp
) -> None:
    token = auth_server.mint()
    headers = [("Authorization", f"Bearer {token}"), ("Authorization", f"Bearer {token}")]
    async with client_for(protect()) as client:
        response = await client.get("/mcp", headers=headers)
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_request"
    assert recording_app.calls == []


async def test_insufficient_scope_gets_403_in_the_spec_wire_format_rs_12(
    protect: Any, auth_server: FakeAuthorizationServer, recording_app: RecordingApp
) -> None:
    middleware = protect(
        policy=ScopePolicy(required="mcp:basic", tools={"delete_file": "files:write"})
    )
    call = rpc("tools/call", {"name": "delete_file", "arguments": {}})
    async with client_for(middleware) as client:
        response = await client.post("/mcp", json=call, headers=bearer(auth_server.mint()))
    assert response.status_code == 403
    assert response.headers.get_list("www-authenticate")[0] == (
        'Bearer error="insufficient_scope", scope="files:write mcp:basic", '
        f'resource_metadata="{PRM_URL}", '
        'error_description="This operation needs the scopes: files:write mcp:basic"'
    )
    assert response.json()["error"] == "insufficient_scope"
    assert recording_app.calls == []


async def test_a_foreign_origin_is_refused_with_403_when_origins_are_configured_rs_22(
    protect: Any, auth_server: FakeAuthorizationServer, recording_app: RecordingApp
) -> None:
    middleware = protect(allowed_origins=["https://app.example"])
    async with client_for(middleware) as client:
        refused = await client.get(
            "/mcp", headers={**bearer(auth_server.mint()), "Origin": "https://evil.example"}
        )
        allowed = await client.get(
            "/mcp", headers={**bearer(auth_server.mint()), "Origin": "https://app.example"}
        )
    assert refused.status_code == 403
    assert allowed.status_code == 200
    assert len(recording_app.calls) == 1


async def test_cors_preflight_passes_to_the_app_without_a_token(
    protect: Any, recording_app: RecordingApp
) -> None:
    async with client_for(protect()) as client:
        response = await client.options(
            "/mcp", headers={"Origin": "https://x", "Access-Control-Request-Method": "POST"}
        )
    assert response.status_code == 200
    assert len(recording_app.calls) == 1


async def test_a_plain_options_request_still_needs_a_token(
    protect: Any, recording_app: RecordingApp
) -> None:
    async with client_for(protect()) as client:
        response = await client.options("/mcp")
    assert response.status_code == 401
    assert recording_app.calls == []
