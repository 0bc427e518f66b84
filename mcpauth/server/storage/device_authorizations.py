"""Device authorizations (RFC 8628): stored, counted, found by user code, decided by a person,
polled and redeemed. Every change of state is a conditional UPDATE whose row count says who
won, so a code is approved or denied once and redeemed once, whatever races (threads or
replicas)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, CursorResult, Row, Table, and_, func, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session

from mcpauth.server.storage.grant_store import drop_interaction
from mcpauth.server.storage.models import DeviceAuthorization, Grant

DEVICES: Table = DeviceAuthorization.__table__  # type: ignore[attr-defined]

PENDING, APPROVED, DENIED = "pending", "approved", "denied"


def _changed(result: object) -> bool:
    return isinstance(result, CursorResult) and result.rowcount == 1


def outstanding(conn: Connection, client_id: str, now: int) -> tuple[int, int]:
    """Live device authorizations not yet redeemed: the client's, and all clients' together."""
    live = and_(DEVICES.c.expires_at > now, DEVICES.c.redeemed_at.is_(None))
    own = func.count().filter(DEVICES.c.client_id == client_id)
    row = conn.execute(select(own, func.count()).where(live)).one()
    return int(row[0]), int(row[1])


def add(conn: Connection, values: dict[str, Any]) -> bool:
    """Store a new device authorization; False when its user code is taken (the caller draws
    another), the transaction left usable."""
    try:
        with conn.begin_nested():
            conn.execute(insert(DEVICES).values(**values))
    except IntegrityError:
        return False
    return True


def by_digest(conn: Connection, digest: str) -> Row[Any] | None:
    return conn.execute(select(DEVICES).where(DEVICES.c.digest == digest)).first()


def by_user_code(unit: Connection | Session, user_code_digest: str) -> Row[Any] | None:
    conn = unit.connection() if isinstance(unit, Session) else unit
    return conn.execute(
        select(DEVICES).where(DEVICES.c.user_code_digest == user_code_digest)
    ).first()


def decide(
    session: Session,
    digest: str,
    now: int,
    *,
    user_id: str,
    auth_time: int,
    grant: Grant | None,
    interaction_id: str,
) -> bool:
    """Record a person's decision on a pending, live device authorization: approved with
    ``grant`` (stored with it), or denied (None); the interaction that showed it is consumed
    either way. True only for the one caller that made the decision."""
    result = session.connection().execute(
        update(DEVICES)
        .where(DEVICES.c.digest == digest, DEVICES.c.status == PENDING, DEVICES.c.expires_at > now)
        .values(
            status=APPROVED if grant is not None else DENIED,
            user_id=user_id,
            auth_time=auth_time,
            grant_id=grant.id if grant is not None else None,
        )
    )
    decided = _changed(result)
    if decided and grant is not None:
        session.add(grant)
    drop_interaction(session, interaction_id)
    return decided


def poll(conn: Connection, digest: str, now: int, step: int) -> bool:
    """Note a poll at ``now``: True when it came at least the interval after the previous one;
    otherwise the interval grows by ``step`` seconds (RFC 8628 §3.5 ``slow_down``) and False."""
    in_time = conn.execute(
        update(DEVICES)
        .where(
            DEVICES.c.digest == digest,
            (DEVICES.c.polled_at.is_(None)) | (DEVICES.c.polled_at + DEVICES.c.interval <= now),
        )
        .values(polled_at=now)
    )
    if _changed(in_time):
        return True
    conn.execute(
        update(DEVICES)
        .where(DEVICES.c.digest == digest)
        .values(polled_at=now, interval=DEVICES.c.interval + step)
    )
    return False


def redeem(conn: Connection, digest: str, now: int) -> bool:
    """Mark an approved device code redeemed; True only for the one caller that did."""
    result = conn.execute(
        update(DEVICES)
        .where(
            DEVICES.c.digest == digest,
            DEVICES.c.status == APPROVED,
            DEVICES.c.redeemed_at.is_(None),
        )
        .values(redeemed_at=now)
    )
    return _changed(result)
