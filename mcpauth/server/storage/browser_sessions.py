"""Signed-in browser sessions: one row per session under the SHA-256 digest of its id, alive
while its account exists and until it expires."""

from __future__ import annotations

from sqlalchemy import Table, delete, select
from sqlmodel import Session

from mcpauth.server.storage.models import BrowserSessionRecord, User

_RECORDS: Table = BrowserSessionRecord.__table__  # type: ignore[attr-defined]
_USERS: Table = User.__table__  # type: ignore[attr-defined]


def signed_in(session: Session, sid_digest: str, now: int) -> tuple[str, int, str] | None:
    """(user id, auth time, authentication methods) of the live session ``sid_digest`` whose
    account still exists and is not disabled."""
    row = session.execute(
        select(_RECORDS.c.user_id, _RECORDS.c.auth_time, _RECORDS.c.amr)
        .join(_USERS, _USERS.c.id == _RECORDS.c.user_id)
        .where(
            _RECORDS.c.digest == sid_digest,
            _RECORDS.c.expires_at > now,
            _USERS.c.disabled.is_(False),
        )
    ).first()
    return (str(row[0]), int(row[1]), str(row[2])) if row is not None else None


def start(
    session: Session,
    sid_digest: str,
    user_id: str,
    now: int,
    expires_at: int,
    *,
    ending: str,
    amr: str = "",
) -> None:
    """Record the session ``sid_digest`` for ``user_id``, signed in with the methods ``amr``;
    the session ``ending`` ends."""
    end(session, ending)
    session.add(
        BrowserSessionRecord(
            digest=sid_digest,
            user_id=user_id,
            auth_time=now,
            created_at=now,
            expires_at=expires_at,
            amr=amr,
        )
    )


def end(session: Session, sid_digest: str) -> None:
    session.execute(delete(_RECORDS).where(_RECORDS.c.digest == sid_digest))


def live_sessions(session: Session, user_id: str, now: int) -> list[tuple[int, str, int]]:
    """(auth time, authentication methods, expiry) of each live session of ``user_id``, the
    newest sign-in first (never a session's id)."""
    rows = session.execute(
        select(_RECORDS.c.auth_time, _RECORDS.c.amr, _RECORDS.c.expires_at)
        .where(_RECORDS.c.user_id == user_id, _RECORDS.c.expires_at > now)
        .order_by(_RECORDS.c.auth_time.desc())
    )
    return [(int(row[0]), str(row[1]), int(row[2])) for row in rows]


def end_user(session: Session, user_id: str) -> None:
    """End every session of ``user_id``."""
    session.execute(delete(_RECORDS).where(_RECORDS.c.user_id == user_id))
