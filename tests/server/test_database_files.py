"""SQLite database files that mcpauth creates, and the -wal and -shm files SQLite adds next to
them, are readable and writable by their owner only: they hold password hashes, token digests
and private signing keys."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from mcpauth.server.storage.database import (
    CHECKPOINT_EVERY,
    WAL_CHECKPOINT_PAGES,
    Database,
    make_engine,
)


@pytest.fixture
def permissive_umask() -> Iterator[None]:
    old = os.umask(0o022)  # the usual default, which would give 0644 files
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.usefixtures("permissive_umask")
def test_a_new_sqlite_database_and_its_wal_and_shm_files_are_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "new" / "mcpauth.db"
    engine = make_engine(f"sqlite:///{path}")
    try:
        with engine.begin() as conn:
            conn.execute(text("CREATE TABLE t (x INTEGER)"))
            conn.execute(text("INSERT INTO t VALUES (1)"))
        with engine.connect() as conn:  # WAL files exist while a connection is open
            conn.execute(text("SELECT x FROM t")).all()
            for suffix in ("", "-wal", "-shm"):
                assert _mode(path.with_name(path.name + suffix)) == 0o600, suffix
    finally:
        engine.dispose()
    assert _mode(path.parent) == 0o700


@pytest.mark.usefixtures("permissive_umask")
def test_an_existing_database_file_keeps_the_mode_its_administrator_chose(
    tmp_path: Path,
) -> None:
    path = tmp_path / "shared.db"
    path.touch(mode=0o640)
    path.chmod(0o640)
    engine = make_engine(f"sqlite:///{path}")
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1")).all()
    finally:
        engine.dispose()
    assert _mode(path) == 0o640


def test_sqlite_keeps_a_write_ahead_log_synced_at_checkpoints(tmp_path: Path) -> None:
    # WAL with synchronous=NORMAL: a commit survives a crash of the process (docs/security.md)
    engine = make_engine(f"sqlite:///{tmp_path / 'mcpauth.db'}")
    try:
        with engine.connect() as conn:
            pragmas = {
                name: conn.exec_driver_sql(f"PRAGMA {name}").scalar()
                for name in ("journal_mode", "synchronous", "wal_autocheckpoint")
            }
    finally:
        engine.dispose()
    assert pragmas == {"journal_mode": "wal", "synchronous": 1, "wal_autocheckpoint": 4000}


def test_the_log_is_checkpointed_in_the_background_and_stays_bounded(tmp_path: Path) -> None:
    path = tmp_path / "mcpauth.db"
    db = Database(make_engine(f"sqlite:///{path}"))
    checkpointer = db.checkpointer
    assert checkpointer is not None
    try:
        with db.transaction() as conn:
            conn.exec_driver_sql("CREATE TABLE t (x BLOB)")
        rows = 0
        # three times WAL_CHECKPOINT_PAGES of log (ten pages a row), and a background
        # checkpoint every CHECKPOINT_EVERY rows
        while rows < WAL_CHECKPOINT_PAGES * 3 // 10 or checkpointer.checkpoints < 3:
            rows += 1
            assert rows < 20 * CHECKPOINT_EVERY, "no checkpoint in the background"
            with db.transaction() as conn:
                conn.exec_driver_sql("INSERT INTO t VALUES (randomblob(40000))")
        # commits past the limit found the log copied and started it afresh (one that met the
        # background checkpoint at work left it to the next)
        log_size = path.with_name("mcpauth.db-wal").stat().st_size
    finally:
        db.dispose()
    frame = 4096 + 24  # a page and its frame header
    assert log_size < WAL_CHECKPOINT_PAGES * 3 // 2 * frame


def test_an_in_memory_database_has_no_checkpointer() -> None:
    db = Database(make_engine("sqlite:///:memory:"))
    assert db.checkpointer is None
    db.dispose()
