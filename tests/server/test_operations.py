"""Running it for real: rate limits shared through the database, request ids, an audit trail
that never holds a secret, JSON logs, readiness and Prometheus metrics."""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Callable
from typing import Any

import httpx2
import pytest
from freezegun import freeze_time
from sqlalchemy import text
from starlette.applications import Starlette

from mcpauth.server import Settings, admin, create_app
from mcpauth.server.operations.logs import JSONFormatter

from ..conftest import ISSUER
from ..oauth import register_public_client
from .conftest import PASSWORD
from .test_token import refresh, tokens

pytestmark = pytest.mark.anyio
REGISTRATION = {"redirect_uris": ["http://127.0.0.1/cb"], "token_endpoint_auth_method": "none"}


def client_for(app: Starlette, address: str = "203.0.113.7") -> httpx2.AsyncClient:
    return httpx2.AsyncClient(
        transport=httpx2.ASGITransport(app=app, client=(address, 4000)), base_url=ISSUER
    )


async def test_t19_registration_is_rate_limited_per_address_with_retry_after(
    make_settings: Callable[..., Settings],
) -> None:
    app = create_app(make_settings(rate_limit_register=3))
    # time held at the start of a minute: the fixed window cannot roll over between requests
    # (a loaded machine once took long enough to cross a minute boundary)
    with freeze_time("2026-06-01 12:00:05"):
        async with client_for(app) as http, client_for(app, "198.51.100.1") as other:
            statuses = [
                (await http.post("/register", json=REGISTRATION)).status_code for _ in range(4)
            ]
            limited = await http.post("/register", json=REGISTRATION)
            elsewhere = await other.post("/register", json=REGISTRATION)
    assert statuses == [201, 201, 201, 429]
    assert limited.json()["error"] == "too_many_requests"
    assert 0 < int(limited.headers["retry-after"]) <= 60
    assert elsewhere.status_code == 201


async def test_rate_limits_apply_to_an_app_mounted_below_a_root_path(
    make_settings: Callable[..., Settings],
) -> None:
    app = create_app(make_settings(rate_limit_register=2))
    transport = httpx2.ASGITransport(app=app, client=("203.0.113.9", 4000), root_path="/auth")
    with freeze_time("2026-06-01 12:00:05"):  # one fixed window for all three
        async with httpx2.AsyncClient(transport=transport, base_url=ISSUER) as http:
            statuses = [
                (await http.post("/auth/register", json=REGISTRATION)).status_code for _ in range(3)
            ]
    assert statuses == [201, 201, 429]


async def test_rate_limits_are_shared_by_replicas_on_one_database(
    make_settings: Callable[..., Settings],
) -> None:
    # Each replica counts in memory and merges into the database at most once a second, so
    # the shared limit holds to within one sync interval of traffic per replica.
    settings = make_settings(rate_limit_register=4)
    with freeze_time("2026-06-01 12:00:05") as frozen:
        first, second = create_app(settings), create_app(settings)
        statuses: list[int] = []
        async with client_for(first) as a, client_for(second) as b:
            for http in (a, b) * 5:
                statuses.append((await http.post("/register", json=REGISTRATION)).status_code)
                frozen.tick(1.5)
    assert statuses.count(201) <= 4 + 2  # the limit, plus at most one sync of slack per replica
    assert statuses[-4:] == [429] * 4  # once both have synced, both refuse


async def test_the_token_endpoint_is_rate_limited_per_client(
    make_settings: Callable[..., Settings],
) -> None:
    app = create_app(make_settings(rate_limit_token=2))
    ctx = app.state.mcpauth
    admin.add_resource(
        ctx, "http://127.0.0.1:8000/mcp", scopes=["a"], default_scopes=["a"], is_default=True
    )
    bot = admin.add_client(ctx, name="bot", grant_types=["client_credentials"])
    token = base64.b64encode(f"{bot['client_id']}:{bot['client_secret']}".encode()).decode()
    headers = {"Authorization": f"Basic {token}"}
    statuses = []
    with freeze_time():  # one fixed window for all three (a slow run could cross a minute)
        for index in range(3):  # from different addresses: the client key still counts
            async with client_for(app, f"198.51.100.{index + 1}") as http:
                response = await http.post(
                    "/token", data={"grant_type": "client_credentials"}, headers=headers
                )
                statuses.append(response.status_code)
    assert statuses == [200, 200, 429]


async def test_every_response_carries_a_request_id(http: httpx2.AsyncClient) -> None:
    generated = await http.get("/health")
    token = await http.post("/token", data={"grant_type": "client_credentials"})
    kept = await http.get("/health", headers={"X-Request-ID": "abc-123"})
    replaced = await http.get("/health", headers={"X-Request-ID": "bad id\nwith newline"})
    assert len(generated.headers["x-request-id"]) == len(token.headers["x-request-id"]) == 16
    assert token.headers["x-request-id"] != generated.headers["x-request-id"]
    assert kept.headers["x-request-id"] == "abc-123"
    assert replaced.headers["x-request-id"] != "bad id\nwith newline"


async def test_the_audit_trail_records_the_flow_and_never_a_secret(
    http: httpx2.AsyncClient,
    public_client: dict[str, Any],
    settings: Settings,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="mcpauth")
    cid = public_client["client_id"]
    with freeze_time() as clock:
        issued = await tokens(http, public_client)
        rotated = (await refresh(http, cid, issued["refresh_token"])).json()
        retried = (await refresh(http, cid, issued["refresh_token"])).json()  # within the grace
        clock.tick(settings.refresh_token_reuse_grace)
        await refresh(http, cid, issued["refresh_token"])  # a replay past the grace
    events = [getattr(r, "audit", {}).get("event") for r in caplog.records]
    for event in (
        "login.success",
        "consent.granted",
        "token.issued",
        "token.refreshed",
        "replay.within_grace",
        "replay.detected",
    ):
        assert event in events
    formatter = JSONFormatter()
    written = "\n".join(formatter.format(record) for record in caplog.records)
    secrets_seen = [
        issued["access_token"],
        issued["refresh_token"],
        rotated["refresh_token"],
        rotated["access_token"],
        retried["refresh_token"],
        retried["access_token"],
        PASSWORD,
    ]
    assert not [s for s in secrets_seen if s in written]
    lines = [json.loads(line) for line in written.splitlines()]
    assert all({"time", "level", "logger", "message", "request_id"} <= set(line) for line in lines)


async def test_readiness_reports_a_database_behind_its_schema(
    http: httpx2.AsyncClient, app: Starlette
) -> None:
    assert (await http.get("/health/ready")).json() == {"status": "ready"}
    with app.state.mcpauth.db.engine.begin() as conn:
        conn.execute(text("DELETE FROM alembic_version"))  # as if never migrated
    response = await http.get("/health/ready")
    assert response.status_code == 503
    assert "schema" in response.json()["reason"]


async def test_prometheus_metrics_count_requests_and_security_events(
    make_settings: Callable[..., Settings],
) -> None:
    app = create_app(make_settings(metrics=True))
    async with client_for(app) as http:
        await register_public_client(http)
        await http.get("/health")
        await http.post("/token", data={"grant_type": "client_credentials"})
        body = (await http.get("/metrics")).text
    assert 'mcpauth_http_requests_total{route="/register",status="201"} 1.0' in body
    assert 'mcpauth_http_requests_total{route="/token",status="401"} 1.0' in body
    assert 'mcpauth_http_requests_total{route="/health",status="200"} 1.0' in body
    assert 'mcpauth_audit_events_total{event="client.registered"}' in body


async def test_metrics_are_off_by_default(http: httpx2.AsyncClient) -> None:
    assert (await http.get("/metrics")).status_code == 404


async def test_the_token_endpoint_answers_other_methods_with_405_and_allows_cors(
    http: httpx2.AsyncClient,
) -> None:
    wrong = await http.get("/token")
    assert wrong.status_code == 405
    assert wrong.json()["error"] == "invalid_request"
    assert set(wrong.headers["allow"].replace(" ", "").split(",")) == {"POST", "OPTIONS"}
    preflight = await http.options("/token", headers={"Origin": "https://app.example"})
    assert preflight.status_code == 204
    assert preflight.headers["access-control-allow-origin"] == "*"
    refused = await http.post("/token", data={"grant_type": "client_credentials"})
    assert refused.status_code == 401
    assert refused.headers["access-control-allow-origin"] == "*"
    assert refused.headers["cache-control"] == "no-store"


def test_an_ipv6_caller_is_throttled_by_its_64_network() -> None:
    """A host that can choose any of its 2^64 addresses counts as one address in every
    throttle and rate limit; IPv4 (and IPv4-mapped) addresses count as themselves."""
    from mcpauth.server.operations.size_limits import address_in_key

    same = {address_in_key(a) for a in ("2001:db8:1:2::9", "2001:db8:1:2:ffff:1:2:3")}
    assert same == {"2001:db8:1:2::/64"}
    assert address_in_key("2001:db8:1:3::9") != address_in_key("2001:db8:1:2::9")
    assert address_in_key("fe80::1%eth0") == "fe80::/64"
    assert address_in_key("::ffff:192.0.2.1") == "::ffff:192.0.2.1"
    assert address_in_key("192.0.2.1") == "192.0.2.1"
