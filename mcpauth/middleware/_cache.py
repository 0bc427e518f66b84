"""Verified tokens by SHA-256 digest: bounded, least recently used out first, and never kept
past the token's expiry (or the verifier's ``cache_until``)."""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from typing import Any

from mcpauth.middleware.verifier import VerifiedToken


def token_digest(token: str) -> bytes:
    """SHA-256 of the token: the only form in which a token is kept (RS-18)."""
    return hashlib.sha256(token.encode()).digest()


def _cache_deadline(verified: VerifiedToken) -> float | None:
    bounds = [b for b in (verified.expires_at, verified.cache_until) if b is not None]
    return float(min(bounds)) if bounds else None


class TokenCache:
    """``digest → (VerifiedToken, user)`` with at most ``max_entries`` entries; ``user`` is the
    object built for ``scope["user"]``, kept so that a warm request builds nothing."""

    def __init__(self, max_entries: int = 10_000) -> None:
        self.max_entries = max_entries
        self._entries: OrderedDict[bytes, tuple[float, VerifiedToken, Any]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, digest: bytes) -> tuple[VerifiedToken, Any] | None:
        """The cached result for ``digest`` if it has not expired."""
        entry = self._entries.get(digest)
        if entry is None:
            return None
        deadline, verified, user = entry
        if time.time() >= deadline:
            del self._entries[digest]
            return None
        self._entries.move_to_end(digest)
        return verified, user

    def put(self, digest: bytes, verified: VerifiedToken, user: Any) -> None:
        """Remember ``verified`` until it expires; results without any expiry are not kept."""
        deadline = _cache_deadline(verified)
        if deadline is None or deadline <= time.time() or self.max_entries <= 0:
            return
        self._entries[digest] = (deadline, verified, user)
        self._entries.move_to_end(digest)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)
