"""Traces of the authorization server, in process (spans kept in memory): a span per request
named by its route, the child of the caller's ``traceparent``, with the grant type, client id,
scope, resource and error code, and never a credential, a query string, a cookie or an id
from the path. The flow with real processes and an OTLP receiver: tests/e2e/test_traces.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx2
import pytest
from freezegun import freeze_time
from starlette.applications import Starlette

from mcpauth.oauth import basic_authorization
from mcpauth.server import Settings, admin, create_app
from mcpauth.server.operations.tracing import TracingMiddleware

from ..conftest import ISSUER
from ..oauth import authorization_params, pkce_pair, query, sign_in_and_approve
from ..traces import PARENT_ID, TRACE_ID, TRACEPARENT, MemorySpans, memory_spans, no_credential_in
from .conftest import PASSWORD, RESOURCE

__all__ = ["memory_spans"]  # the fixture, used by name

pytestmark = pytest.mark.anyio


@pytest.fixture
def app(settings: Settings, memory_spans: MemorySpans) -> Starlette:
    """The server with tracing on (replaces the untraced one of tests/conftest.py)."""
    return create_app(settings)


async def test_a_code_exchange_and_a_refresh_are_spans_of_the_callers_trace_with_grant_and_client(
    public_client: dict[str, Any], http: httpx2.AsyncClient, memory_spans: MemorySpans
) -> None:
    client_id = public_client["client_id"]
    verifier, challenge = pkce_pair()
    params = authorization_params(client_id, challenge, resource=RESOURCE, scope="mcp:tools")
    redirect = await sign_in_and_approve(http, params)
    code = query(redirect.headers["location"])["code"]
    exchanged = await http.post(
        "/token",
        data={
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": params["redirect_uri"],
            "code_verifier": verifier,
            "client_id": client_id,
            "resource": RESOURCE,
        },
        headers={"traceparent": TRACEPARENT},
    )
    assert exchanged.status_code == 200, exchanged.text
    tokens = exchanged.json()
    refreshed = await http.post(
        "/token",
        data={
            "grant_type": "refresh_token",
            "refresh_token": tokens["refresh_token"],
            "client_id": client_id,
        },
    )
    assert refreshed.status_code == 200, refreshed.text

    spans = memory_spans.spans()
    names = [span.name for span in spans]
    for step in (
        "POST /register",
        "GET /authorize",
        "GET /interaction/{interaction_id}",
        "POST /interaction/{interaction_id}/login",
        "POST /interaction/{interaction_id}/consent",
    ):
        assert step in names
    exchange, refresh = (span for span in spans if span.name == "POST /token")
    assert exchange.kind == "SERVER"
    assert (exchange.trace_id, exchange.parent_id) == (TRACE_ID, PARENT_ID)
    assert exchange.attributes == {
        "http.request.method": "POST",
        "url.scheme": "http",
        "http.route": "/token",
        "http.response.status_code": 200,
        "mcpauth.oauth.grant_type": "authorization_code",
        "mcpauth.oauth.client_id": client_id,
        "mcpauth.oauth.resource": RESOURCE,
    }
    assert refresh.trace_id != TRACE_ID  # no traceparent: a trace of its own
    assert refresh.attributes["mcpauth.oauth.grant_type"] == "refresh_token"
    authorize = next(span for span in spans if span.name == "GET /authorize")
    assert authorize.attributes["mcpauth.oauth.client_id"] == client_id
    assert authorize.attributes["mcpauth.oauth.scope"] == "mcp:tools"
    no_credential_in(
        spans,
        {
            "password": PASSWORD,
            "code": code,
            "code verifier": verifier,
            "code challenge": challenge,
            "state": params["state"],
            "access token": tokens["access_token"],
            "refresh token": tokens["refresh_token"],
            "rotated refresh token": refreshed.json()["refresh_token"],
            **{f"cookie {name}": value for name, value in http.cookies.items()},
        },
    )


async def test_a_confidential_client_is_named_from_basic_credentials_and_its_secret_never_is(
    seeded: Starlette, http: httpx2.AsyncClient, memory_spans: MemorySpans
) -> None:
    registered = await http.post(
        "/register",
        json={
            "client_name": "Confidential",
            "redirect_uris": ["http://127.0.0.1/callback"],
            "token_endpoint_auth_method": "client_secret_basic",
            "grant_types": ["authorization_code"],
        },
    )
    assert registered.status_code == 201, registered.text
    client = registered.json()
    basic = basic_authorization(client["client_id"], client["client_secret"])
    refused = await http.post(
        "/token",
        data={"grant_type": "authorization_code", "code": "never-issued-code"},
        headers={"Authorization": basic},
    )
    assert refused.json()["error"] == "invalid_grant"
    span = memory_spans.named("POST /token")
    assert span.attributes["mcpauth.oauth.client_id"] == client["client_id"]
    assert span.attributes["error.type"] == "invalid_grant"
    assert span.attributes["http.response.status_code"] == 400
    no_credential_in(
        memory_spans.spans(),
        {
            "client secret": client["client_secret"],
            "registration access token": client["registration_access_token"],
            "basic credentials": basic.split()[1],
            "code": "never-issued-code",
        },
    )


async def test_an_error_sent_back_to_the_client_by_redirect_is_the_spans_error_code(
    seeded: Starlette, http: httpx2.AsyncClient, memory_spans: MemorySpans
) -> None:
    client = admin.add_client(  # an operator's client: errors go back to it at once
        seeded.state.mcpauth,
        name="Trusted",
        redirect_uris=["https://app.example/cb"],
        auth_method="none",
        grant_types=["authorization_code"],
    )
    _, challenge = pkce_pair()
    params = authorization_params(
        client["client_id"],
        challenge,
        redirect_uri="https://app.example/cb",
        response_type="token",
        state="state-secret-4711",
    )
    response = await http.get("/authorize", params=params)
    assert query(response.headers["location"])["error"] == "unsupported_response_type"
    span = memory_spans.named("GET /authorize")
    assert span.attributes["error.type"] == "unsupported_response_type"
    no_credential_in([span], {"state": "state-secret-4711", "challenge": challenge})


async def test_a_path_is_recorded_as_its_route_and_no_query_cookie_or_header_is_read(
    http: httpx2.AsyncClient, memory_spans: MemorySpans
) -> None:
    await http.get(
        "/interaction/interaction-id-0451",
        params={"code": "query-code-0451", "state": "query-state-0451"},
        headers={"Cookie": "mcpauth_session=cookie-0451", "X-Api-Key": "header-0451"},
    )
    await http.get("/upstream/github/callback?code=callback-code-0451&state=callback-state")
    route = memory_spans.named("GET /interaction/{interaction_id}")
    assert route.attributes["http.route"] == "/interaction/{interaction_id}"
    no_credential_in(
        memory_spans.spans(),
        {
            "interaction id": "interaction-id-0451",
            "query code": "query-code-0451",
            "query state": "query-state-0451",
            "cookie": "cookie-0451",
            "header": "header-0451",
            "callback code": "callback-code-0451",
        },
    )


async def test_a_refusal_of_the_rate_limiter_is_a_span_with_its_error_code(
    make_settings: Callable[..., Settings], memory_spans: MemorySpans
) -> None:
    app = create_app(make_settings(rate_limit_register=1))
    transport = httpx2.ASGITransport(app=app, client=("203.0.113.7", 4000))
    with freeze_time("2026-06-01 12:00:05"):  # one fixed window for both
        async with httpx2.AsyncClient(transport=transport, base_url=ISSUER) as http:
            for _ in range(2):
                await http.post("/register", json={"redirect_uris": ["http://127.0.0.1/cb"]})
    limited = [s for s in memory_spans.spans() if s.attributes["http.response.status_code"] == 429]
    assert len(limited) == 1
    assert limited[0].attributes["error.type"] == "too_many_requests"
    assert limited[0].attributes["http.route"] == "/register"


def test_with_tracing_off_the_server_has_no_tracing_middleware(
    make_settings: Callable[..., Settings],
) -> None:
    untraced = create_app(make_settings())
    assert TracingMiddleware not in [m.cls for m in untraced.user_middleware]
