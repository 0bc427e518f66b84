"""The state the defences keep: failure throttle rows, the shared request-rate counters and the
single-use ``jti``s of client assertions and DPoP proofs. Counts are upserts in one statement,
so concurrent replicas never lose a count nor collide on the first insert."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import Connection, Table, case, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session

from mcpauth.server.storage.database import Database
from mcpauth.server.storage.models import RateCounter, Throttle, UsedAssertion

_THROTTLE: Table = Throttle.__table__  # type: ignore[attr-defined]
_RATES: Table = RateCounter.__table__  # type: ignore[attr-defined]

Slot = tuple[str, int]  # (rate key, window start)


def _insert(bind: Connection) -> Any:
    return postgresql.insert if bind.dialect.name == "postgresql" else sqlite.insert


def locked_until(session: Session, key: str) -> int:
    """When ``key``'s lock ends (0: never locked or no row)."""
    row = session.get(Throttle, key)
    return row.locked_until if row is not None else 0


def count_failure(session: Session, key: str, now: int, window: int) -> int:
    """Count one failure of ``key``; the count inside the current window (a window older than
    ``window`` seconds starts again at one)."""
    table = _THROTTLE
    expired = table.c.window_start + window <= now
    statement = (
        _insert(session.connection())(table)
        .values(key=key, failures=1, window_start=now, locked_until=0)
        .on_conflict_do_update(
            index_elements=[table.c.key],
            set_={
                "failures": case((expired, 1), else_=table.c.failures + 1),
                "window_start": case((expired, now), else_=table.c.window_start),
            },
        )
        .returning(table.c.failures)
    )
    return int(session.connection().execute(statement).scalar_one())


def lock(session: Session, key: str, until: int) -> None:
    session.connection().execute(
        update(_THROTTLE).where(_THROTTLE.c.key == key).values(locked_until=until)
    )


def clear_failures(session: Session, key: str) -> None:
    row = session.get(Throttle, key)
    if row is not None:
        session.delete(row)


def merge_rate_counts(
    db: Database, pending: Mapping[Slot, int], interesting: Iterable[Slot]
) -> dict[Slot, int]:
    """Add ``pending`` counts to the shared table in one transaction (a slot of a newer window
    replaces the key's old one); the table's totals of those slots and of ``interesting``. A
    write transaction of ``db``, so on SQLite it queues with this process's other writers
    instead of meeting them in SQLite's busy handler."""
    table = _RATES
    totals: dict[Slot, int] = {}
    with db.transaction() as conn:
        insert = _insert(conn)
        for (key, start), delta in sorted(pending.items()):
            same_window = (table.c.window_start == start).cast(table.c.count.type)
            statement = (
                insert(table)
                .values(key=key, window_start=start, count=delta)
                .on_conflict_do_update(
                    index_elements=[table.c.key],
                    set_={"count": same_window * table.c.count + delta, "window_start": start},
                )
                .returning(table.c.count)
            )
            totals[(key, start)] = int(conn.execute(statement).scalar_one())
        for slot in set(interesting) - set(totals):
            row = conn.execute(
                select(table.c.count).where(table.c.key == slot[0], table.c.window_start == slot[1])
            ).first()
            totals[slot] = int(row[0]) if row else 0
    return totals


def record_jti(session: Session, issuer: str, jti: str, expires_at: int, now: int) -> bool:
    """Remember ``issuer``'s ``jti`` until ``expires_at``; False if it was seen before and has
    not expired (a replay). Only a digest of the pair is stored."""
    key = hashlib.sha256(f"{issuer}\x00{jti}".encode()).hexdigest()
    existing = session.get(UsedAssertion, key)
    if existing is not None:
        if existing.expires_at > now:
            return False
        session.delete(existing)
        session.flush()
    try:
        with session.begin_nested():
            session.add(UsedAssertion(key=key, expires_at=expires_at))
    except IntegrityError:
        return False
    return True
