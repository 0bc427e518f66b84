"""The audit events kept for searching (``audit_events``): written in batches, searched by
user, client, event and time; the pruner deletes them after ``audit_retention``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, Table, and_, insert, or_, select
from sqlmodel import Session

from mcpauth.server.storage.models import AuditEvent

EVENTS: Table = AuditEvent.__table__  # type: ignore[attr-defined]


def add(conn: Connection, rows: list[dict[str, Any]]) -> None:
    """Insert the events ``rows`` (the columns of ``audit_events`` but ``id``)."""
    conn.execute(insert(EVENTS), rows)


def search(
    session: Session,
    *,
    user: Sequence[str] = (),
    client: str | None = None,
    event: str | None = None,
    since: int | None = None,
    until: int | None = None,
    limit: int,
) -> list[dict[str, Any]]:
    """The events that match every filter given, newest first, at most ``limit``: ``user`` any
    of a user's ids and names, ``event`` a name or a prefix ending in a dot."""
    where = []
    if user:
        where.append(or_(EVENTS.c.user_id.in_(user), EVENTS.c.username.in_(user)))
    if client:
        where.append(EVENTS.c.client_id == client)
    if event:
        if event.endswith("."):
            where.append(EVENTS.c.event.startswith(event, autoescape=True))
        else:
            where.append(EVENTS.c.event == event)
    if since is not None:
        where.append(EVENTS.c.at >= since)
    if until is not None:
        where.append(EVENTS.c.at <= until)
    query = (
        select(EVENTS)
        .where(and_(*where) if where else EVENTS.c.id.is_not(None))
        .order_by(EVENTS.c.at.desc(), EVENTS.c.id.desc())
        .limit(limit)
    )
    return [dict(row._mapping) for row in session.connection().execute(query)]
