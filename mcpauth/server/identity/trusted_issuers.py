"""Trusted identity providers for enterprise-managed authorization: their signing keys, from
an inline JWKS or a JWKS URL an administrator configured (cached five minutes, refetched early
when an unknown ``kid`` appears, at most once a minute)."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import httpx

from mcpauth import jwt
from mcpauth.errors import InvalidGrant

CACHE_SECONDS = 300
REFETCH_INTERVAL = 60


class IdentityProviders:
    def __init__(self, configured: dict[str, str]) -> None:
        self._configured = dict(configured)
        self._cache: dict[str, tuple[float, dict[str, jwt.VerificationKey]]] = {}
        self._lock = threading.Lock()

    def is_trusted(self, issuer: str) -> bool:
        return issuer in self._configured

    def _fetch(self, source: str) -> dict[str, Any]:
        if source.lstrip().startswith("{"):
            document: Any = json.loads(source)
        else:
            response = httpx.get(source, timeout=5.0, follow_redirects=False)
            response.raise_for_status()
            document = response.json()
        if not isinstance(document, dict):
            raise ValueError("a JWKS must be a JSON object")
        return document

    def keys(self, issuer: str, *, refresh: bool = False) -> dict[str, jwt.VerificationKey]:
        """The issuer's verification keys.

        Raises:
            InvalidGrant: the issuer is not trusted or its keys cannot be loaded.
        """
        source = self._configured.get(issuer)
        if source is None:
            raise InvalidGrant("The assertion's issuer is not a trusted identity provider")
        now = time.time()
        with self._lock:
            cached = self._cache.get(issuer)
            fresh = cached is not None and now - cached[0] < CACHE_SECONDS
            may_refetch = cached is None or now - cached[0] >= REFETCH_INTERVAL
            if cached is not None and (fresh and not (refresh and may_refetch)):
                return cached[1]
            try:
                keys = jwt.key_set(self._fetch(source))
            except (httpx.HTTPError, ValueError) as exc:
                if cached is not None:
                    return cached[1]
                raise InvalidGrant("The identity provider's keys cannot be loaded") from exc
            self._cache[issuer] = (now, keys)
            return keys
