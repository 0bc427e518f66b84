"""Database.transaction on SQLite: begun and committed on the driver's connection (the token
endpoint's prepared statements need no SQLAlchemy around them), with SQLAlchemy statements
inside joining the same transaction: everything commits together or nothing does, and a
failure to begin is a DatabaseError like any other."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import insert, select

from mcpauth.server.storage import grant_store
from mcpauth.server.storage.database import Database, DatabaseError, make_engine
from mcpauth.server.storage.models import metadata

GRANTS = grant_store.GRANTS


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    engine = make_engine(f"sqlite:///{tmp_path / 'mcpauth.db'}")
    metadata.create_all(engine)
    database = Database(engine)
    yield database
    database.dispose()


def _grant(grant_id: str) -> dict[str, object]:
    return {
        "id": grant_id,
        "user_id": "u",
        "client_id": "c",
        "resource": "https://mcp.example.com/mcp",
        "scope": "a",
        "created_at": 1,
        "last_used_at": 1,
    }


def _ids(db: Database) -> list[str]:
    with db.read() as session:
        return list(session.connection().execute(select(GRANTS.c.id)).scalars())


def test_prepared_and_sqlalchemy_statements_commit_together(db: Database) -> None:
    with db.transaction() as conn:
        conn.execute(insert(GRANTS).values(**_grant("g1")))  # SQLAlchemy: joins
        grant_store.revoke_grant(conn, "g1", 5)  # prepared, on the driver's cursor
        conn.execute(insert(GRANTS).values(**_grant("g2")))
    with db.transaction() as conn:
        revoked = grant_store.grant_by_id(conn, "g1")
    assert revoked is not None
    assert revoked.revoked_at == 5
    assert sorted(_ids(db)) == ["g1", "g2"]


@pytest.mark.parametrize("through_sqlalchemy", [True, False])
def test_an_exception_rolls_back_every_statement(db: Database, through_sqlalchemy: bool) -> None:
    with db.transaction() as conn:
        conn.execute(insert(GRANTS).values(**_grant("kept")))

    def refused_halfway() -> None:
        with db.transaction() as conn:
            if through_sqlalchemy:
                conn.execute(insert(GRANTS).values(**_grant("lost")))
            grant_store.revoke_grant(conn, "kept", 7)
            raise RuntimeError("refused halfway")

    with pytest.raises(RuntimeError):
        refused_halfway()
    with db.transaction() as conn:
        kept = grant_store.grant_by_id(conn, "kept")
    assert kept is not None
    assert kept.revoked_at is None
    assert _ids(db) == ["kept"]


def test_a_transaction_that_cannot_begin_is_a_database_error(db: Database, tmp_path: Path) -> None:
    with db.transaction() as conn:
        conn.exec_driver_sql("PRAGMA busy_timeout=20")  # the writer's connection waits 20 ms
    other = sqlite3.connect(tmp_path / "mcpauth.db", isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        with pytest.raises(DatabaseError, match="locked"), db.transaction():
            pass
        other.execute("ROLLBACK")
    finally:
        other.close()
    with db.transaction() as conn:  # and the next one begins as usual
        conn.execute(insert(GRANTS).values(**_grant("after")))
    assert _ids(db) == ["after"]
