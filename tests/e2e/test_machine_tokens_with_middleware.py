"""End to end: the real `mcpauth serve` issues client_credentials tokens to a
client_secret_basic client and to a private_key_jwt client, and the middleware accepts them
for the right resource only; revocation followed by introspection is inactive, and the
middleware in introspection mode refuses the revoked token at once."""

from __future__ import annotations

import base64
import json
import secrets
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from mcpauth import jwt
from mcpauth.middleware import IntrospectionVerifier, ProtectedResourceMiddleware

from .test_authorization_flow import RESOURCE, AuthServer, auth_server

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]
OTHER = "https://other.example.com/mcp"
ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("m2m")
    with auth_server(tmp) as running_server:
        running_server.cli("resources", "add", OTHER, "--scope", "other:read")
        yield running_server


async def whoami(request: Request) -> Response:
    user = request.scope.get("user")
    return JSONResponse(
        {"subject": getattr(user, "subject", None) or getattr(user, "identity", None)}
    )


def protected(resource: str, issuer: str, **options: Any) -> ProtectedResourceMiddleware:
    app = Starlette(routes=[Route("/mcp", whoami, methods=["POST"])])
    return ProtectedResourceMiddleware(
        app, resource=resource, authorization_servers=[issuer], **options
    )


def basic(client_id: str, secret: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{client_id}:{secret}".encode()).decode()}


async def call(app: Any, token: str) -> httpx2.Response:
    transport = httpx2.ASGITransport(app=app)
    async with httpx2.AsyncClient(transport=transport, base_url="https://mcp.example.com") as http:
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
        return await http.post("/mcp", json=body, headers={"Authorization": f"Bearer {token}"})


@pytest.fixture(scope="module")
def secret_client(server: AuthServer) -> dict[str, Any]:
    return server.add_client(
        "--name",
        "bot",
        "--grant-type",
        "client_credentials",
        "--scope",
        "mcp:read",
        "--scope",
        "other:read",
    )


@pytest.fixture(scope="module")
def key_client(
    server: AuthServer, tmp_path_factory: pytest.TempPathFactory
) -> tuple[dict[str, Any], Any]:
    key = jwt.generate_private_key("ES256")
    path = tmp_path_factory.mktemp("jwks") / "jwks.json"
    path.write_text(json.dumps({"keys": [jwt.public_jwk(key.public_key(), kid="k1", alg="ES256")]}))
    client = server.add_client(
        "--name",
        "agent",
        "--grant-type",
        "client_credentials",
        "--auth-method",
        "private_key_jwt",
        "--jwks-file",
        str(path),
        "--scope",
        "mcp:read",
    )
    return client, key


@pytest.fixture
async def http() -> AsyncIterator[httpx2.AsyncClient]:
    async with httpx2.AsyncClient(timeout=10) as client:
        yield client


async def secret_token(
    http: httpx2.AsyncClient, server: AuthServer, client: dict[str, Any], resource: str
) -> str:
    response = await http.post(
        server.token_endpoint,
        data={"grant_type": "client_credentials", "resource": resource},
        headers=basic(client["client_id"], client["client_secret"]),
    )
    assert response.status_code == 200, response.text
    return str(response.json()["access_token"])


async def test_asx1_a_client_secret_basic_token_works_for_its_resource_only(
    http: httpx2.AsyncClient, server: AuthServer, secret_client: dict[str, Any]
) -> None:
    token = await secret_token(http, server, secret_client, RESOURCE)
    ok = await call(protected(RESOURCE, server.issuer), token)
    assert ok.status_code == 200
    assert ok.json()["subject"] == secret_client["client_id"]
    other = await call(protected(OTHER, server.issuer), token)
    assert other.status_code == 401
    assert 'error="invalid_token"' in other.headers["www-authenticate"]


async def test_asx1_a_private_key_jwt_token_works_for_its_resource_only(
    http: httpx2.AsyncClient, server: AuthServer, key_client: tuple[dict[str, Any], Any]
) -> None:
    client, key = key_client
    now = int(time.time())
    assertion = jwt.encode(
        {
            "iss": client["client_id"],
            "sub": client["client_id"],
            "aud": server.issuer,
            "iat": now,
            "exp": now + 60,
            "jti": secrets.token_urlsafe(12),
        },
        key,
        alg="ES256",
        kid="k1",
        typ="JWT",
    )
    response = await http.post(
        server.token_endpoint,
        data={
            "grant_type": "client_credentials",
            "resource": RESOURCE,
            "client_assertion_type": ASSERTION_TYPE,
            "client_assertion": assertion,
        },
    )
    assert response.status_code == 200, response.text
    token = response.json()["access_token"]
    assert (await call(protected(RESOURCE, server.issuer), token)).status_code == 200
    assert (await call(protected(OTHER, server.issuer), token)).status_code == 401


async def test_t29_a_revoked_token_is_inactive_and_refused_at_once_in_introspection_mode(
    http: httpx2.AsyncClient, server: AuthServer, secret_client: dict[str, Any]
) -> None:
    rs = server.add_client(
        "--name", "resource server", "--grant-type", "client_credentials", "--introspect"
    )
    token = await secret_token(http, server, secret_client, RESOURCE)
    async with httpx2.AsyncClient(timeout=10) as rs_http:
        verifier = IntrospectionVerifier(
            resource=RESOURCE,
            client_id=rs["client_id"],
            client_secret=rs["client_secret"],
            http=rs_http,
            issuer=server.issuer,
            cache_seconds=0,
        )
        app = protected(RESOURCE, server.issuer, verifier=verifier)
        assert (await call(app, token)).status_code == 200
        revoked = await http.post(
            server.metadata["revocation_endpoint"],
            data={"token": token},
            headers=basic(secret_client["client_id"], secret_client["client_secret"]),
        )
        assert revoked.status_code == 200
        info = await http.post(
            server.metadata["introspection_endpoint"],
            data={"token": token},
            headers=basic(rs["client_id"], rs["client_secret"]),
        )
        assert info.json() == {"active": False}
        assert (await call(app, token)).status_code == 401
