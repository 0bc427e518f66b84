"""Fixtures for the middleware tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx2
import pytest

from mcpauth.middleware import ProtectedResourceMiddleware

from .helpers import ISSUER, RESOURCE, FakeAuthorizationServer, RecordingApp


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def auth_server() -> FakeAuthorizationServer:
    return FakeAuthorizationServer()


@pytest.fixture
def recording_app() -> RecordingApp:
    return RecordingApp()


MiddlewareFactory = Callable[..., ProtectedResourceMiddleware]


@pytest.fixture
async def as_http(auth_server: FakeAuthorizationServer) -> AsyncIterator[httpx2.AsyncClient]:
    async with auth_server.http_client() as client:
        yield client


@pytest.fixture
def protect(recording_app: RecordingApp, as_http: httpx2.AsyncClient) -> MiddlewareFactory:
    """Build the middleware around the recording app, talking to the fake AS in-process."""

    def build(**options: Any) -> ProtectedResourceMiddleware:
        options.setdefault("resource", RESOURCE)
        options.setdefault("authorization_servers", [ISSUER])
        options.setdefault("http_client", as_http)
        app = options.pop("app", recording_app)
        return ProtectedResourceMiddleware(app, **options)

    return build
