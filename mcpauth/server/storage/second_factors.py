"""A person's second factors: the TOTP secret (sealed), the recovery codes (digests), and the
half-finished sign-ins waiting for a second factor. Single use is decided by conditional
UPDATEs and DELETEs whose row count says who won, so two requests racing with one code, one
recovery code or one pending sign-in cannot both succeed."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import Table, delete, func, select, update
from sqlmodel import Session

from mcpauth.server import crypto
from mcpauth.server.storage import passkeys
from mcpauth.server.storage.database import changed_rows
from mcpauth.server.storage.models import PendingSignIn, RecoveryCode, TotpFactor

_TOTP: Table = TotpFactor.__table__  # type: ignore[attr-defined]
_CODES: Table = RecoveryCode.__table__  # type: ignore[attr-defined]
_PENDING: Table = PendingSignIn.__table__  # type: ignore[attr-defined]


def _associated(user_id: str) -> bytes:
    return f"mcpauth totp secret\x00{user_id}".encode()


@dataclass(frozen=True)
class Factors:
    """Which second factors an account has."""

    totp: bool
    passkeys: int
    recovery_codes: int  # not used yet

    @property
    def any(self) -> bool:
        return self.totp or self.passkeys > 0


def factors(session: Session, user_id: str) -> Factors:
    row = session.get(TotpFactor, user_id)
    left = session.execute(
        select(func.count())
        .select_from(_CODES)
        .where(_CODES.c.user_id == user_id, _CODES.c.used_at.is_(None))
    ).scalar_one()
    return Factors(
        totp=row is not None and row.confirmed_at is not None,
        passkeys=passkeys.count(session, user_id),
        recovery_codes=int(left),
    )


# --------------------------------------------------------------------------------------------
# TOTP


def start_totp(session: Session, key: bytes, user_id: str, secret: str, now: int) -> None:
    """Store a new, unconfirmed secret for ``user_id`` (replacing an unconfirmed one)."""
    row = session.get(TotpFactor, user_id)
    if row is None:
        row = TotpFactor(user_id=user_id, sealed="", created_at=now)
    row.sealed = crypto.seal(key, secret.encode("ascii"), _associated(user_id))
    row.confirmed_at = None
    row.last_step = 0
    row.created_at = now
    session.add(row)


def totp_secret(
    session: Session, key: bytes, user_id: str, *, confirmed: bool
) -> tuple[str, int] | None:
    """The secret of ``user_id`` (confirmed, or waiting for its first code) and the last step
    accepted; None when there is none such or it does not open."""
    row = session.get(TotpFactor, user_id)
    if row is None or (row.confirmed_at is not None) != confirmed:
        return None
    opened = crypto.unseal(key, row.sealed, _associated(user_id))
    return (opened.decode("ascii"), row.last_step) if opened is not None else None


def accept_step(session: Session, user_id: str, step: int, *, confirm_at: int | None) -> bool:
    """Record that the code of ``step`` was used; False when a code of that step or a later one
    was used first (a replay, or a race lost). ``confirm_at`` activates a new secret."""
    values: dict[str, int] = {"last_step": step}
    if confirm_at is not None:
        values["confirmed_at"] = confirm_at
    statement = (
        update(_TOTP).where(_TOTP.c.user_id == user_id, _TOTP.c.last_step < step).values(**values)
    )
    return changed_rows(session, statement) == 1


def remove_totp(session: Session, user_id: str) -> bool:
    """Remove the TOTP secret and the recovery codes; whether there was a secret."""
    session.execute(delete(_CODES).where(_CODES.c.user_id == user_id))
    return changed_rows(session, delete(_TOTP).where(_TOTP.c.user_id == user_id)) > 0


# --------------------------------------------------------------------------------------------
# recovery codes


def replace_recovery_codes(
    session: Session, user_id: str, digests: Iterable[str], now: int
) -> None:
    """The account's recovery codes become these (the old ones stop working)."""
    session.execute(delete(_CODES).where(_CODES.c.user_id == user_id))
    for value in digests:
        session.add(RecoveryCode(digest=value, user_id=user_id, created_at=now))


def use_recovery_code(session: Session, user_id: str, code_digest: str, now: int) -> bool:
    """Spend the recovery code ``code_digest`` of ``user_id``; True only for its one use."""
    statement = (
        update(_CODES)
        .where(
            _CODES.c.digest == code_digest,
            _CODES.c.user_id == user_id,
            _CODES.c.used_at.is_(None),
        )
        .values(used_at=now)
    )
    return changed_rows(session, statement) == 1


# --------------------------------------------------------------------------------------------
# sign-ins waiting for a second factor


def start_pending(
    session: Session,
    sid_digest: str,
    user_id: str,
    amr: str,
    interaction_id: str | None,
    now: int,
    expires_at: int,
) -> None:
    """The browser session ``sid_digest`` has done its first factor (``amr``) as ``user_id``."""
    session.execute(delete(_PENDING).where(_PENDING.c.digest == sid_digest))
    session.add(
        PendingSignIn(
            digest=sid_digest,
            user_id=user_id,
            amr=amr,
            interaction_id=interaction_id,
            created_at=now,
            expires_at=expires_at,
        )
    )


def pending(session: Session, sid_digest: str, now: int) -> PendingSignIn | None:
    """The live half-finished sign-in of the browser session ``sid_digest``."""
    row = session.get(PendingSignIn, sid_digest)
    return row if row is not None and row.expires_at > now else None


def take_pending(session: Session, checked: PendingSignIn, now: int) -> bool:
    """End the half-finished sign-in ``checked`` (read by :func:`pending`, then answered):
    True for the one request that did, and only while the session's row is still that one
    (the same account, methods and start), so that a first factor posted meanwhile for
    another account is never completed by the answer checked for this one."""
    taken = changed_rows(
        session,
        delete(_PENDING).where(
            _PENDING.c.digest == checked.digest,
            _PENDING.c.user_id == checked.user_id,
            _PENDING.c.amr == checked.amr,
            _PENDING.c.created_at == checked.created_at,
            _PENDING.c.expires_at > now,
        ),
    )
    return taken == 1


def forget_user(session: Session, user_id: str) -> None:
    """Every second factor of ``user_id`` and its pending sign-ins (``mcpauth users
    reset-mfa``, removing the user)."""
    remove_totp(session, user_id)
    passkeys.forget_user(session, user_id)
    session.execute(delete(_PENDING).where(_PENDING.c.user_id == user_id))
