"""The HTTP proxy in process: identity headers instead of the token (MCP RS-17), spoofed
identity headers stripped, 502 on upstream failure, CLI argument handling."""

from __future__ import annotations

import argparse
from typing import Any

import httpx2
import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from mcpauth import jwt
from mcpauth.dpop import make_proof
from mcpauth.middleware import DPoP, ProtectedResourceMiddleware, SharedState
from mcpauth.proxy.cli import SHARED_STATE_ENV, add_proxy_parser, build_proxy_app, run_proxy
from mcpauth.proxy.stdio import StdioBridge
from mcpauth.proxy.upstream import CORSGrant, UpstreamProxy
from tests.middleware.helpers import (
    ISSUER,
    RESOURCE,
    FakeAuthorizationServer,
    bearer,
    client_for,
    rpc,
)

pytestmark = pytest.mark.anyio


async def echo(request: Request) -> JSONResponse:
    return JSONResponse(
        {
            "headers": dict(request.headers),
            "body": (await request.body()).decode(),
            "query": request.url.query,
        },
        headers={"Connection": "close", "X-Upstream": "1"},
    )


upstream_app = Starlette(routes=[Route("/upstream/mcp", echo, methods=["GET", "POST", "DELETE"])])


def protected_proxy(as_http: httpx2.AsyncClient, transport: httpx2.AsyncBaseTransport) -> Any:
    proxy = UpstreamProxy(
        "http://upstream.internal/upstream/mcp",
        path="/mcp",
        client=httpx2.AsyncClient(transport=transport),
    )
    return ProtectedResourceMiddleware(
        proxy, resource=RESOURCE, authorization_servers=[ISSUER], http_client=as_http
    )


async def test_the_proxy_forwards_identity_and_never_the_token_rs_17(
    auth_server: FakeAuthorizationServer, as_http: httpx2.AsyncClient
) -> None:
    token = auth_server.mint(sub="alice", client_id="c1", scope="mcp:basic files:read")
    app = protected_proxy(as_http, httpx2.ASGITransport(upstream_app))
    spoofed = {
        "X-MCPAuth-Subject": "root",
        "x-mcpauth-client": "admin",
        "X-MCPAuth-Other": "x",
        "Proxy-Authorization": "Basic x",
    }
    async with client_for(app) as client:
        response = await client.post(
            "/mcp?x=1", json=rpc("tools/list"), headers={**bearer(token), **spoofed}
        )
    assert response.status_code == 200
    seen = response.json()
    headers = seen["headers"]
    assert headers["x-mcpauth-subject"] == "alice"
    assert headers["x-mcpauth-client"] == "c1"
    assert headers["x-mcpauth-scopes"] == "mcp:basic files:read"
    assert "x-mcpauth-other" not in headers
    assert "authorization" not in headers
    assert "proxy-authorization" not in headers
    assert token not in str(seen)
    assert headers["host"] == "upstream.internal"
    assert seen["query"] == "x=1"
    assert '"tools/list"' in seen["body"]
    assert response.headers["x-upstream"] == "1"
    assert "connection" not in response.headers


async def test_an_unreachable_upstream_gives_502_with_a_json_rpc_body(
    auth_server: FakeAuthorizationServer, as_http: httpx2.AsyncClient
) -> None:
    def refuse(request: httpx2.Request) -> httpx2.Response:
        raise httpx2.ConnectError("refused", request=request)

    app = protected_proxy(as_http, httpx2.MockTransport(refuse))
    async with client_for(app) as client:
        response = await client.post("/mcp", json=rpc("ping"), headers=bearer(auth_server.mint()))
    assert response.status_code == 502
    body = response.json()
    assert body["jsonrpc"] == "2.0"
    assert body["error"]["message"] == "Upstream MCP server unavailable"


async def test_the_proxy_serves_only_the_resource_path(
    auth_server: FakeAuthorizationServer, as_http: httpx2.AsyncClient
) -> None:
    app = protected_proxy(as_http, httpx2.ASGITransport(upstream_app))
    async with client_for(app) as client:
        response = await client.get("/elsewhere", headers=bearer(auth_server.mint()))
    assert response.status_code == 404


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="mcpauth")
    add_proxy_parser(parser.add_subparsers(dest="cmd"))
    return parser.parse_args(["proxy", *argv])


def test_the_cli_parses_http_and_stdio_modes() -> None:
    base = ["--resource", RESOURCE, "--authorization-server", ISSUER]
    http_mode = parse(
        [
            *base,
            "--upstream",
            "http://127.0.0.1:9/mcp",
            "--scope",
            "a",
            "--tool-scope",
            "rm=files:write",
        ]
    )
    assert http_mode.upstream == "http://127.0.0.1:9/mcp"
    assert http_mode.tool_scopes == [("rm", "files:write")]
    app = build_proxy_app(http_mode)
    assert isinstance(app, CORSGrant)
    middleware = app.app
    assert isinstance(middleware, ProtectedResourceMiddleware)
    assert app.proxy is middleware.app
    assert middleware.policy.targets["tools"] == {"rm": {"files:write"}}
    stdio_mode = parse([*base, "--", "python", "server.py", "--flag"])
    assert stdio_mode.stdio_command[-3:] == ["python", "server.py", "--flag"]
    assert stdio_mode.cmd == "proxy"
    assert callable(stdio_mode.handler)


@pytest.mark.parametrize(
    "extra", [[], ["--upstream", "http://127.0.0.1:9/mcp", "--", "python"]], ids=["neither", "both"]
)
def test_the_cli_needs_exactly_one_of_upstream_and_command(extra: list[str]) -> None:
    args = parse(["--resource", RESOURCE, "--authorization-server", ISSUER, *extra])
    with pytest.raises(ValueError, match="either"):
        build_proxy_app(args)


def test_a_malformed_tool_scope_is_a_usage_error() -> None:
    with pytest.raises(SystemExit):
        parse(["--resource", RESOURCE, "--authorization-server", ISSUER, "--tool-scope", "nope"])


def test_the_cli_passes_session_limits_to_the_stdio_bridge() -> None:
    base = ["--resource", RESOURCE, "--authorization-server", ISSUER]
    limits = ["--max-sessions", "7", "--max-sessions-per-subject", "2"]
    args = parse([*base, *limits, "--session-idle-timeout", "30", "--", "python", "server.py"])
    bridge = build_proxy_app(args).app
    assert isinstance(bridge, StdioBridge)
    assert (bridge.max_sessions, bridge.max_sessions_per_subject) == (7, 2)
    assert bridge.idle_timeout == 30.0
    defaults = build_proxy_app(parse([*base, "--", "python", "server.py"])).app
    assert isinstance(defaults, StdioBridge)
    assert (defaults.max_sessions, defaults.max_sessions_per_subject) == (100, 10)
    assert defaults.idle_timeout == 900.0


@pytest.mark.parametrize(
    "option",
    [
        ["--max-sessions", "0"],
        ["--max-sessions-per-subject", "-1"],
        ["--session-idle-timeout", "0"],
        ["--session-idle-timeout", "nan"],
    ],
)
def test_non_positive_session_limits_are_usage_errors(option: list[str]) -> None:
    with pytest.raises(SystemExit):
        parse(["--resource", RESOURCE, "--authorization-server", ISSUER, *option])


async def test_the_proxy_takes_dpop_and_forwards_neither_token_nor_proof(
    auth_server: FakeAuthorizationServer, as_http: httpx2.AsyncClient
) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    jkt = jwt.thumbprint(jwt.public_jwk(key.public_key(), kid="", alg="ES256"))
    token = auth_server.mint(cnf={"jkt": jkt})
    proof = make_proof(key, alg="ES256", method="POST", url=RESOURCE, access_token=token)
    app = protected_proxy(as_http, httpx2.ASGITransport(upstream_app))
    async with client_for(app) as client:
        response = await client.post(
            "/mcp",
            json=rpc("tools/list"),
            headers={"Authorization": f"DPoP {token}", "DPoP": proof},
        )
        copied = await client.post(
            "/mcp", json=rpc("tools/list"), headers={"Authorization": f"Bearer {token}"}
        )
    assert response.status_code == 200, response.text
    headers = response.json()["headers"]
    assert "dpop" not in headers
    assert "authorization" not in headers
    assert proof not in response.text
    assert copied.status_code == 401  # the token copied without its key


async def test_a_browser_dpop_client_reads_the_nonce_refusal_and_gets_through_the_proxy(
    auth_server: FakeAuthorizationServer, as_http: httpx2.AsyncClient
) -> None:
    """CORS for DPoP: the preflight allows the DPoP header, and the middleware's own refusals
    carry the proxy's grant so a script can read WWW-Authenticate and DPoP-Nonce."""
    key = ec.generate_private_key(ec.SECP256R1())
    jkt = jwt.thumbprint(jwt.public_jwk(key.public_key(), kid="", alg="ES256"))
    token = auth_server.mint(cnf={"jkt": jkt})
    app_origin = "https://app.example.com"
    proxy = UpstreamProxy(
        "http://upstream.internal/upstream/mcp",
        path="/mcp",
        client=httpx2.AsyncClient(transport=httpx2.ASGITransport(upstream_app)),
        allowed_origins=[app_origin],
    )
    middleware = ProtectedResourceMiddleware(
        proxy,
        resource=RESOURCE,
        authorization_servers=[ISSUER],
        http_client=as_http,
        allowed_origins=[app_origin],
        dpop=DPoP(required=True, nonce_key=b"a nonce key of 16 bytes or more"),
    )

    def headers(nonce: str | None = None) -> dict[str, str]:
        proof = make_proof(
            key, alg="ES256", method="POST", url=RESOURCE, access_token=token, nonce=nonce
        )
        return {"Origin": app_origin, "Authorization": f"DPoP {token}", "DPoP": proof}

    async with client_for(CORSGrant(middleware, proxy)) as client:
        preflight = await client.options(
            "/mcp",
            headers={
                "Origin": app_origin,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization, dpop, content-type",
            },
        )
        refused = await client.post("/mcp", json=rpc("ping"), headers=headers())
        nonce = refused.headers["DPoP-Nonce"]
        accepted = await client.post("/mcp", json=rpc("ping"), headers=headers(nonce))
        elsewhere = await client.post(
            "/mcp", json=rpc("ping"), headers={**headers(nonce), "Origin": "https://evil.example"}
        )
    assert preflight.status_code == 204
    assert "DPoP" in preflight.headers["access-control-allow-headers"].split(", ")
    assert refused.status_code == 401
    assert refused.json()["error"] == "use_dpop_nonce"
    assert refused.headers.get_list("access-control-allow-origin") == [app_origin]
    exposed = refused.headers["access-control-expose-headers"].split(", ")
    assert {"WWW-Authenticate", "DPoP-Nonce"} <= set(exposed)
    assert accepted.status_code == 200, accepted.text
    assert accepted.headers.get_list("access-control-allow-origin") == [app_origin]
    assert accepted.headers["DPoP-Nonce"]
    forwarded = accepted.json()["headers"]
    assert "dpop" not in forwarded
    assert "authorization" not in forwarded
    assert elsewhere.status_code == 403
    assert "access-control-allow-origin" not in elsewhere.headers


async def test_the_proxy_alone_drops_the_token_and_the_proof() -> None:
    """Defence in depth: UpstreamProxy drops Authorization and DPoP itself, whatever is in
    front of it."""
    proxy = UpstreamProxy(
        "http://upstream.internal/upstream/mcp",
        path="/mcp",
        client=httpx2.AsyncClient(transport=httpx2.ASGITransport(upstream_app)),
    )
    async with client_for(proxy) as client:
        response = await client.post(
            "/mcp",
            json=rpc("ping"),
            headers={"Authorization": "DPoP abc", "DPoP": "x.y.z", "X-Kept": "1"},
        )
    forwarded = response.json()["headers"]
    assert forwarded["x-kept"] == "1"
    assert "authorization" not in forwarded
    assert "dpop" not in forwarded


def test_the_cli_sets_dpop_options(monkeypatch: pytest.MonkeyPatch) -> None:
    base = [
        "--resource",
        RESOURCE,
        "--authorization-server",
        ISSUER,
        "--upstream",
        "http://127.0.0.1:9/mcp",
    ]
    monkeypatch.setenv("NONCE_KEY", "a key of at least sixteen bytes")
    app = build_proxy_app(parse([*base, "--require-dpop", "--dpop-nonce-key-env", "NONCE_KEY"]))
    assert isinstance(app, CORSGrant)
    middleware = app.app
    assert isinstance(middleware, ProtectedResourceMiddleware)
    assert middleware.dpop.required
    assert middleware.dpop.nonce_header()["DPoP-Nonce"]
    plain = build_proxy_app(parse(base))
    assert isinstance(plain, CORSGrant)
    assert isinstance(plain.app, ProtectedResourceMiddleware)
    assert not plain.app.dpop.required
    assert not plain.app.dpop.uses_nonces
    monkeypatch.setenv("NONCE_KEY", "short")
    with pytest.raises(ValueError, match="16 bytes"):
        build_proxy_app(parse([*base, "--dpop-nonce-key-env", "NONCE_KEY"]))


def test_the_cli_sets_the_rate_limit_and_the_shared_state(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    base = [
        "--resource",
        RESOURCE,
        "--authorization-server",
        ISSUER,
        "--upstream",
        "http://127.0.0.1:9/mcp",
    ]
    monkeypatch.delenv(SHARED_STATE_ENV, raising=False)
    shared = [*base, "--rate-limit", "30", "--rate-window", "10"]
    shared += ["--shared-state", "redis://redis.internal:6379/1", "--shared-state-timeout", "0.5"]
    app = build_proxy_app(parse(shared))
    assert isinstance(app, CORSGrant)
    middleware = app.app
    assert isinstance(middleware, ProtectedResourceMiddleware)
    assert (middleware.limits.rate_limit, middleware.limits.rate_window) == (30, 10.0)
    assert middleware._shared is not None
    assert middleware._shared.config == SharedState("redis://redis.internal:6379/1", timeout=0.5)
    # without the option, the environment variable (a URL with a password stays off the
    # command line); without either, each process keeps its own
    monkeypatch.setenv(SHARED_STATE_ENV, "rediss://:pw@redis.internal:6380/0")
    from_env = build_proxy_app(parse(base))
    assert isinstance(from_env, CORSGrant)
    assert isinstance(from_env.app, ProtectedResourceMiddleware)
    assert from_env.app._shared is not None
    assert from_env.app._shared.config.url == "rediss://:pw@redis.internal:6380/0"
    assert from_env.app._shared.config.timeout == 0.25
    monkeypatch.delenv(SHARED_STATE_ENV)
    alone = build_proxy_app(parse(base))
    assert isinstance(alone, CORSGrant)
    assert isinstance(alone.app, ProtectedResourceMiddleware)
    assert alone.app._shared is None
    assert alone.app.limits.rate_limit is None
    # a URL that is not Redis: exit status 2 and what is wrong, not a traceback
    args = parse([*base, "--shared-state", "http://redis.internal:6379"])
    assert run_proxy(args) == 2
    assert "redis:// or rediss://" in capsys.readouterr().err


@pytest.mark.parametrize(
    "option",
    [
        ["--rate-limit", "0"],
        ["--rate-window", "0"],
        ["--shared-state-timeout", "-1"],
        ["--shared-state-timeout", "inf"],
    ],
)
def test_non_positive_rate_and_shared_state_options_are_usage_errors(option: list[str]) -> None:
    with pytest.raises(SystemExit):
        parse(["--resource", RESOURCE, "--authorization-server", ISSUER, *option])
