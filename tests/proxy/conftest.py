"""Fixtures for the proxy tests: the middleware tests' fake authorization server and app."""

from tests.middleware.conftest import (  # noqa: F401
    anyio_backend,
    as_http,
    auth_server,
    protect,
    recording_app,
)
