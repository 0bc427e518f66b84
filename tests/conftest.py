"""Fixtures shared by every test package: an in-process authorization server on a fresh
SQLite file (a copy of a template migrated once per session), and an httpx client bound to it
over ASGI. Passwords are hashed at test cost here and in every ``mcpauth`` process the tests
start (the production cost is checked in tests/server/test_passwords.py)."""

from __future__ import annotations

import functools
import logging
import os
import shutil
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from starlette.applications import Starlette

from mcpauth.server import Settings, create_app

# PostgreSQL fixtures for the whole test session (see tests/pg.py)
from .pg import (  # noqa: F401
    database_url_for,
    empty_postgres_url,
    engine_under_test,
    engines_under_test,
    postgres_pool,
    postgres_server,
    postgres_url,
)

ISSUER = "http://127.0.0.1:9000"
TEST_SECRET = "test-secret-key-0123456789abcdef"
# argon2id at the least cost it accepts: a verification takes microseconds, not 0.2 s
PASSWORD_COST = {"password_hash_time_cost": 1, "password_hash_memory_cost": 32}


# Lanes (markers registered in pyproject.toml): `make check` runs the unit lane, `make test` all.
E2E_FOLDERS = ("tests/e2e/", "tests/middleware/e2e/", "tests/browser/")
BROWSER_FOLDERS = ("tests/browser/",)
SLOW_FILES = (  # load, crash and soak tests: real processes under many concurrent requests
    "tests/e2e/test_concurrency.py",
    "tests/e2e/test_crash.py",
    "tests/e2e/test_cimd_stall.py",
    "tests/e2e/test_shutdown.py",
)
LANES = ("e2e", "browser", "postgres", "slow", "docker")
_HEAVY_LAST = ("postgres", "slow", "e2e", "browser", "docker")  # first handed out last


@pytest.hookimpl(tryfirst=True)  # before `-m` selects
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Put each test in its lanes by folder. (`make test` runs pytest-xdist with ``--dist
    loadfile``: each module stays on one worker, so its module fixtures start once.)"""
    root = config.rootpath
    for item in items:
        path = item.path.relative_to(root).as_posix()
        if path.startswith(E2E_FOLDERS) or item.get_closest_marker("conformance"):
            item.add_marker(pytest.mark.e2e)
        if path.startswith(BROWSER_FOLDERS):
            item.add_marker(pytest.mark.browser)
        if path in SLOW_FILES:
            item.add_marker(pytest.mark.slow)
        if not any(item.get_closest_marker(lane) for lane in LANES):
            item.add_marker(pytest.mark.unit)
    # The modules that start containers, browsers and processes first: xdist hands modules to
    # the workers in this order, so the longest ones no longer start last and set the tail
    # while the other workers idle. The slow lane's load and stall tests, whose time bounds
    # are tight, come after them, away from the image builds. Stable: each module's tests keep
    # their order.
    weight: dict[Path, int] = {}
    for item in items:
        rank = max(
            (r for r, lane in enumerate(_HEAVY_LAST, 1) if item.get_closest_marker(lane)), default=0
        )
        weight[item.path] = max(weight.get(item.path, 0), rank)
    items.sort(key=lambda item: -weight[item.path])


def pytest_configure(config: pytest.Config) -> None:
    # every `mcpauth` process a test starts inherits these (tests of the environment pass their
    # own mapping); a test that wants the production cost passes it explicitly
    for name, value in PASSWORD_COST.items():
        os.environ.setdefault(f"MCPAUTH_{name.upper()}", str(value))


# The tests that run once per engine when MCPAUTH_TEST_DATABASE names both (tests/pg.py), in
# the server suite: the storage modules and the concurrency tests (marked every_engine), and the
# tests of tests/postgres_lane.txt, which between them send every SQL statement the server suite
# sends (chosen by scripts/postgres_lane.py). `make test-postgres` runs all of them on it.
PER_ENGINE_FOLDERS = ("tests/server/",)
POSTGRES_LANE = Path(__file__).with_name("postgres_lane.txt")


@functools.cache
def postgres_lane() -> frozenset[str]:
    """The test functions of tests/postgres_lane.txt (ids without parameters)."""
    lines = POSTGRES_LANE.read_text().splitlines()
    return frozenset(line for line in lines if line and not line.startswith("#"))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A server test whose fixtures reach ``make_settings`` (so the database) and that is in the
    PostgreSQL lane runs on every engine under test; the PostgreSQL run is in the ``postgres``
    lane."""
    engines = engines_under_test()
    definition = metafunc.definition
    path = definition.path.relative_to(metafunc.config.rootpath).as_posix()
    if (
        len(engines) < 2
        or "make_settings" not in metafunc.fixturenames
        or not path.startswith(PER_ENGINE_FOLDERS)
    ):
        return
    if (
        not definition.get_closest_marker("every_engine")
        and definition.nodeid not in postgres_lane()
    ):
        return  # on the first engine only
    metafunc.parametrize(
        "database_engine",
        [
            pytest.param(e, id=e, marks=[pytest.mark.postgres] if e == "postgresql" else [])
            for e in engines
        ],
        indirect=True,
    )


@pytest.fixture
def database_engine(request: pytest.FixtureRequest) -> str:
    """``sqlite`` or ``postgresql``: the engine of this test's database."""
    return str(getattr(request, "param", engine_under_test()))


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite database migrated to head once per session (per xdist worker): each test's
    database starts as a copy of it, so ``create_app`` finds the schema current instead of
    running every migration again (tests/server/test_migrations.py runs them for real)."""
    from mcpauth.server.storage import migrate
    from mcpauth.server.storage.database import make_engine

    path = tmp_path_factory.mktemp("sqlite-template") / "mcpauth.db"
    engine = make_engine(f"sqlite:///{path}")
    try:
        migrate.upgrade(engine)
    finally:
        engine.dispose()  # the last connection checkpoints the WAL into the file
    return path


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def make_settings(
    tmp_path: Path, request: pytest.FixtureRequest, database_engine: str
) -> Callable[..., Settings]:
    database_url = database_url_for(request, tmp_path)  # MCPAUTH_TEST_DATABASE=postgresql
    if database_url.startswith("sqlite:///"):
        shutil.copyfile(request.getfixturevalue("sqlite_template"), tmp_path / "mcpauth.db")

    def make(**overrides: Any) -> Settings:
        values: dict[str, Any] = {
            "issuer": ISSUER,
            "database_url": database_url,
            "secret_key": TEST_SECRET,
            **PASSWORD_COST,
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
async def http(app: Starlette) -> AsyncIterator[httpx2.AsyncClient]:
    transport = httpx2.ASGITransport(app=app, client=("203.0.113.7", 50000))
    async with httpx2.AsyncClient(transport=transport, base_url=ISSUER) as client:
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
