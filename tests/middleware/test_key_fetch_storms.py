"""While the middleware holds no keys (or cannot introspect) and the authorization server is
down, requests neither storm it (one fetch in flight, growing bounded back-off) nor learn
internal URLs from the 503; once the back-off allows, the next request succeeds."""

from __future__ import annotations

import logging
import time
from typing import Any

import anyio
import httpx2
import pytest

from mcpauth.errors import TemporarilyUnavailable
from mcpauth.middleware import (
    IntrospectionVerifier,
    JWTVerifier,
    ProtectedResourceMiddleware,
)

from .helpers import (
    INTROSPECTION_CLIENT,
    ISSUER,
    RESOURCE,
    FakeAuthorizationServer,
    RecordingApp,
    bearer,
    client_for,
)

pytestmark = pytest.mark.anyio


class Clock:
    """A clock the test moves by hand, from the time the test's tokens were minted at (the
    verifiers judge a token's ``exp`` on it too)."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


class FlakyAuthorizationServer:
    """The fake authorization server behind a switch; counts every request that reaches it."""

    def __init__(self, server: FakeAuthorizationServer) -> None:
        self.app = server.app()
        self.down = True
        self.requests = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.requests += 1
        if self.down:
            await send({"type": "http.response.start", "status": 503, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        await self.app(scope, receive, send)


async def test_concurrent_requests_while_the_as_is_down_cause_a_bounded_number_of_fetches(
    auth_server: FakeAuthorizationServer,
    recording_app: RecordingApp,
    caplog: pytest.LogCaptureFixture,
) -> None:
    flaky = FlakyAuthorizationServer(auth_server)
    clock = Clock()
    responses: list[httpx2.Response] = []
    async with httpx2.AsyncClient(transport=httpx2.ASGITransport(flaky)) as http:
        verifier = JWTVerifier(ISSUER, RESOURCE, http=http, clock=clock, failure_backoff=2.0)
        app = ProtectedResourceMiddleware(
            recording_app, resource=RESOURCE, authorization_servers=[ISSUER], verifier=verifier
        )
        token = auth_server.mint()
        async with client_for(app) as client:

            async def call() -> None:
                responses.append(await client.get("/mcp", headers=bearer(token)))

            with caplog.at_level(logging.WARNING, logger="mcpauth"):
                async with anyio.create_task_group() as group:
                    for _ in range(100):
                        group.start_soon(call)
            # One discovery attempt (RFC 8414, then OpenID Connect Discovery) for 100 requests.
            assert flaky.requests <= 2
            assert [r.status_code for r in responses] == [503] * 100
            body = responses[-1].text
            assert "http" not in body
            assert "well-known" not in body
            assert responses[-1].json()["error"] == "temporarily_unavailable"
            assert 1 <= int(responses[-1].headers["Retry-After"]) <= 2
            assert ISSUER in caplog.text  # the details are logged, not sent

            # The AS is back, but the back-off still holds: no fetch, a quick 503.
            flaky.down = False
            held = await client.get("/mcp", headers=bearer(token))
            assert held.status_code == 503
            assert flaky.requests <= 2

            clock.now += 2
            allowed = await client.get("/mcp", headers=bearer(token))
    assert allowed.status_code == 200
    assert len(recording_app.calls) == 1


async def test_the_back_off_grows_with_each_failure_and_is_bounded(
    auth_server: FakeAuthorizationServer,
) -> None:
    flaky = FlakyAuthorizationServer(auth_server)
    clock = Clock()
    delays: list[int] = []
    async with httpx2.AsyncClient(transport=httpx2.ASGITransport(flaky)) as http:
        verifier = JWTVerifier(
            ISSUER, RESOURCE, http=http, clock=clock, failure_backoff=1.0, max_failure_backoff=8
        )
        for _ in range(6):
            before = flaky.requests
            with pytest.raises(TemporarilyUnavailable) as failed:
                await verifier.verify_token(auth_server.mint())
            assert flaky.requests > before  # each attempt after its back-off reaches the AS
            delay = int(failed.value.headers["Retry-After"])
            delays.append(delay)
            clock.now += delay
    assert delays == [1, 2, 4, 8, 8, 8]


async def test_introspection_backs_off_while_the_as_is_down_and_recovers_after(
    auth_server: FakeAuthorizationServer, recording_app: RecordingApp
) -> None:
    flaky = FlakyAuthorizationServer(auth_server)
    clock = Clock()
    auth_server.active["opaque"] = active()
    async with httpx2.AsyncClient(transport=httpx2.ASGITransport(flaky)) as http:
        verifier = IntrospectionVerifier(
            resource=RESOURCE, client_id=INTROSPECTION_CLIENT[0],
            client_secret=INTROSPECTION_CLIENT[1], issuer=ISSUER, http=http, clock=clock,
        )  # fmt: skip
        app = ProtectedResourceMiddleware(
            recording_app, resource=RESOURCE, authorization_servers=[ISSUER], verifier=verifier
        )
        statuses: list[int] = []
        async with client_for(app) as client:

            async def call(token: str) -> None:
                statuses.append((await client.get("/mcp", headers=bearer(token))).status_code)

            # Discovery of the endpoint: one attempt however many callers.
            async with anyio.create_task_group() as group:
                for i in range(50):
                    group.start_soon(call, f"opaque-{i}")
            assert statuses == [503] * 50
            assert flaky.requests <= 2

            flaky.down = False
            clock.now += 1
            await call("opaque")
            assert statuses[-1] == 200
            discovered = flaky.requests

            # The introspection endpoint itself fails: one call, then the back-off holds.
            flaky.down = True
            for i in range(20):
                await call(f"other-{i}")
            assert statuses[-20:] == [503] * 20
            assert flaky.requests == discovered + 1

            flaky.down = False
            clock.now += 1
            await call("opaque")
    assert statuses[-1] == 200


def active(**overrides: Any) -> dict[str, Any]:
    data = {"active": True, "iss": ISSUER, "sub": "bob", "client_id": "c", "aud": RESOURCE}
    return {**data, "exp": int(time.time()) + 300, **overrides}


async def test_an_authorization_server_that_never_answers_is_given_up_on_at_the_deadline(
    auth_server: FakeAuthorizationServer,
) -> None:
    never = anyio.Event()  # never set: only the deadline ends the fetch
    requests = 0

    async def stall(request: httpx2.Request) -> httpx2.Response:
        nonlocal requests
        requests += 1
        await never.wait()
        raise AssertionError("unreachable")

    clock = Clock()
    async with httpx2.AsyncClient(transport=httpx2.MockTransport(stall)) as http:
        verifier = JWTVerifier(ISSUER, RESOURCE, http=http, clock=clock, fetch_timeout=0.2)
        with anyio.fail_after(5):
            with pytest.raises(TemporarilyUnavailable) as failed:
                await verifier.verify_token(auth_server.mint())
            assert isinstance(failed.value.__cause__, TimeoutError)
            assert failed.value.headers["Retry-After"] == "1"
            with pytest.raises(TemporarilyUnavailable):  # the back-off: no new request
                await verifier.verify_token(auth_server.mint())
    assert requests == 1
