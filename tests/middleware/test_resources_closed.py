"""The middleware closes the HTTP client it opened when the server shuts down, whether it
verifies tokens itself or is given a verifier; nothing is left for the garbage collector to
warn about (warnings are errors here)."""

from __future__ import annotations

import gc
from typing import Any

import anyio
import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from mcpauth.middleware import JWKSCache, JWTVerifier, ProtectedResourceMiddleware

from .helpers import RESOURCE, FakeAuthorizationServer, bearer, serve

pytestmark = pytest.mark.filterwarnings("error")


async def ok(request: Request) -> PlainTextResponse:
    return PlainTextResponse("ok")


def mcp_app() -> Starlette:
    return Starlette(routes=[Route("/mcp", ok)])


def test_the_middleware_closes_its_own_http_client_when_the_server_stops() -> None:
    servers: list[FakeAuthorizationServer] = []

    def authorization_server(base: str) -> Any:
        servers.append(FakeAuthorizationServer(issuer=base))
        return servers[0].app()

    with serve(factory=authorization_server) as as_address:
        issuer = f"http://{as_address}"
        middleware = ProtectedResourceMiddleware(
            mcp_app(), resource=RESOURCE, authorization_servers=[issuer]
        )
        with serve(middleware, lifespan="on") as address:
            response = httpx.get(f"http://{address}/mcp", headers=bearer(servers[0].mint()))
            assert response.status_code == 200
            assert not middleware.http.is_closed  # keys were fetched over a pooled connection
        assert middleware.http.is_closed
    gc.collect()


def test_a_middleware_given_a_verifier_leaves_no_http_client_open() -> None:
    with serve(factory=lambda base: FakeAuthorizationServer(issuer=base).app()) as as_address:
        issuer = f"http://{as_address}"
        keys_http = httpx.AsyncClient()
        verifier = JWTVerifier(
            issuer=issuer, resource=RESOURCE, keys=JWKSCache(issuer, http=keys_http)
        )
        middleware = ProtectedResourceMiddleware(
            mcp_app(), resource=RESOURCE, authorization_servers=[issuer], verifier=verifier
        )
        with serve(middleware, lifespan="on") as address:
            assert httpx.get(f"http://{address}/mcp").status_code == 401
        assert middleware.http.is_closed
    anyio.run(keys_http.aclose)
    gc.collect()
