"""Engine and units of work.

``Database.write()`` opens a transaction that on SQLite starts with ``BEGIN IMMEDIATE`` (the
write lock is taken up front, so two writers queue on the busy timeout instead of failing on a
lock upgrade); on PostgreSQL a plain transaction whose conditional UPDATEs decide races.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from collections import namedtuple
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, Executable, Row, Select, create_engine, event
from sqlalchemy.engine import Dialect, make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import SQLAlchemyError as DatabaseError
from sqlalchemy.sql.expression import ClauseElement
from sqlmodel import Session

# The types the domain packages name when they hold a unit of work or a row; only this package
# imports SQLAlchemy and SQLModel (tests/test_layout.py).
__all__ = [
    "Connection",
    "Database",
    "DatabaseError",
    "Engine",
    "Prepared",
    "Record",
    "Row",
    "Session",
    "make_engine",
    "sqlite_file",
]

log = logging.getLogger("mcpauth.server")

SQLITE_BUSY_TIMEOUT_MS = 30_000
# SQLite copies its write-ahead log back into the database file (a checkpoint: the pages
# copied, then two fsyncs) in the commit that takes the log past a size, and that writer and
# every writer queued behind it wait for the disk (tens of ms). Instead a thread of mcpauth's
# own checkpoints every CHECKPOINT_EVERY write transactions: the copying while the writers go
# on, then the remainder (a few pages, two small fsyncs) with this process's writers held back,
# so that the next one starts the log afresh. A commit still checkpoints a log that reaches
# WAL_CHECKPOINT_PAGES (16 MiB; SQLite's default is 4 MiB): another process writing, or this
# thread behind.
CHECKPOINT_EVERY = 200
WAL_CHECKPOINT_PAGES = 4000
PRIVATE_FILE_MODE = 0o600  # the database holds digests, keys and users: owner only
PRIVATE_DIR_MODE = 0o700


def _create_private_file(path: Path) -> None:
    """Create an SQLite database file (and its missing folders) readable by the owner only.

    SQLite gives the ``-wal`` and ``-shm`` files it creates the mode of the database file, so
    they are owner-only too. An existing file keeps the mode its administrator chose.
    """
    path.parent.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE)
    except FileExistsError:
        return
    os.close(fd)  # an empty file is a valid, empty SQLite database


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    dbapi_connection.isolation_level = None  # we issue BEGIN ourselves
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")  # WAL: a commit survives a crash of mcpauth
    cursor.execute(f"PRAGMA wal_autocheckpoint={WAL_CHECKPOINT_PAGES}")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cursor.close()


def _sqlite_begin(conn: Any) -> None:
    driver = conn.connection.driver_connection
    if driver.in_transaction:  # begun by Database.transaction itself: SQLAlchemy joins it
        return
    immediate = conn.get_execution_options().get("mcpauth_write", False)
    # straight on the driver's connection: the statement needs none of SQLAlchemy's work
    driver.execute("BEGIN IMMEDIATE" if immediate else "BEGIN")


def _driver_sql(driver: Any, statement: str) -> None:
    """``statement`` on a driver connection, its errors raised as SQLAlchemy's (as
    :class:`DatabaseError`, like every other statement's)."""
    try:
        driver.execute(statement)
    except sqlite3.Error as exc:
        raise DBAPIError.instance(statement, None, exc, sqlite3.Error) from exc


def sqlite_file(url: str) -> Path | None:
    """The file of an SQLite database URL; None for another engine or an in-memory database."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or not parsed.database:
        return None
    if parsed.database == ":memory:":
        return None
    return Path(parsed.database).expanduser()


def make_engine(url: str, *, pool_size: int = 10) -> Engine:
    """An engine for ``url``; SQLite files get WAL, a busy timeout and their folder created."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:" and "uri" not in parsed.query:
            _create_private_file(Path(parsed.database).expanduser())
        engine = create_engine(
            url,
            connect_args={"check_same_thread": False, "timeout": SQLITE_BUSY_TIMEOUT_MS / 1000},
        )
        event.listen(engine, "connect", _sqlite_pragmas)
        event.listen(engine, "begin", _sqlite_begin)
        return engine
    if parsed.get_backend_name() == "postgresql" and parsed.drivername == "postgresql":
        url = str(parsed.set(drivername="postgresql+psycopg").render_as_string(hide_password=False))
    return create_engine(url, pool_size=pool_size, max_overflow=pool_size, pool_pre_ping=True)


# A row read by a Prepared select: a named tuple of the selected columns (``row.digest``).
Record = Any


def changed_rows(session: Session, statement: Executable) -> int:
    """How many rows an UPDATE or DELETE run in ``session``'s transaction changed (a
    conditional one's count says which of two racing requests won)."""
    return session.connection().execute(statement).rowcount


class Prepared:
    """A Core statement compiled once per dialect and run on the connection's DB-API cursor.

    For the statements of the token endpoint's hot path: SQLAlchemy's per-execution work
    (building the statement, its cache key, the result object) cost about ten times what
    SQLite spends on it. The statement still comes from the tables, so it is written once for
    every dialect; its parameters are ``bindparam`` names, passed by keyword. No type
    processing happens: only for statements over plain strings and integers (a boolean column
    reads back as 0 or 1 on SQLite).
    """

    def __init__(self, statement: ClauseElement) -> None:
        self.statement = statement
        self._compiled: dict[str, tuple[str, tuple[str, ...] | None]] = {}
        self._record: Any = None
        if isinstance(statement, Select):
            self._record = namedtuple(  # type: ignore[misc]
                "Record", [str(column.key) for column in statement.selected_columns]
            )

    def _compile(self, dialect: Dialect) -> tuple[str, tuple[str, ...] | None]:
        compiled = self._compiled.get(dialect.name)
        if compiled is None:
            done = self.statement.compile(dialect=dialect)
            positions = getattr(done, "positiontup", None) or ()
            order = tuple(positions) if dialect.positional else None
            compiled = self._compiled[dialect.name] = (done.string, order)
        return compiled

    def execute(self, conn: Connection, params: dict[str, Any]) -> Any:
        """Run the statement in ``conn``'s transaction; the DB-API cursor."""
        sql, order = self._compile(conn.dialect)
        cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
        cursor.execute(sql, params if order is None else tuple(params[k] for k in order))
        return cursor

    def first(self, conn: Connection, **params: Any) -> Record | None:
        """The first row of a select, or None."""
        cursor = self.execute(conn, params)
        try:
            row = cursor.fetchone()
        finally:
            cursor.close()
        return None if row is None else self._record._make(row)

    def rowcount(self, conn: Connection, **params: Any) -> int:
        """How many rows an INSERT, UPDATE or DELETE changed."""
        cursor = self.execute(conn, params)
        count: int = cursor.rowcount
        cursor.close()
        return count


class _Checkpointer:
    """Checkpoints an SQLite database's log in a daemon thread when asked: started by the first
    request, ended after a minute without one (or when the database is disposed of)."""

    IDLE_SECONDS = 60.0

    def __init__(self, engine: Engine, write_lock: threading.RLock) -> None:
        self._engine = engine
        self._write_lock = write_lock
        self._due = threading.Event()
        self._lock = threading.Lock()
        self._running = False
        self._closed = False
        self.checkpoints = 0  # completed

    def request(self) -> None:
        self._due.set()
        with self._lock:
            if not self._running and not self._closed:
                self._running = True
                threading.Thread(target=self._run, name="mcpauth-checkpoint", daemon=True).start()

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self._due.set()

    def _run(self) -> None:
        while True:
            self._due.wait(self.IDLE_SECONDS)
            with self._lock:
                if self._closed or not self._due.is_set():
                    self._running = False
                    return
                self._due.clear()
            try:
                self.checkpoint()
            except (DatabaseError, sqlite3.Error) as exc:  # the commit's own checkpoint remains
                log.warning("background WAL checkpoint failed: %s", exc)

    def checkpoint(self) -> None:
        """Copy what the log holds back into the database file, as far as readers allow: most
        of it while writers go on (a PASSIVE checkpoint takes no lock they wait for), the rest
        with this process's writers held back, so that the next one starts the log afresh."""
        conn = self._engine.raw_connection()  # outside any transaction, as a checkpoint must be
        try:
            driver: Any = conn.driver_connection
            driver.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            with self._write_lock:
                driver.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        finally:
            conn.close()
        self.checkpoints += 1


class Database:
    """Units of work over one engine."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        # SQLite has one writer at a time; writers of this process queue on a lock (woken as
        # soon as it is free) instead of sleeping in SQLite's busy handler with growing
        # back-off, which made p99 latency seconds under load. Other processes still meet
        # on BEGIN IMMEDIATE and the busy timeout. The lock's holder writes on one connection
        # kept open for writing (no pool checkout and return per transaction).
        self._write_lock = threading.RLock() if engine.dialect.name == "sqlite" else None
        self._writer: Connection | None = None
        self._writing = False
        on_file = sqlite_file(str(engine.url)) is not None
        self.checkpointer = (
            _Checkpointer(engine, self._write_lock)
            if self._write_lock is not None and on_file
            else None
        )
        self._writes = 0

    @contextmanager
    def read(self) -> Iterator[Session]:
        with Session(self.engine, expire_on_commit=False) as session:
            yield session

    @contextmanager
    def _write_connection(self) -> Iterator[Connection]:
        """A connection for one write transaction: on SQLite the writers' own, the write lock
        held; a pooled one on PostgreSQL (or for a write nested in another on this thread)."""
        if self._write_lock is None:
            with self.engine.connect() as conn:
                yield conn.execution_options(mcpauth_write=True)
            return
        with self._write_lock:
            if self._writing:
                with self.engine.connect() as conn:
                    yield conn.execution_options(mcpauth_write=True)
                return
            if self._writer is None:
                self._writer = self.engine.connect().execution_options(mcpauth_write=True)
            self._writing = True
            try:
                yield self._writer
            finally:
                self._writing = False
                self._writes += 1
                if self.checkpointer is not None and self._writes % CHECKPOINT_EVERY == 0:
                    self.checkpointer.request()

    @contextmanager
    def write(self) -> Iterator[Session]:
        """A transaction committed at the end of the block, rolled back on an exception."""
        with (
            self._write_connection() as conn,
            conn.begin(),
            Session(bind=conn, expire_on_commit=False) as session,
        ):
            yield session
            session.flush()

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        """Like :meth:`write` for SQL Core statements: no ORM unit of work on hot paths.

        On SQLite the transaction is begun and committed on the driver's connection: the
        token endpoint's :class:`Prepared` statements need none of SQLAlchemy's bookkeeping
        around them (about as much work as the transaction's statements). A statement run
        through SQLAlchemy inside joins the transaction (``_sqlite_begin``), which SQLAlchemy
        then commits or rolls back itself.
        """
        with self._write_connection() as conn:
            if self._write_lock is None:
                with conn.begin():
                    yield conn
                return
            driver: Any = conn.connection.driver_connection
            _driver_sql(driver, "BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                if conn.in_transaction():
                    conn.rollback()
                elif driver.in_transaction:
                    _driver_sql(driver, "ROLLBACK")
                raise
            if conn.in_transaction():
                conn.commit()
            else:
                _driver_sql(driver, "COMMIT")

    def dispose(self) -> None:
        if self.checkpointer is not None:
            self.checkpointer.close()
        with self._write_lock or nullcontext():
            if self._writer is not None:
                self._writer.close()
                self._writer = None
        self.engine.dispose()
