"""How the middleware keeps verified tokens: in :class:`~mcpauth.caching.ExpiringCache` (bounded,
least recently used out first), keyed by the token's SHA-256 digest, each entry until the
token's ``exp`` or the verifier's ``cache_until``, whichever comes first (both Unix times)."""

from __future__ import annotations

import hashlib

from mcpauth.caching import ExpiringCache, wall_clock
from mcpauth.middleware.identity import Caller
from mcpauth.middleware.verifier import VerifiedToken

TokenCache = ExpiringCache[bytes, Caller]


def token_digest(token: str) -> bytes:
    """SHA-256 of the token: the only form in which a token is kept (RS-18)."""
    return hashlib.sha256(token.encode()).digest()


def token_cache(max_entries: int) -> TokenCache:
    """``digest → Caller``: the verified token with what is built for the application
    (``scope["user"]``), kept so that a warm request builds nothing. A put without a deadline
    keeps nothing."""
    return ExpiringCache(0.0, max_entries, clock=wall_clock)


def deadline(verified: VerifiedToken) -> float | None:
    """Until when a verdict may be reused: the token's ``exp`` or the verifier's
    ``cache_until``, whichever comes first; ``None`` (not at all) without either."""
    bounds = [b for b in (verified.expires_at, verified.cache_until) if b is not None]
    return float(min(bounds)) if bounds else None


def remember(cache: TokenCache, digest: bytes, caller: Caller) -> None:
    """Keep ``caller`` until its :func:`deadline`; a result without one is not kept."""
    until = deadline(caller.token)
    if until is not None:
        cache.put(digest, caller, expires_at=until)
