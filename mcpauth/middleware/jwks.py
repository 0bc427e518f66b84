"""The authorization server's JSON Web Key Set: discovered, fetched and kept by the one
key-set cache (:mod:`mcpauth.key_sets`), over the middleware's own HTTP client.

Keys are reused as long as the JWKS response's HTTP caching headers allow, within bounds; an
unknown ``kid`` refetches at most once per interval; while no keys are held, one
discovery-and-JWKS fetch is in flight at a time (concurrent callers share its outcome), each
fetch has a deadline, and after a failure no new fetch starts for a growing, bounded delay
(``failure_backoff`` doubling up to ``max_failure_backoff``). Callers in that window get a
:class:`TemporarilyUnavailable` at once, with ``Retry-After`` and a description that names no
URL; the details are logged.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import httpx2

from mcpauth import jwt
from mcpauth.caching import wall_clock
from mcpauth.errors import ConfigurationError, FetchError
from mcpauth.key_sets import Fetched, KeySetCache, KeySetPolicy
from mcpauth.middleware._discovery import discover_metadata, fetch_json
from mcpauth.middleware._http import AsyncClosing, LazyClient

__all__ = ["JWKSCache"]

UNAVAILABLE = "The authorization server's signing keys are unavailable; try again later"


class JWKSCache(AsyncClosing):
    """Verification keys of one issuer.

    ``jwks_uri`` is read from the issuer's metadata unless given. Keys are reused for the
    lifetime the JWKS response allows (``Cache-Control: max-age``; between
    ``min_refresh_interval`` and ``max_cache_seconds``, ``default_cache_seconds`` when it
    says nothing). A token naming an unknown ``kid`` triggers one refetch, and at most one per
    ``min_refresh_interval`` however many such tokens arrive. When a refetch fails, the last
    good keys stay in use. Without any keys, fetches are coalesced and back off after failures
    (module docstring); a fetch (discovery and JWKS) that takes longer than ``fetch_timeout``
    seconds fails. ``clock`` (seconds since the epoch; :func:`mcpauth.caching.wall_clock` by
    default) is injectable: every time the cache reads goes through it.

    ``http`` is yours to close; without it a client is created on the first fetch and closed
    by :meth:`aclose` (or ``async with``).
    """

    def __init__(
        self,
        issuer: str,
        *,
        http: httpx2.AsyncClient | None = None,
        jwks_uri: str | None = None,
        min_refresh_interval: float = 30.0,
        default_cache_seconds: float = 300.0,
        max_cache_seconds: float = 86400.0,
        failure_backoff: float = 1.0,
        max_failure_backoff: float = 60.0,
        fetch_timeout: float = 10.0,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.issuer = issuer
        self.jwks_uri = jwks_uri
        self.min_refresh_interval = min_refresh_interval
        self.default_cache_seconds = default_cache_seconds
        self.max_cache_seconds = max_cache_seconds
        self.fetch_count = 0
        self._client = LazyClient(http)
        policy = KeySetPolicy(
            unavailable=UNAVAILABLE,
            default_lifetime=default_cache_seconds,
            max_lifetime=max_cache_seconds,
            refetch_interval=min_refresh_interval,
            backoff=failure_backoff,
            max_backoff=max_failure_backoff,
            deadline=fetch_timeout,
            max_sources=1,
        )
        self._keys = KeySetCache(
            self._fetch,
            self._usable,
            policy,
            clock=clock or wall_clock,
            name="the authorization server's signing keys",
        )

    @property
    def http(self) -> httpx2.AsyncClient | None:
        """The HTTP client in use (``None`` until the first fetch when none was given)."""
        return self._client.current

    async def aclose(self) -> None:
        """Close the HTTP client created here, if any (a given one is left open)."""
        await self._client.aclose()

    async def keys(self) -> Mapping[str, jwt.VerificationKey]:
        """The current keys, fetching them when absent or stale.

        Raises:
            TemporarilyUnavailable: no keys could be fetched and none are cached.
        """
        return await self._keys.get(self.issuer)

    async def refresh_for_unknown_kid(self) -> Mapping[str, jwt.VerificationKey] | None:
        """Refetch because a token named an unknown ``kid``; ``None`` when a fetch happened
        less than ``min_refresh_interval`` ago (nothing new to learn).

        Raises:
            TemporarilyUnavailable: no keys could be fetched and none are cached.
        """
        return await self._keys.refresh(self.issuer)

    async def _fetch(self, issuer: str, requester: str) -> Fetched:
        http = self._client.get()
        try:
            if self.jwks_uri is None:
                metadata = await discover_metadata(http, issuer)
                if not metadata.jwks_uri:
                    raise FetchError(f"{issuer} publishes no jwks_uri")
                self.jwks_uri = metadata.jwks_uri
            self.fetch_count += 1
            document, headers = await fetch_json(http, self.jwks_uri)
        except ConfigurationError as exc:  # e.g. metadata naming a plain-http jwks_uri
            raise FetchError(str(exc)) from exc
        return Fetched(document, headers)

    def _usable(self, document: Mapping[str, Any]) -> dict[str, jwt.VerificationKey]:
        keys = jwt.key_set(document)
        if not keys:
            raise FetchError(f"{self.jwks_uri} holds no usable signing key")
        return keys
