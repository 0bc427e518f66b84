"""A throwaway PostgreSQL server for the test session.

The session fixture ``postgres_server`` runs ``initdb`` into a fresh temporary directory and starts
``postgres`` on a free 127.0.0.1 port (as the ``postgres`` OS user when the tests run as root:
PostgreSQL refuses to run as root), with durability switched off (the tests kill mcpauth
processes, never this server). A template database is migrated to head once; every test that
asks for a database gets its own copy (``CREATE DATABASE ... TEMPLATE``, a few milliseconds)
that is dropped afterwards. The server is stopped and its directory removed at the end of the
session, and it dies with the test process if that is killed (parent-death signal). Under
pytest-xdist each worker has its own session, so its own server on its own free port (database
names carry the worker's process id as well).

``MCPAUTH_TEST_DATABASE=postgresql`` makes ``make_settings`` (and so every server test that
reaches it) use a fresh PostgreSQL database instead of a SQLite file;
``MCPAUTH_TEST_DATABASE=sqlite,postgresql`` runs each such test under ``tests/server`` once on
each, in one session (``make test``): the tests that never reach a database run once. The
server binaries come from ``scripts/ensure-postgres.sh`` (or ``MCPAUTH_PG_BIN``).
"""

from __future__ import annotations

import ctypes
import glob
import itertools
import os
import pwd
import queue
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from .support import free_port

ENGINE_ENV = "MCPAUTH_TEST_DATABASE"
TEMPLATE = "mcpauth_template"
START_TIMEOUT = 30.0
_PR_SET_PDEATHSIG = 1
_names = itertools.count(1)


def engines_under_test() -> list[str]:
    """The engines ``make_settings`` hands out, from ``MCPAUTH_TEST_DATABASE``: ``sqlite``
    (default), ``postgresql``, or both (``sqlite,postgresql``: every test whose fixtures reach
    ``make_settings`` runs once per engine in the same session, as ``make test`` does)."""
    engines: list[str] = []
    for word in os.environ.get(ENGINE_ENV, "sqlite").split(","):
        value = word.strip().lower()
        if value in ("postgres", "postgresql", "pg"):
            engine = "postgresql"
        elif value in ("", "sqlite"):
            engine = "sqlite"
        else:
            raise pytest.UsageError(
                f"{ENGINE_ENV}={value!r}: expected sqlite, postgresql or sqlite,postgresql"
            )
        if engine not in engines:
            engines.append(engine)
    return engines


def engine_under_test() -> str:
    """The engine of a test that is not run once per engine: the first one named."""
    return engines_under_test()[0]


def find_bindir() -> Path:
    """The bin directory of a PostgreSQL server installation."""
    candidates: list[str] = []
    if os.environ.get("MCPAUTH_PG_BIN"):
        candidates.append(os.environ["MCPAUTH_PG_BIN"])
    candidates += sorted(
        glob.glob("/usr/lib/postgresql/*/bin"),
        key=lambda d: int(Path(d).parent.name) if Path(d).parent.name.isdigit() else 0,
        reverse=True,
    )
    initdb = shutil.which("initdb")
    if initdb:
        candidates.append(str(Path(initdb).resolve().parent))
    for candidate in candidates:
        path = Path(candidate)
        if all((path / tool).is_file() for tool in ("initdb", "postgres")):
            return path
    pytest.fail(
        "no PostgreSQL server binaries found: run scripts/ensure-postgres.sh "
        "(or set MCPAUTH_PG_BIN to the directory holding initdb and postgres)"
    )


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGQUIT)  # immediate shutdown if pytest dies


@dataclass
class PostgresServer:
    """A running throwaway server; ``url(db)`` is what mcpauth is configured with."""

    bindir: Path
    root: Path
    port: int
    process: subprocess.Popen[bytes]
    user: str | None

    host = "127.0.0.1"

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@{self.host}:{self.port}/{database}"

    def connect(self, database: str = "postgres") -> psycopg.Connection[tuple[object, ...]]:
        return psycopg.connect(
            host=self.host, port=self.port, user="postgres", dbname=database, autocommit=True
        )

    def execute(self, sql: str, database: str = "postgres") -> None:
        with self.connect(database) as conn:
            conn.execute(sql.encode())

    def create_database(self, name: str | None = None, *, template: str | None = TEMPLATE) -> str:
        """A new database (a copy of the migrated template unless ``template`` is None)."""
        name = name or f"t{os.getpid()}_{next(_names)}"
        clause = f" TEMPLATE {template}" if template else " TEMPLATE template0"
        self.execute(f'CREATE DATABASE "{name}"{clause}')
        return name

    def drop_database(self, name: str) -> None:
        self.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def log_tail(self, chars: int = 4000) -> str:
        log = self.root / "postgres.log"
        return log.read_text(errors="replace")[-chars:] if log.exists() else ""

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)  # fast shutdown
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        shutil.rmtree(self.root, ignore_errors=True)


def _run_as(user: str | None) -> dict[str, object]:
    if user is None:
        return {}
    entry = pwd.getpwnam(user)
    return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}


def start_server() -> PostgresServer:
    bindir = find_bindir()
    user = "postgres" if os.geteuid() == 0 else None
    # /tmp itself, not pytest's tmp_path: its parents are private to root
    root = Path(tempfile.mkdtemp(prefix="mcpauth-pg-"))
    data, sockets = root / "data", root / "sockets"
    data.mkdir()
    sockets.mkdir()
    if user is not None:
        entry = pwd.getpwnam(user)
        for path in (root, data, sockets):
            os.chown(path, entry.pw_uid, entry.pw_gid)
    env = {**os.environ, "LC_ALL": "C", "LANG": "C"}
    env.pop("PGDATA", None)
    try:
        subprocess.run(
            [
                str(bindir / "initdb"),
                "-D",
                str(data),
                "-U",
                "postgres",
                "--auth=trust",
                "--encoding=UTF8",
                "--no-sync",
                "--no-instructions",
            ],
            check=True,
            capture_output=True,
            timeout=120,
            cwd=root,
            env=env,
            **_run_as(user),  # type: ignore[arg-type]
        )
    except subprocess.CalledProcessError as exc:
        shutil.rmtree(root, ignore_errors=True)
        pytest.fail(f"initdb failed: {exc.stderr.decode(errors='replace')}")
    port = free_port()
    log = open(root / "postgres.log", "wb")  # noqa: SIM115
    if user is not None:
        os.chown(root / "postgres.log", pwd.getpwnam(user).pw_uid, -1)
    process = subprocess.Popen(
        [
            str(bindir / "postgres"),
            "-D",
            str(data),
            "-p",
            str(port),
            "-k",
            str(sockets),
            "-c",
            "listen_addresses=127.0.0.1",
            "-c",
            "max_connections=300",
            "-c",
            "shared_buffers=64MB",
            "-c",
            "fsync=off",
            "-c",
            "synchronous_commit=off",
            "-c",
            "full_page_writes=off",
            "-c",
            "log_min_messages=warning",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        cwd=root,
        env=env,
        preexec_fn=_die_with_parent,
        **_run_as(user),  # type: ignore[arg-type]
    )
    log.close()
    server = PostgresServer(bindir=bindir, root=root, port=port, process=process, user=user)
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        if process.poll() is not None:
            tail = server.log_tail()
            server.stop()
            pytest.fail(f"postgres exited with {process.returncode}:\n{tail}")
        try:
            server.execute("SELECT 1")
            break
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                tail = server.log_tail()
                server.stop()
                pytest.fail(f"postgres did not accept connections in {START_TIMEOUT} s:\n{tail}")
            time.sleep(0.05)
    return server


def _migrate_template(server: PostgresServer) -> None:
    from mcpauth.server.storage import migrate
    from mcpauth.server.storage.database import make_engine

    server.create_database(TEMPLATE, template=None)
    engine = make_engine(server.url(TEMPLATE))
    try:
        migrate.upgrade(engine)
    finally:
        engine.dispose()
    server.execute(f"ALTER DATABASE {TEMPLATE} WITH IS_TEMPLATE true")


class DatabasePool:
    """Copies of the template made ahead of time, and used ones dropped, by a background
    thread: a test waits for neither (each takes about 0.1 s of the server's time)."""

    def __init__(self, server: PostgresServer, ahead: int = 2) -> None:
        self.server = server
        self._ready: queue.Queue[str] = queue.Queue(maxsize=ahead)
        self._used: queue.Queue[str | None] = queue.Queue()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="pg-pool", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while True:
                if not self._ready.full():
                    self._ready.put(self.server.create_database())
                    continue
                try:
                    name = self._used.get(timeout=0.05)
                except queue.Empty:
                    continue
                if name is None:
                    return
                self.server.drop_database(name)
        except BaseException as exc:  # surfaced by take()
            self._error = exc

    def take(self) -> str:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self._error is not None:
                raise RuntimeError("creating a test database failed") from self._error
            try:
                return self._ready.get(timeout=0.1)
            except queue.Empty:
                continue
        raise TimeoutError("no test database within 60 s")

    def give_back(self, name: str) -> None:
        self._used.put(name)

    def close(self) -> None:
        self._used.put(None)
        self._thread.join(timeout=30)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """The session's PostgreSQL server, with ``mcpauth_template`` migrated to head."""
    server = start_server()
    try:
        _migrate_template(server)
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def postgres_pool(postgres_server: PostgresServer) -> Iterator[DatabasePool]:
    pool = DatabasePool(postgres_server)
    yield pool
    pool.close()


@pytest.fixture
def postgres_url(postgres_pool: DatabasePool) -> Iterator[str]:
    """A fresh database at the newest schema revision, dropped after the test."""
    name = postgres_pool.take()
    yield postgres_pool.server.url(name)
    postgres_pool.give_back(name)


@pytest.fixture
def empty_postgres_url(postgres_server: PostgresServer) -> Iterator[str]:
    """A fresh database without any table, dropped after the test."""
    name = postgres_server.create_database(template=None)
    yield postgres_server.url(name)
    postgres_server.drop_database(name)


def database_url_for(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The database ``make_settings`` uses: a SQLite file, or on PostgreSQL (the test's
    ``database_engine``) a fresh database, the same one for every call within a test."""
    if request.getfixturevalue("database_engine") == "postgresql":
        return str(request.getfixturevalue("postgres_url"))
    return f"sqlite:///{tmp_path / 'mcpauth.db'}"
