"""The middleware, the verifiers and the upstream proxy open an HTTP client only to fetch or
forward something, and close what they opened: at lifespan shutdown, in ``aclose()`` or on
leaving ``async with``. A client they were given stays open for its owner. Warnings are errors
here, ResourceWarning included, so an unclosed socket or transport found by the garbage
collector fails the test."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from mcpauth.middleware import (
    IntrospectionVerifier,
    JWTVerifier,
    ProtectedResourceMiddleware,
    VerifiedToken,
)
from mcpauth.proxy import UpstreamProxy

from .helpers import INTROSPECTION_CLIENT, RESOURCE, FakeAuthorizationServer, bearer, serve

pytestmark = pytest.mark.filterwarnings("error")


async def ok(request: Request) -> PlainTextResponse:
    return PlainTextResponse("ok")


def mcp_app() -> Starlette:
    return Starlette(routes=[Route("/mcp", ok)])


@pytest.fixture
def created(monkeypatch: pytest.MonkeyPatch) -> list[httpx2.AsyncClient]:
    """Every ``httpx2.AsyncClient`` made while the test runs, in any thread."""
    made: list[httpx2.AsyncClient] = []
    original = httpx2.AsyncClient.__init__

    def recording(self: httpx2.AsyncClient, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(httpx2.AsyncClient, "__init__", recording)
    return made


@pytest.fixture
def authorization_server() -> Iterator[tuple[FakeAuthorizationServer, str]]:
    """The fake authorization server under uvicorn on 127.0.0.1: real sockets to leak."""
    servers: list[FakeAuthorizationServer] = []

    def build(base: str) -> Starlette:
        servers.append(FakeAuthorizationServer(issuer=base))
        return servers[0].app()

    with serve(factory=build) as address:
        yield servers[0], f"http://{address}"


def test_the_middleware_closes_the_client_it_opened_when_the_server_stops(
    authorization_server: tuple[FakeAuthorizationServer, str], created: list[httpx2.AsyncClient]
) -> None:
    server, issuer = authorization_server
    middleware = ProtectedResourceMiddleware(
        mcp_app(), resource=RESOURCE, authorization_servers=[issuer]
    )
    assert created == []  # nothing is opened before a token needs verifying
    with serve(middleware, lifespan="on") as address, httpx2.Client() as http:
        for _ in range(3):
            response = http.get(f"http://{address}/mcp", headers=bearer(server.mint()))
            assert response.status_code == 200
        assert server.fetches == {"metadata": 1, "jwks": 1}
        assert len(created) == 1
        assert not created[0].is_closed  # the keys came over a pooled connection
    assert created[0].is_closed  # lifespan shutdown closed it
    gc.collect()


def test_with_several_issuers_only_the_verifier_that_fetched_opened_a_client(
    authorization_server: tuple[FakeAuthorizationServer, str], created: list[httpx2.AsyncClient]
) -> None:
    server, issuer = authorization_server
    silent = "https://other-issuer.example"  # trusted, but no token of it arrives
    middleware = ProtectedResourceMiddleware(
        mcp_app(), resource=RESOURCE, authorization_servers=[issuer, silent]
    )
    with serve(middleware, lifespan="on") as address:
        response = httpx2.get(f"http://{address}/mcp", headers=bearer(server.mint()))
        assert response.status_code == 200
        assert len(created) == 1
    assert created[0].is_closed
    gc.collect()


def test_a_middleware_that_never_verifies_a_token_never_creates_a_client(
    authorization_server: tuple[FakeAuthorizationServer, str], created: list[httpx2.AsyncClient]
) -> None:
    _, issuer = authorization_server
    middleware = ProtectedResourceMiddleware(
        mcp_app(), resource=RESOURCE, authorization_servers=[issuer]
    )
    with serve(middleware, lifespan="on") as address, httpx2.Client() as http:
        base = f"http://{address}"
        assert http.get(f"{base}/.well-known/oauth-protected-resource/mcp").status_code == 200
        assert http.get(f"{base}/mcp").status_code == 401
        assert http.get(f"{base}/mcp", headers={"Authorization": "Basic eDp5"}).status_code == 401
    assert created == []
    gc.collect()


def test_a_middleware_given_a_verifier_creates_no_client(
    authorization_server: tuple[FakeAuthorizationServer, str], created: list[httpx2.AsyncClient]
) -> None:
    _, issuer = authorization_server

    class Static:
        async def verify_token(self, token: str) -> VerifiedToken:
            return VerifiedToken(
                subject="carol", client_id="c", scopes=(), expires_at=None, issuer=issuer,
                resource=RESOURCE,
            )  # fmt: skip

    middleware = ProtectedResourceMiddleware(
        mcp_app(), resource=RESOURCE, authorization_servers=[issuer], verifier=Static()
    )
    with serve(middleware, lifespan="on") as address:
        assert httpx2.get(f"http://{address}/mcp", headers=bearer("t")).status_code == 200
    assert created == []
    gc.collect()


@pytest.mark.anyio
async def test_without_a_lifespan_async_with_closes_what_the_middleware_opened(
    authorization_server: tuple[FakeAuthorizationServer, str], created: list[httpx2.AsyncClient]
) -> None:
    server, issuer = authorization_server
    app = ProtectedResourceMiddleware(mcp_app(), resource=RESOURCE, authorization_servers=[issuer])
    async with app as middleware:
        transport = httpx2.ASGITransport(middleware)  # runs no lifespan
        async with httpx2.AsyncClient(transport=transport, base_url="http://mcp") as client:
            assert (await client.get("/mcp", headers=bearer(server.mint()))).status_code == 200
        opened = [c for c in created if c is not client]
        assert len(opened) == 1
        assert not opened[0].is_closed
    assert opened[0].is_closed
    gc.collect()


@pytest.mark.anyio
async def test_a_jwt_verifier_closes_only_the_client_it_created(
    authorization_server: tuple[FakeAuthorizationServer, str], created: list[httpx2.AsyncClient]
) -> None:
    server, issuer = authorization_server
    async with JWTVerifier(issuer, RESOURCE) as idle:
        pass
    assert created == []  # never fetched, never opened
    assert idle.keys.http is None

    async with JWTVerifier(issuer, RESOURCE) as verifier:
        assert (await verifier.verify_token(server.mint())).subject == "alice"
        assert verifier.keys.http is created[0]
    assert created[0].is_closed

    async with httpx2.AsyncClient() as mine:
        async with JWTVerifier(issuer, RESOURCE, http=mine) as verifier:
            await verifier.verify_token(server.mint())
        assert not mine.is_closed  # given, so left to its owner
    gc.collect()


@pytest.mark.anyio
async def test_an_introspection_verifier_closes_only_the_client_it_created(
    authorization_server: tuple[FakeAuthorizationServer, str], created: list[httpx2.AsyncClient]
) -> None:
    server, issuer = authorization_server
    server.active["opaque"] = {
        "active": True, "iss": issuer, "sub": "bob", "client_id": "c", "aud": RESOURCE,
    }  # fmt: skip
    client_id, secret = INTROSPECTION_CLIENT
    options: dict[str, Any] = {"resource": RESOURCE, "client_id": client_id, "issuer": issuer}
    async with IntrospectionVerifier(client_secret=secret, **options) as verifier:
        assert created == []
        assert (await verifier.verify_token("opaque")).subject == "bob"
        assert len(created) == 1
    assert created[0].is_closed

    async with httpx2.AsyncClient() as mine:
        async with IntrospectionVerifier(client_secret=secret, http=mine, **options) as verifier:
            await verifier.verify_token("opaque")
        assert not mine.is_closed
    gc.collect()


def test_the_proxy_stack_closes_both_clients_it_opened_when_the_server_stops(
    authorization_server: tuple[FakeAuthorizationServer, str], created: list[httpx2.AsyncClient]
) -> None:
    """``mcpauth proxy``'s stack: the verifier's client (keys) and the proxy's (upstream)."""
    server, issuer = authorization_server
    with serve(mcp_app()) as upstream:
        proxy = UpstreamProxy(f"http://{upstream}/mcp", path="/mcp")
        app = ProtectedResourceMiddleware(proxy, resource=RESOURCE, authorization_servers=[issuer])
        with serve(app, lifespan="on") as address, httpx2.Client() as http:
            assert http.get(f"http://{address}/mcp").status_code == 401
            assert created == []  # a refused request forwards and fetches nothing
            response = http.get(f"http://{address}/mcp", headers=bearer(server.mint()))
            assert (response.status_code, response.text) == (200, "ok")
            assert len(created) == 2
            assert not any(client.is_closed for client in created)
        assert all(client.is_closed for client in created)
    gc.collect()


@pytest.mark.anyio
async def test_a_client_given_to_the_proxy_stays_open_for_its_owner(
    created: list[httpx2.AsyncClient],
) -> None:
    async with httpx2.AsyncClient(transport=httpx2.ASGITransport(mcp_app())) as mine:
        proxy = UpstreamProxy("http://upstream.internal/mcp", path="/mcp", client=mine)
        async with proxy:
            transport = httpx2.ASGITransport(proxy)
            async with httpx2.AsyncClient(transport=transport, base_url="http://p") as caller:
                assert (await caller.get("/mcp")).text == "ok"
        assert not mine.is_closed
        assert [client for client in created if client not in (mine, caller)] == []

    opened = len(created)
    async with UpstreamProxy("http://upstream.internal/mcp", path="/mcp"):
        pass
    assert len(created) == opened  # never forwarded, never opened
    gc.collect()
