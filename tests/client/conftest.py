"""Fixtures for the client helper's tests: the anyio backend, a fake AS/RS and a flow driver."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx2
import pytest

from mcpauth.client.credentials import ClientCredentials
from mcpauth.client.flow import (
    Authorize,
    FlowConfig,
    HTTPRequest,
    HTTPResponse,
    Lock,
    OAuthFlow,
    RedirectURI,
    Resend,
    StorageCall,
)
from mcpauth.client.options import AuthorizationCodeGrant, Grant, Policy
from mcpauth.client.registration import Registration
from mcpauth.client.storage import MemoryStorage, TokenStorage
from tests.client.fakes import FakeServers

REDIRECT_URI = "http://127.0.0.1:9999/callback"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def fake() -> FakeServers:
    return FakeServers()


def follow(client: httpx2.Client) -> Callable[[str], str]:
    """A stand-in user: GET the authorization URL and hand back the redirect location."""

    def go(url: str) -> str:
        response = client.get(url, follow_redirects=False)
        assert response.status_code == 302, response.text
        return response.headers["location"]

    return go


def make_flow(
    fake: FakeServers,
    storage: TokenStorage | None = None,
    *,
    grant: Grant | None = None,
    credentials: ClientCredentials | None = None,
    registration: Registration | None = None,
    **policy: Any,
) -> OAuthFlow:
    """A flow for the fake's resource on the fake's clock; ``policy`` holds :class:`Policy`
    fields."""
    config = FlowConfig(
        fake.resource,
        grant=grant or AuthorizationCodeGrant(),
        credentials=credentials,
        registration=registration or Registration(),
        policy=Policy(clock=fake.clock, **policy),
    )
    return OAuthFlow(config, storage if storage is not None else MemoryStorage())


class Driver:
    """Steps a sans-I/O flow by hand: HTTP through ``transport``, the caller's request through
    ``resend``, storage calls in place and the user agent through ``authorize``. Every step is
    kept in ``steps``."""

    def __init__(
        self,
        routes: dict[str, HTTPResponse | Callable[[HTTPRequest], HTTPResponse]] | None = None,
        *,
        resend: Callable[[str | None], HTTPResponse] | None = None,
        authorize: Callable[[str], str] | None = None,
        http: Callable[[HTTPRequest], HTTPResponse] | None = None,
    ) -> None:
        self.routes = dict(routes or {})
        self._http = http
        self.resend = resend or (lambda _auth: HTTPResponse(200))
        self.authorize = authorize
        self.steps: list[Any] = []

    def http(self, request: HTTPRequest) -> HTTPResponse:
        if self._http is not None:
            return self._http(request)
        route = self.routes.get(f"{request.method} {request.url.split('?')[0]}")
        if route is None:
            return HTTPResponse(404, {}, b'{"error":"not_found"}')
        return route(request) if callable(route) else route

    def requests(self, method: str | None = None) -> list[HTTPRequest]:
        found = [s for s in self.steps if isinstance(s, HTTPRequest)]
        return [r for r in found if method is None or r.method == method]

    def run(self, flow: Iterator[Any]) -> Any:
        result: Any = None
        try:
            step = next(flow)  # type: ignore[call-overload]
            while True:
                self.steps.append(step)
                if isinstance(step, HTTPRequest):
                    result = self.http(step)
                elif isinstance(step, Resend):
                    result = self.resend(step.authorization)
                elif isinstance(step, Lock):
                    result = None
                elif isinstance(step, StorageCall):
                    result = step.run()
                elif isinstance(step, RedirectURI):
                    result = REDIRECT_URI
                elif isinstance(step, Authorize):
                    assert self.authorize is not None, "the flow asked for a user"
                    result = self.authorize(step.url)
                step = flow.send(result)  # type: ignore[attr-defined]
        except StopIteration as stop:
            return stop.value


def to_response(response: httpx2.Response) -> HTTPResponse:
    headers = {k.lower(): v for k, v in response.headers.items()}
    challenges = tuple(response.headers.get_list("www-authenticate"))
    return HTTPResponse(response.status_code, headers, response.content, challenges)


def fake_driver(fake: FakeServers, client: httpx2.Client) -> Driver:
    """A driver whose HTTP, caller's request (POST /mcp) and user all go to the fake."""

    def http(request: HTTPRequest) -> HTTPResponse:
        sent = client.request(
            request.method, request.url, headers=dict(request.headers), content=request.body
        )
        return to_response(sent)

    def resend(authorization: str | None) -> HTTPResponse:
        headers = {"authorization": authorization} if authorization else {}
        return http(HTTPRequest("POST", fake.resource, headers, b"{}"))

    return Driver(http=http, resend=resend, authorize=follow(client))


@pytest.fixture
def driver(fake: FakeServers, sync_client: httpx2.Client) -> Driver:
    return fake_driver(fake, sync_client)


@pytest.fixture
def sync_client(fake: FakeServers) -> Iterator[httpx2.Client]:
    """An httpx client wired to the fake through WSGI-less mock transport over its ASGI app."""
    with httpx2.Client(transport=_SyncASGI(fake), base_url=fake.base) as client:
        yield client


class _SyncASGI(httpx2.BaseTransport):
    """Run the fake's ASGI app synchronously (each request in a fresh event loop)."""

    def __init__(self, fake: FakeServers) -> None:
        self.app = fake.app()

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        import anyio

        async def call() -> httpx2.Response:
            transport = httpx2.ASGITransport(app=self.app)
            response = await transport.handle_async_request(request)
            body = await response.aread()
            return httpx2.Response(response.status_code, headers=response.headers, content=body)

        request.read()
        return anyio.run(call)
