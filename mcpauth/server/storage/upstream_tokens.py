"""People's tokens at upstream providers (``keep_tokens``), sealed at rest: AES-GCM with a key
derived from the server secret, the (user, provider) pair as associated data, so a row copied
to another person or provider, or read without the secret, opens to nothing."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Table, delete, update
from sqlmodel import Session

from mcpauth.server import crypto
from mcpauth.server.storage.models import UpstreamToken

_TABLE: Table = UpstreamToken.__table__  # type: ignore[attr-defined]
MAX_TOKEN_LENGTH = 8192  # an upstream access or refresh token longer than this is not kept
MAX_SEALED_LENGTH = 24_000  # two tokens at the limit, their JSON, nonce and tag, base64


@dataclass(frozen=True)
class UpstreamTokens:
    """What a provider's token endpoint gave; never printed."""

    access_token: str
    refresh_token: str | None = None
    expires_at: int | None = None

    def __repr__(self) -> str:
        return f"UpstreamTokens(expires_at={self.expires_at!r})"

    @classmethod
    def from_response(cls, token: dict[str, Any], now: int) -> UpstreamTokens | None:
        """The tokens of a token response, if there is an access token of a keepable size."""
        access, refresh = token.get("access_token"), token.get("refresh_token")
        if not isinstance(access, str) or not access or len(access) > MAX_TOKEN_LENGTH:
            return None
        if not isinstance(refresh, str) or not refresh or len(refresh) > MAX_TOKEN_LENGTH:
            refresh = None
        expires_in = token.get("expires_in")
        expires_at = now + int(expires_in) if isinstance(expires_in, int | float) else None
        return cls(access, refresh, expires_at)


def _associated(user_id: str, provider_id: str) -> bytes:
    return f"mcpauth upstream token\x00{user_id}\x00{provider_id}".encode()


def seal(key: bytes, user_id: str, provider_id: str, tokens: UpstreamTokens) -> str:
    document = json.dumps(
        {"a": tokens.access_token, "r": tokens.refresh_token, "e": tokens.expires_at}
    ).encode()
    return crypto.seal(key, document, _associated(user_id, provider_id))


def unseal(key: bytes, user_id: str, provider_id: str, value: str) -> UpstreamTokens | None:
    """The tokens of a sealed row; None when it does not open (another key, row or pair)."""
    document = crypto.unseal(key, value, _associated(user_id, provider_id))
    if document is None:
        return None
    try:
        data = json.loads(document)
        return UpstreamTokens(str(data["a"]), data.get("r"), data.get("e"))
    except (ValueError, KeyError, TypeError):
        return None


def keep(
    session: Session, key: bytes, user_id: str, provider_id: str, tokens: UpstreamTokens, now: int
) -> None:
    """Store (or replace) a person's tokens at a provider."""
    row = session.get(UpstreamToken, (user_id, provider_id))
    if row is None:
        row = UpstreamToken(user_id=user_id, provider_id=provider_id, sealed="", updated_at=now)
    row.sealed = seal(key, user_id, provider_id, tokens)
    row.expires_at = tokens.expires_at
    row.updated_at = now
    session.add(row)


def kept(session: Session, key: bytes, user_id: str, provider_id: str) -> UpstreamTokens | None:
    found = kept_sealed(session, key, user_id, provider_id)
    return found[0] if found is not None else None


def kept_sealed(
    session: Session, key: bytes, user_id: str, provider_id: str
) -> tuple[UpstreamTokens, str] | None:
    """A person's tokens at a provider with the sealed value they were read from (which names
    this version of the row: every seal has a fresh nonce)."""
    row = session.get(UpstreamToken, (user_id, provider_id))
    if row is None:
        return None
    tokens = unseal(key, user_id, provider_id, row.sealed)
    return (tokens, row.sealed) if tokens is not None else None


def replace_if_unchanged(
    session: Session,
    key: bytes,
    user_id: str,
    provider_id: str,
    sealed: str,
    tokens: UpstreamTokens,
    now: int,
) -> bool:
    """Replace a person's tokens at a provider only if the row still holds ``sealed`` (what
    the refresh started from): tokens deleted meanwhile (the person revoked the application,
    removed the provider or the account) stay deleted. Whether the row was replaced."""
    result = session.execute(
        update(_TABLE)
        .where(
            _TABLE.c.user_id == user_id,
            _TABLE.c.provider_id == provider_id,
            _TABLE.c.sealed == sealed,
        )
        .values(
            sealed=seal(key, user_id, provider_id, tokens),
            expires_at=tokens.expires_at,
            updated_at=now,
        )
    )
    return int(getattr(result, "rowcount", 0) or 0) == 1


def forget_if_unchanged(session: Session, user_id: str, provider_id: str, sealed: str) -> bool:
    """Delete a person's tokens at a provider only if the row still holds ``sealed``: a refresh
    refused because another request (or replica) has just rotated the refresh token must not
    delete the tokens that request kept. Whether the row went."""
    result = session.execute(
        delete(_TABLE).where(
            _TABLE.c.user_id == user_id,
            _TABLE.c.provider_id == provider_id,
            _TABLE.c.sealed == sealed,
        )
    )
    return int(getattr(result, "rowcount", 0) or 0) == 1


def forget(session: Session, user_id: str, provider_id: str | None = None) -> int:
    """Delete a person's tokens (at one provider, or all); how many rows went."""
    statement = delete(_TABLE).where(_TABLE.c.user_id == user_id)
    if provider_id is not None:
        statement = statement.where(_TABLE.c.provider_id == provider_id)
    result = session.execute(statement)
    return int(getattr(result, "rowcount", 0) or 0)
