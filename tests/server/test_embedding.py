"""``create_app`` honours every setting wherever the app is served (not only under
``mcpauth serve``), and :class:`mcpauth.server.Admin` manages the server from Python."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import httpx2
import pytest

from mcpauth.server import Admin, AdminError, Settings, create_app
from mcpauth.server.operations.logs import JSONFormatter

from ..conftest import ISSUER

RESOURCE = "http://127.0.0.1:8000/mcp"
pytestmark = pytest.mark.anyio


async def _failed_auth_address(
    app: Any, forwarded_for: str, caplog: pytest.LogCaptureFixture
) -> str:
    """The address the server saw for a request from 10.0.0.5 carrying X-Forwarded-For."""
    caplog.clear()
    transport = httpx2.ASGITransport(app=app, client=("10.0.0.5", 40000))
    async with httpx2.AsyncClient(transport=transport, base_url=ISSUER) as http:
        response = await http.post(
            "/token",
            data={"grant_type": "client_credentials", "client_id": "nobody", "client_secret": "x"},
            headers={"X-Forwarded-For": forwarded_for},
        )
    assert response.status_code == 401
    events = [getattr(r, "audit", {}) for r in caplog.records]
    failed = [e for e in events if e.get("event") == "client.authentication_failed"]
    assert len(failed) == 1
    return str(failed[0]["address"])


async def test_trusted_proxies_are_honoured_by_create_app_itself(
    make_settings: Callable[..., Settings], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="mcpauth.audit")
    trusting = create_app(make_settings(trusted_proxies=("10.0.0.5",)))
    assert await _failed_auth_address(trusting, "198.51.100.23", caplog) == "198.51.100.23"
    # a proxy not listed is not believed, and without the setting nobody is
    other = create_app(make_settings(trusted_proxies=("10.0.0.6",)))
    assert await _failed_auth_address(other, "198.51.100.23", caplog) == "10.0.0.5"
    plain = create_app(make_settings())
    assert await _failed_auth_address(plain, "198.51.100.23", caplog) == "10.0.0.5"


async def test_the_log_settings_apply_when_the_app_starts(
    make_settings: Callable[..., Settings],
) -> None:
    app = create_app(make_settings(log_level="warning", log_format="json"))
    logger = logging.getLogger("mcpauth")
    async with app.router.lifespan_context(app):
        assert logger.level == logging.WARNING
        assert [type(h.formatter) for h in logger.handlers] == [JSONFormatter]
        record = logging.LogRecord("mcpauth.server", logging.WARNING, __file__, 1, "hi", None, None)
        assert json.loads(logger.handlers[0].format(record))["message"] == "hi"


async def test_an_embedder_can_keep_its_own_logging(make_settings: Callable[..., Settings]) -> None:
    logger = logging.getLogger("mcpauth")
    before = (list(logger.handlers), logger.level)
    app = create_app(make_settings(log_level="error", log_format="json"), configure_logs=False)
    async with app.router.lifespan_context(app):
        assert (list(logger.handlers), logger.level) == before


async def test_admin_of_a_running_app_is_seen_at_once(
    make_settings: Callable[..., Settings],
) -> None:
    app = create_app(make_settings())
    admin = Admin.of(app)
    admin.add_resource(
        RESOURCE, scopes=["mcp:tools"], default_scopes=["mcp:tools"], is_default=True
    )
    bot = admin.add_client(name="bot", grant_types=["client_credentials"], scopes=["mcp:tools"])
    transport = httpx2.ASGITransport(app=app)
    async with httpx2.AsyncClient(transport=transport, base_url=ISSUER) as http:
        token = await http.post(
            "/token",
            data={"grant_type": "client_credentials"},
            auth=(bot["client_id"], bot["client_secret"]),
        )
        assert token.status_code == 200, token.text
        admin.remove_client(bot["client_id"])
        gone = await http.post(
            "/token",
            data={"grant_type": "client_credentials"},
            auth=(bot["client_id"], bot["client_secret"]),
        )
        assert gone.status_code == 401
    assert [r["uri"] for r in admin.list_resources()] == [RESOURCE]


def test_admin_open_manages_the_database_of_the_settings(
    make_settings: Callable[..., Settings],
) -> None:
    settings = make_settings()
    with Admin.open(settings) as admin:
        admin.add_user("alice", "correct horse battery")
        with pytest.raises(AdminError, match="already exists"):
            admin.add_user("alice", "another password")
        assert [u["username"] for u in admin.list_users()] == ["alice"]
        key = admin.rotate_keys()
        assert key["kid"] in {k["kid"] for k in admin.list_keys()}
    with Admin.open(settings) as again:  # the same database, opened anew
        assert [u["username"] for u in again.list_users()] == ["alice"]
        again.remove_user("alice")
        with pytest.raises(AdminError, match="no user"):
            again.remove_user("alice")
