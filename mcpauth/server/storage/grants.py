"""Grants and everything issued from them: authorization codes, refresh tokens, consents and
pending interactions. Single use is decided by conditional UPDATEs whose row count says who
won, so racing requests (threads or replicas) cannot both redeem one code or refresh token."""

from __future__ import annotations

from sqlalchemy import CursorResult, delete, update
from sqlmodel import Session, col, select

from mcpauth.server.storage.models import (
    AuthorizationCode,
    Client,
    Consent,
    Grant,
    Interaction,
    RefreshToken,
)


def _rowcount(result: object) -> int:
    return result.rowcount if isinstance(result, CursorResult) else 0


def redeem_code(session: Session, digest: str, now: int) -> bool:
    """Mark the code redeemed; True only for the one caller that did."""
    result = session.exec(
        update(AuthorizationCode)
        .where(col(AuthorizationCode.digest) == digest)
        .where(col(AuthorizationCode.redeemed_at).is_(None))
        .values(redeemed_at=now)
    )
    return _rowcount(result) == 1


def rotate_refresh_token(session: Session, digest: str, now: int) -> bool:
    """Mark the refresh token used; True only for the one caller that did."""
    result = session.exec(
        update(RefreshToken)
        .where(col(RefreshToken.digest) == digest)
        .where(col(RefreshToken.rotated_at).is_(None))
        .values(rotated_at=now)
    )
    return _rowcount(result) == 1


def revoke_grant(session: Session, grant_id: str, now: int) -> None:
    """Revoke a grant and every refresh token of its family (replay, user revocation)."""
    session.exec(
        update(Grant)
        .where(col(Grant.id) == grant_id)
        .where(col(Grant.revoked_at).is_(None))
        .values(revoked_at=now)
    )
    session.exec(
        update(RefreshToken)
        .where(col(RefreshToken.grant_id) == grant_id)
        .where(col(RefreshToken.rotated_at).is_(None))
        .values(rotated_at=now)
    )


def user_grants(session: Session, user_id: str) -> list[Grant]:
    return list(
        session.exec(
            select(Grant)
            .where(Grant.user_id == user_id)
            .where(col(Grant.revoked_at).is_(None))
            .order_by(col(Grant.last_used_at).desc())
        )
    )


def consented_scopes(session: Session, user_id: str, client_id: str, resource: str) -> set[str]:
    consent = session.get(Consent, (user_id, client_id, resource))
    return set(consent.scope.split()) if consent else set()


def remember_consent(
    session: Session, user_id: str, client_id: str, resource: str, scopes: set[str], now: int
) -> None:
    consent = session.get(Consent, (user_id, client_id, resource))
    if consent is None:
        consent = Consent(user_id=user_id, client_id=client_id, resource=resource, updated_at=now)
    consent.scope = " ".join(sorted(scopes | set(consent.scope.split())))
    consent.updated_at = now
    session.add(consent)


def forget_consent(session: Session, user_id: str, client_id: str, resource: str) -> None:
    consent = session.get(Consent, (user_id, client_id, resource))
    if consent is not None:
        session.delete(consent)


def live_interaction(session: Session, interaction_id: str, now: int) -> Interaction | None:
    interaction = session.get(Interaction, interaction_id)
    if interaction is None or interaction.expires_at <= now:
        return None
    return interaction


def delete_client(session: Session, client_id: str) -> bool:
    """Delete a client with its grants, refresh tokens and consents; False if unknown."""
    client = session.get(Client, client_id)
    if client is None:
        return False
    session.exec(delete(RefreshToken).where(col(RefreshToken.client_id) == client_id))
    session.exec(delete(Grant).where(col(Grant.client_id) == client_id))
    session.exec(delete(Consent).where(col(Consent.client_id) == client_id))
    session.delete(client)
    return True
