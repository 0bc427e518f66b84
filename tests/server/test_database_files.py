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

from mcpauth.server.storage.database import make_engine


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
    # WAL with synchronous=NORMAL: a commit survives a crash of the process (docs/configuration.md);
    # the log is copied back every 4000 pages, not SQLite's 1000
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
