"""Fixtures shared by every test package: an in-process authorization server on a fresh
SQLite file, and an httpx client bound to it over ASGI."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette

from mcpauth.server import Settings, create_app

# PostgreSQL fixtures for the whole test session (see tests/pg.py)
from .pg import database_url_for, empty_postgres_url, postgres_pool, postgres_server, postgres_url  # noqa: F401

ISSUER = "http://127.0.0.1:9000"
TEST_SECRET = "test-secret-key-0123456789abcdef"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def make_settings(tmp_path: Path, request: pytest.FixtureRequest) -> Callable[..., Settings]:
    database_url = database_url_for(request, tmp_path)  # MCPAUTH_TEST_DATABASE=postgresql

    def make(**overrides: Any) -> Settings:
        values: dict[str, Any] = {
            "issuer": ISSUER,
            "database_url": database_url,
            "secret_key": TEST_SECRET,
        }
        values.update(overrides)
        return Settings(**values)

    return make


@pytest.fixture
def settings(make_settings: Callable[..., Settings]) -> Settings:
    return make_settings()


@pytest.fixture
def app(settings: Settings) -> Starlette:
    return create_app(settings)


@pytest.fixture
async def http(app: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app, client=("203.0.113.7", 50000))
    async with httpx.AsyncClient(transport=transport, base_url=ISSUER) as client:
        yield client


@pytest.fixture(autouse=True)
def _dispose_engines(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Close every engine a test's apps opened: on PostgreSQL, idle pooled connections of
    hundreds of finished tests would otherwise pile up until the server refuses more."""
    from mcpauth.server.storage import database

    created: list[Any] = []
    real = database.make_engine

    def tracking(*args: Any, **kwargs: Any) -> Any:
        engine = real(*args, **kwargs)
        created.append(engine)
        return engine

    for target in (database, "mcpauth.server.app", "mcpauth.server.admin"):
        if isinstance(target, str):
            monkeypatch.setattr(f"{target}.make_engine", tracking)
        else:
            monkeypatch.setattr(target, "make_engine", tracking)
    yield
    for engine in created:
        engine.dispose()


@pytest.fixture(autouse=True)
def _restore_mcpauth_logging() -> Iterator[None]:
    """An app's lifespan configures the ``mcpauth`` loggers (its log settings): put them back
    after each test, so one test's app never hides another's log records from ``caplog``."""
    logger = logging.getLogger("mcpauth")
    saved = (list(logger.handlers), logger.level, logger.propagate)
    yield
    logger.handlers[:], logger.level, logger.propagate = saved[0], saved[1], saved[2]
