"""Header hygiene of the HTTP proxy, with the proxy and the upstream served by real uvicorns:
hop-by-hop fields (and those named in Connection) are dropped both ways (RFC 9110 §7.6.1),
identity headers in any spelling cannot be forged, X-Forwarded-* come from what the proxy
saw, preflights are answered at the proxy, the issuer goes upstream, Date/Server appear once."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx2
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from mcpauth.middleware import ProtectedResourceMiddleware
from mcpauth.proxy.upstream import UpstreamProxy
from tests.middleware.helpers import ISSUER, RESOURCE, FakeAuthorizationServer, bearer, rpc, serve

pytestmark = pytest.mark.anyio

OTHER_ISSUER = "https://as2.example.com"


class Upstream:
    """An MCP-ish upstream that records the raw request headers and answers with hop-by-hop
    fields of its own, and its own CORS header."""

    def __init__(self) -> None:
        self.requests: list[list[tuple[str, str]]] = []

    async def endpoint(self, request: Request) -> JSONResponse:
        raw = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.scope["headers"]]
        self.requests.append(raw)
        return JSONResponse(
            {"ok": True},
            headers={
                "Connection": "X-Upstream-Hop",
                "X-Upstream-Hop": "secret",
                "Keep-Alive": "timeout=5",
                "Access-Control-Allow-Origin": "https://upstream-choice.example",
                "X-Upstream": "1",
            },
        )

    def app(self) -> Starlette:
        methods = ["GET", "POST", "DELETE", "OPTIONS"]
        return Starlette(routes=[Route("/mcp", self.endpoint, methods=methods)])


@pytest.fixture
def upstream() -> Iterator[tuple[Upstream, str]]:
    recorder = Upstream()
    with serve(recorder.app()) as address:
        yield recorder, f"http://{address}/mcp"


@pytest.fixture
async def as_clients() -> AsyncIterator[
    tuple[FakeAuthorizationServer, FakeAuthorizationServer, httpx2.AsyncClient]
]:
    first, second = FakeAuthorizationServer(), FakeAuthorizationServer(issuer=OTHER_ISSUER)
    mounts = {
        f"{ISSUER}/": httpx2.ASGITransport(first.app()),
        f"{OTHER_ISSUER}/": httpx2.ASGITransport(second.app()),
    }
    async with httpx2.AsyncClient(mounts=mounts) as http:
        yield first, second, http


@pytest.fixture
def proxy(
    upstream: tuple[Upstream, str], as_clients: tuple[Any, Any, httpx2.AsyncClient]
) -> Iterator[str]:
    app = ProtectedResourceMiddleware(
        UpstreamProxy(upstream[1], path="/mcp"),
        resource=RESOURCE,
        authorization_servers=[ISSUER, OTHER_ISSUER],
        http_client=as_clients[2],
    )
    with serve(app, lifespan="on") as address:
        yield f"http://{address}/mcp"


def values(headers: list[tuple[str, str]], name: str) -> list[str]:
    return [v for k, v in headers if k.lower() == name]


async def test_forged_identity_in_any_spelling_and_client_forwarding_headers_never_go_upstream(
    as_clients: tuple[FakeAuthorizationServer, Any, Any],
    upstream: tuple[Upstream, str],
    proxy: str,
) -> None:
    token = as_clients[0].mint(sub="alice", client_id="c1", scope="mcp:basic")
    forged = [
        ("X_MCPAuth_Subject", "root"),
        ("x-mcpauth_client", "admin"),
        ("X-MCPAUTH-SCOPES", "admin"),
        ("X_MCPAuth_Issuer", "https://evil.example"),
        ("X-Forwarded-For", "6.6.6.6"),
        ("X_Forwarded_For", "6.6.6.6"),
        ("X-Forwarded-Host", "evil.example"),
        ("X-Forwarded-Proto", "https"),
        ("Forwarded", "for=6.6.6.6"),
        ("Connection", "keep-alive, X-Client-Hop"),
        ("X-Client-Hop", "secret"),
        ("TE", "trailers"),
    ]
    headers = [*bearer(token).items(), *forged]
    async with httpx2.AsyncClient(timeout=10) as client:
        response = await client.post(proxy, json=rpc("ping"), headers=headers)
    assert response.status_code == 200
    (seen,) = upstream[0].requests
    names = {k.lower() for k, _ in seen}
    assert values(seen, "x-mcpauth-subject") == ["alice"]
    assert values(seen, "x-mcpauth-client") == ["c1"]
    assert values(seen, "x-mcpauth-scopes") == ["mcp:basic"]
    assert not any("_" in name for name in names)
    assert values(seen, "x-forwarded-for") == ["127.0.0.1"]
    assert values(seen, "x-forwarded-proto") == ["http"]
    assert values(seen, "x-forwarded-host") == [proxy.split("/")[2]]
    assert "forwarded" not in names
    assert "x-client-hop" not in names
    assert "te" not in names
    assert "authorization" not in names
    assert values(seen, "x-mcpauth-issuer") == [ISSUER]


async def test_the_upstream_learns_which_of_several_issuers_signed_the_token(
    as_clients: tuple[Any, FakeAuthorizationServer, Any],
    upstream: tuple[Upstream, str],
    proxy: str,
) -> None:
    token = as_clients[1].mint(sub="alice")
    async with httpx2.AsyncClient(timeout=10) as client:
        response = await client.post(proxy, json=rpc("ping"), headers=bearer(token))
    assert response.status_code == 200
    assert values(upstream[0].requests[0], "x-mcpauth-issuer") == [OTHER_ISSUER]


async def test_upstream_hop_by_hop_fields_are_dropped_and_date_and_server_appear_once(
    as_clients: tuple[FakeAuthorizationServer, Any, Any], proxy: str
) -> None:
    async with httpx2.AsyncClient(timeout=10) as client:
        response = await client.post(proxy, json=rpc("ping"), headers=bearer(as_clients[0].mint()))
    assert response.status_code == 200
    raw = [(k.decode().lower(), v.decode()) for k, v in response.headers.raw]
    names = [k for k, _ in raw]
    assert response.headers["x-upstream"] == "1"
    assert "x-upstream-hop" not in names
    assert "keep-alive" not in names
    assert names.count("date") == 1
    assert names.count("server") == 1


async def test_a_cors_preflight_is_answered_by_the_proxy_and_never_reaches_the_upstream(
    as_clients: tuple[FakeAuthorizationServer, Any, Any],
    upstream: tuple[Upstream, str],
    proxy: str,
) -> None:
    preflight = {
        "Origin": "https://app.example.com",
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type, mcp-session-id",
    }
    async with httpx2.AsyncClient(timeout=10) as client:
        answered = await client.options(proxy, headers=preflight)
        actual = await client.post(
            proxy,
            json=rpc("ping"),
            headers={**bearer(as_clients[0].mint()), "Origin": "https://app.example.com"},
        )
    assert answered.status_code == 204
    assert answered.headers["access-control-allow-origin"] == "*"
    assert "Authorization" in answered.headers["access-control-allow-headers"]
    assert "POST" in answered.headers["access-control-allow-methods"]
    assert len(upstream[0].requests) == 1  # only the authenticated POST
    # One CORS policy, the proxy's: the upstream's own Allow-Origin is replaced.
    assert actual.headers.get_list("access-control-allow-origin") == ["*"]
    assert "Mcp-Session-Id" in actual.headers["access-control-expose-headers"]


async def test_a_preflight_from_an_origin_outside_the_allow_list_gets_no_cors_grant(
    upstream: tuple[Upstream, str], as_clients: tuple[Any, Any, httpx2.AsyncClient]
) -> None:
    app = ProtectedResourceMiddleware(
        UpstreamProxy(upstream[1], path="/mcp", allowed_origins=["https://app.example.com"]),
        resource=RESOURCE,
        authorization_servers=[ISSUER],
        http_client=as_clients[2],
        allowed_origins=["https://app.example.com"],
    )
    with serve(app, lifespan="on") as address:
        async with httpx2.AsyncClient(timeout=10) as client:
            headers = {"Access-Control-Request-Method": "POST"}
            good = await client.options(
                f"http://{address}/mcp", headers={**headers, "Origin": "https://app.example.com"}
            )
            bad = await client.options(
                f"http://{address}/mcp", headers={**headers, "Origin": "https://evil.example"}
            )
    assert good.status_code == 204
    assert good.headers["access-control-allow-origin"] == "https://app.example.com"
    assert good.headers["vary"] == "Origin"
    assert bad.status_code == 403
    assert "access-control-allow-origin" not in bad.headers
    assert upstream[0].requests == []
