"""Trusted identity providers for enterprise-managed authorization: their signing keys, from
an inline JWKS or a JWKS URL an administrator configured (cached five minutes, refetched early
when an unknown ``kid`` appears, at most once a minute)."""

from __future__ import annotations

import json
import threading
from typing import Any

import httpx

from mcpauth import jwt
from mcpauth.caching import ExpiringCache, wall_clock
from mcpauth.errors import InvalidGrant, OAuthError
from mcpauth.server.outbound import Outbound

CACHE_SECONDS = 300
REFETCH_INTERVAL = 60


class IdentityProviders:
    def __init__(self, configured: dict[str, str], *, outbound: Outbound | None = None) -> None:
        self._configured = dict(configured)
        self._outbound = outbound  # the operator's proxy and trust store (None: the defaults)
        self._cache: ExpiringCache[str, dict[str, jwt.VerificationKey]] = ExpiringCache(
            CACHE_SECONDS,
            max_entries=max(16, len(configured)),
            clock=wall_clock,
            keep_stale=True,
        )
        self._lock = threading.Lock()

    def is_trusted(self, issuer: str) -> bool:
        return issuer in self._configured

    def _fetch(self, source: str) -> dict[str, Any]:
        if source.lstrip().startswith("{"):
            document: Any = json.loads(source)
        else:
            route = self._outbound.httpx_options() if self._outbound else {}
            response = httpx.get(source, timeout=5.0, follow_redirects=False, **route)
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
        with self._lock:  # one fetch per process at a time
            cached = self._cache.get_stale(issuer)  # (keys, age), fresh or not
            if cached is not None:
                keys, age = cached
                fresh = age < CACHE_SECONDS
                may_refetch = age >= REFETCH_INTERVAL
                if fresh and not (refresh and may_refetch):
                    return keys
            try:
                keys = jwt.key_set(self._fetch(source))
            except (httpx.HTTPError, ValueError) as exc:
                if cached is not None:
                    return cached[0]  # the last good keys while the provider is unreachable
                raise InvalidGrant("The identity provider's keys cannot be loaded") from exc
            self._cache.put(issuer, keys)
            return keys

    def verify(
        self,
        assertion: str,
        issuer: str,
        *,
        typ: tuple[str, ...] | None,
        required: tuple[str, ...],
        what: str,
    ) -> dict[str, Any]:
        """The claims of ``assertion`` signed by ``issuer``'s keys (fetched again once, at most
        once a minute, when its ``kid`` is unknown: the issuer may have rotated); ``aud`` is
        left to the caller. ``what`` names the assertion in the errors.

        Raises:
            InvalidGrant: an unknown key after the refetch, or any other check failed.
        """
        for attempt in (False, True):
            try:
                return jwt.verify(
                    assertion,
                    self.keys(issuer, refresh=attempt),
                    issuer=issuer,
                    audience=None,
                    typ=typ,
                    required=required,
                )
            except jwt.UnknownKeyError:
                if attempt:
                    raise InvalidGrant(f"{what} is signed with an unknown key") from None
            except OAuthError as exc:
                raise InvalidGrant(f"{what} is invalid: {exc.description}") from exc
        raise InvalidGrant(f"{what} is invalid")  # pragma: no cover - the loop returns
