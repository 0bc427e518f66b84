"""Signing keys: the rows of the keys that sign access tokens (private halves encrypted by the
caller), their publication, retirement and expiry times."""

from __future__ import annotations

from collections.abc import Callable

from sqlmodel import Session, col, select

from mcpauth.server.storage.models import SigningKey


def add_first_key(session: Session, make: Callable[[], SigningKey]) -> bool:
    """Store the key ``make`` gives if there is no key yet; whether it did."""
    if session.exec(select(SigningKey).limit(1)).first() is not None:
        return False
    session.add(make())
    return True


def retire_current_keys(session: Session, retired_at: int, expires_at: int) -> None:
    """The keys still signing stop at ``retired_at`` and leave the key set at ``expires_at``."""
    for key in session.exec(select(SigningKey).where(col(SigningKey.retired_at).is_(None))):
        key.retired_at = retired_at
        key.expires_at = expires_at
        session.add(key)


def add_key(session: Session, key: SigningKey) -> None:
    session.add(key)


def all_keys(session: Session) -> list[SigningKey]:
    """Every stored key, oldest first."""
    return list(session.exec(select(SigningKey).order_by(col(SigningKey.created_at))))
