"""People's passkeys (WebAuthn credentials): found by credential id at sign-in, listed and
removed on the account page. The signature counter moves only forward, decided by a
conditional UPDATE, so two requests racing with one assertion cannot both count."""

from __future__ import annotations

from sqlalchemy import Table, delete, func, select, update
from sqlmodel import Session, col
from sqlmodel import select as model_select

from mcpauth.server.storage.database import changed_rows
from mcpauth.server.storage.models import Passkey

_TABLE: Table = Passkey.__table__  # type: ignore[attr-defined]
MAX_PER_ACCOUNT = 20


def add(session: Session, passkey: Passkey) -> None:
    session.add(passkey)


def get(session: Session, credential_id: str) -> Passkey | None:
    return session.get(Passkey, credential_id)


def of_user(session: Session, user_id: str) -> list[Passkey]:
    statement = (
        model_select(Passkey)
        .where(col(Passkey.user_id) == user_id)
        .order_by(col(Passkey.created_at), col(Passkey.credential_id))
    )
    return list(session.exec(statement))


def count(session: Session, user_id: str) -> int:
    statement = select(func.count()).select_from(_TABLE).where(_TABLE.c.user_id == user_id)
    return int(session.execute(statement).scalar_one())


def record_use(session: Session, credential_id: str, seen: int, counted: int, now: int) -> bool:
    """Store the counter ``counted`` an assertion reported, if the stored one is still ``seen``
    (the one it was checked against); False when another use came first."""
    statement = (
        update(_TABLE)
        .where(_TABLE.c.credential_id == credential_id, _TABLE.c.sign_count == seen)
        .values(sign_count=counted, last_used_at=now)
    )
    return changed_rows(session, statement) == 1


def remove(session: Session, user_id: str, credential_id: str) -> bool:
    statement = delete(_TABLE).where(
        _TABLE.c.credential_id == credential_id, _TABLE.c.user_id == user_id
    )
    return changed_rows(session, statement) == 1


def forget_user(session: Session, user_id: str) -> int:
    return changed_rows(session, delete(_TABLE).where(_TABLE.c.user_id == user_id))
