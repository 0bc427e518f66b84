"""Grants and everything issued from them: authorization codes, refresh tokens, consents and
pending interactions. Single use is decided by conditional UPDATEs whose row count says who
won, so racing requests (threads or replicas) cannot both redeem one code or refresh token; the
grace for a just-rotated refresh token is decided the same way."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Column, Connection, Table, bindparam, delete, exists, insert, update
from sqlalchemy import select as core_select
from sqlmodel import Session, col, select

from mcpauth.oauth import format_scope, parse_scope
from mcpauth.server.storage.database import Prepared, Record
from mcpauth.server.storage.models import (
    AuthorizationCode,
    Client,
    Consent,
    Grant,
    Interaction,
    RefreshToken,
    RevokedAccessToken,
)


def _table(model: Any) -> Table:
    table: Table = model.__table__
    return table


CODES, GRANTS, REFRESH_TOKENS = _table(AuthorizationCode), _table(Grant), _table(RefreshToken)

# The statements of a code exchange and a refresh, compiled once (the token endpoint's hot path)
_CODE = Prepared(core_select(CODES).where(CODES.c.digest == bindparam("digest")))
_REFRESH_TOKEN = Prepared(
    core_select(REFRESH_TOKENS).where(REFRESH_TOKENS.c.digest == bindparam("digest"))
)
_GRANT = Prepared(core_select(GRANTS).where(GRANTS.c.id == bindparam("grant_id")))


def _mark_once(column: Column[Any], key: Column[Any], param: str) -> Prepared:
    """``UPDATE ... SET column = :now WHERE key = :param AND column IS NULL``: the single-use
    rule; the row count (1 or 0) says whether this caller is the one that marked the row."""
    return Prepared(
        update(column.table)
        .where(key == bindparam(param), column.is_(None))
        .values({column.key: bindparam("now")})
    )


_REDEEM = _mark_once(CODES.c.redeemed_at, CODES.c.digest, "digest")
_ROTATE = _mark_once(REFRESH_TOKENS.c.rotated_at, REFRESH_TOKENS.c.digest, "digest")
# a live grant's tokens are rotated only by use: revoking it is what rotates the others
_REPLAY = Prepared(
    update(GRANTS)
    .where(
        GRANTS.c.id == bindparam("grant_id"),
        GRANTS.c.revoked_at.is_(None),
        exists().where(
            REFRESH_TOKENS.c.digest == bindparam("digest"),
            REFRESH_TOKENS.c.grant_id == bindparam("grant_id"),
            REFRESH_TOKENS.c.rotated_at > bindparam("since"),
        ),
    )
    .values(last_used_at=bindparam("now"))
)
_ADD_REFRESH_TOKEN = Prepared(
    insert(REFRESH_TOKENS).values({c.key: bindparam(c.key) for c in REFRESH_TOKENS.columns})
)
_TOUCH_GRANT = Prepared(
    update(GRANTS).where(GRANTS.c.id == bindparam("grant_id")).values(last_used_at=bindparam("now"))
)
_REVOKE_GRANT = _mark_once(GRANTS.c.revoked_at, GRANTS.c.id, "grant_id")
_REVOKE_FAMILY = _mark_once(REFRESH_TOKENS.c.rotated_at, REFRESH_TOKENS.c.grant_id, "grant_id")


def code_by_digest(conn: Connection, digest: str) -> Record | None:
    return _CODE.first(conn, digest=digest)


def refresh_token_by_digest(conn: Connection, digest: str) -> Record | None:
    return _REFRESH_TOKEN.first(conn, digest=digest)


def grant_by_id(conn: Connection, grant_id: str) -> Record | None:
    return _GRANT.first(conn, grant_id=grant_id)


def redeem_code(conn: Connection, digest: str, now: int) -> bool:
    """Mark the code redeemed; True only for the one caller that did."""
    return _REDEEM.rowcount(conn, digest=digest, now=now) == 1


def rotate_refresh_token(conn: Connection, digest: str, now: int) -> bool:
    """Mark the refresh token used; True only for the one caller that did."""
    return _ROTATE.rowcount(conn, digest=digest, now=now) == 1


def replay_refresh_token(
    conn: Connection, digest: str, grant_id: str, now: int, grace: int
) -> bool:
    """Whether the rotated refresh token ``digest`` may be used once more: it was rotated by a
    use less than ``grace`` seconds ago and its grant ``grant_id`` still lives. The decision
    updates the grant's row (locking it on PostgreSQL), so a concurrent revocation of the grant
    either waits for this refresh (and then revokes what it issues) or makes it fail."""
    if grace <= 0:
        return False
    changed = _REPLAY.rowcount(conn, grant_id=grant_id, digest=digest, since=now - grace, now=now)
    return changed == 1


def add_refresh_token(conn: Connection, values: dict[str, Any], now: int) -> None:
    """Store a refresh token and mark its grant used."""
    _ADD_REFRESH_TOKEN.rowcount(conn, **values)
    _TOUCH_GRANT.rowcount(conn, grant_id=values["grant_id"], now=now)


def revoke_grant(unit: Connection | Session, grant_id: str, now: int) -> None:
    """Revoke a grant and every refresh token of its family (replay, user revocation)."""
    conn = unit.connection() if isinstance(unit, Session) else unit
    _REVOKE_GRANT.rowcount(conn, grant_id=grant_id, now=now)
    _REVOKE_FAMILY.rowcount(conn, grant_id=grant_id, now=now)


def access_token_revoked(session: Session, jti: str, grant_id: str | None) -> bool:
    """Whether the access token ``jti`` was revoked, itself or with its grant ``grant_id``."""
    if session.get(RevokedAccessToken, jti) is not None:
        return True
    if grant_id is None:
        return False
    grant = session.get(Grant, grant_id)
    return grant is None or grant.revoked_at is not None


def live_grant(session: Session, grant_id: str) -> Grant | None:
    """The grant ``grant_id`` unless it was revoked."""
    grant = session.get(Grant, grant_id)
    return grant if grant is not None and grant.revoked_at is None else None


def revoke_access_token(session: Session, jti: str, expires_at: int) -> None:
    """Remember ``jti`` as revoked until the token would have expired anyway."""
    if session.get(RevokedAccessToken, jti) is None:
        session.add(RevokedAccessToken(jti=jti, expires_at=expires_at))


def get_refresh_token(session: Session, digest: str) -> RefreshToken | None:
    return session.get(RefreshToken, digest)


def live_refresh_token(
    session: Session, digest: str, now: int
) -> tuple[RefreshToken, Grant] | None:
    """The refresh token ``digest`` with its grant, if it is current (not rotated, not expired)
    and its grant lives."""
    row = session.get(RefreshToken, digest)
    if row is None or row.rotated_at is not None or row.expires_at <= now:
        return None
    grant = session.get(Grant, row.grant_id)
    if grant is None or grant.revoked_at is not None:
        return None
    return row, grant


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
    return set(parse_scope(consent.scope)) if consent else set()


def get_consent(session: Session, user_id: str, client_id: str, resource: str) -> Consent | None:
    return session.get(Consent, (user_id, client_id, resource))


def remember_consent(
    session: Session,
    user_id: str,
    client_id: str,
    resource: str,
    scopes: set[str],
    now: int,
    *,
    redirect_uri: str,
    client_name: str,
) -> None:
    """Record an explicit approval, with what the consent page showed."""
    consent = session.get(Consent, (user_id, client_id, resource))
    if consent is None:
        consent = Consent(user_id=user_id, client_id=client_id, resource=resource, updated_at=now)
    consent.scope = format_scope(sorted(scopes | set(parse_scope(consent.scope))))
    consent.redirect_uri = redirect_uri
    consent.client_name = client_name
    consent.updated_at = now
    session.add(consent)


def forget_consent(session: Session, user_id: str, client_id: str, resource: str) -> None:
    consent = session.get(Consent, (user_id, client_id, resource))
    if consent is not None:
        session.delete(consent)


def add_interaction(session: Session, interaction: Interaction) -> None:
    session.add(interaction)


def rebind_interaction(session: Session, interaction_id: str, sid: str) -> None:
    """Move a pending request to the browser session ``sid`` that just signed in."""
    interaction = session.get(Interaction, interaction_id)
    if interaction is not None:
        interaction.request = {**interaction.request, "sid": sid, "signed_in_here": True}
        session.add(interaction)


def drop_interaction(session: Session, interaction_id: str) -> None:
    interaction = session.get(Interaction, interaction_id)
    if interaction is not None:
        session.delete(interaction)


def add_grant_with_code(
    session: Session, grant: Grant, code: AuthorizationCode, interaction_id: str
) -> None:
    """Store a new grant and its authorization code; the interaction it ends is consumed."""
    drop_interaction(session, interaction_id)
    session.add(grant)
    session.add(code)


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
