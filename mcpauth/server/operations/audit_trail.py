"""The audit trail kept in the database (``audit_events``) for the admin console's and
``mcpauth audit search``'s search. Every :func:`~mcpauth.server.operations.logs.audit` event
of a request is buffered in memory (:class:`AuditTrail`, installed for each request by
:class:`AuditTrailMiddleware`) and written in batches off the request path: by the app's
lifespan every :data:`FLUSH_INTERVAL` seconds, when it stops, and before every search. An
administrator's action is written at once (:meth:`AuditTrail.write`). A row holds what the
log line holds, identifiers and names, each value cut to :data:`MAX_VALUE` characters; the
pruner deletes rows older than ``audit_retention``."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from mcpauth.server.operations.logs import audit_sink, request_id_var
from mcpauth.server.storage import audit_events
from mcpauth.server.storage.database import Database

log = logging.getLogger("mcpauth.audit_trail")

FLUSH_INTERVAL = 2.0  # seconds between two writes of the buffered events
MAX_PENDING = 10_000  # events buffered at most; past it the oldest are dropped (and counted)
MAX_VALUE = 200  # characters kept of each value
MAX_FIELDS = 20  # fields kept of an event besides its columns
MAX_RESULTS = 500  # rows a search returns at most
_COLUMNS = {"user_id": 64, "username": 200, "client_id": 2048, "actor": 200}


def _text(value: object, limit: int = MAX_VALUE) -> str:
    return ("" if value is None else str(value))[:limit]


def row_of(event: str, fields: dict[str, Any], at: int) -> dict[str, Any]:
    """The ``audit_events`` row of one event: the searchable fields in their columns, the
    others as short strings in ``details``."""
    row: dict[str, Any] = {
        "at": at,
        "event": event[:64],
        "request_id": _text(request_id_var.get(), 64),
    }
    for name, limit in _COLUMNS.items():
        row[name] = _text(fields.get(name), limit)
    others = [(k, v) for k, v in fields.items() if k not in _COLUMNS][:MAX_FIELDS]
    row["details"] = {_text(k, 64): _text(v) for k, v in others}
    return row


MAX_TIME = 2**31 - 1  # the largest time the `at` column (a 32-bit integer) holds


def _within_column(seconds: int) -> int:
    """A time to compare with the `at` column, moved into what it can hold (a search from
    the year 2999 finds nothing, rather than failing on PostgreSQL)."""
    return max(-MAX_TIME, min(seconds, MAX_TIME))


class AuditTrail:
    """The events waiting to be written to ``audit_events``, and the writes (thread-safe)."""

    def __init__(self, db: Database, clock: Callable[[], float]) -> None:
        self._db = db
        self._clock = clock
        self._lock = threading.Lock()
        self._pending: list[dict[str, Any]] = []
        self.dropped = 0

    def record(self, event: str, fields: dict[str, Any]) -> None:
        """Buffer one event (written by the next :meth:`flush`)."""
        row = row_of(event, fields, int(self._clock()))
        with self._lock:
            if len(self._pending) >= MAX_PENDING:
                del self._pending[0]
                self.dropped += 1
            self._pending.append(row)

    def flush(self) -> int:
        """Write the buffered events (blocking); how many."""
        with self._lock:
            rows, self._pending = self._pending, []
        if rows:
            with self._db.transaction() as conn:
                audit_events.add(conn, rows)
        return len(rows)

    def write(self, event: str, fields: dict[str, Any]) -> None:
        """Record one event and write it now, with the ones buffered before it."""
        self.record(event, fields)
        self.flush()

    def search(
        self,
        *,
        user: Sequence[str] = (),
        client: str | None = None,
        event: str | None = None,
        since: int | None = None,
        until: int | None = None,
        limit: int = 100,
    ) -> list[dict[str, Any]]:
        """The events that match, newest first (at most ``limit``, up to :data:`MAX_RESULTS`):
        ``user`` is any of a user's id and name, ``event`` an event name or a prefix ending in
        a dot (``admin.``); the buffered events are written first."""
        self.flush()
        with self._db.read() as session:
            return audit_events.search(
                session,
                user=user,
                client=client,
                event=event,
                since=None if since is None else _within_column(since),
                until=None if until is None else _within_column(until),
                limit=max(1, min(limit, MAX_RESULTS)),
            )


class AuditTrailMiddleware:
    """Installs the application's :class:`AuditTrail` as where each request's audit events
    also go."""

    def __init__(self, app: ASGIApp, *, trail: AuditTrail) -> None:
        self.app = app
        self.trail = trail

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        token = audit_sink.set(self.trail.record)
        try:
            await self.app(scope, receive, send)
        finally:
            audit_sink.reset(token)
