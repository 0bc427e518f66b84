"""The authorization server's JSON Web Key Set: discovered, fetched, cached per HTTP caching
headers, and refetched on an unknown ``kid`` at most once per interval.

While no keys are held, fetching is coalesced and backs off: one discovery-and-JWKS fetch is in
flight at a time (concurrent callers wait for it and share its outcome), and after a failure no
new fetch starts for a growing, bounded delay (``failure_backoff`` doubling up to
``max_failure_backoff``). Callers in that window get a :class:`TemporarilyUnavailable` at
once, with ``Retry-After`` and a description that names no URL; the details are logged.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

import httpx2

from mcpauth import jwt
from mcpauth.caching import ExpiringCache, freshness_lifetime
from mcpauth.errors import ConfigurationError, FetchError
from mcpauth.middleware._discovery import FetchGate, discover_metadata, fetch_json, unavailable
from mcpauth.middleware._http import AsyncClosing, LazyClient

__all__ = ["JWKSCache"]

logger = logging.getLogger("mcpauth.middleware")
UNAVAILABLE = "The authorization server's signing keys are unavailable; try again later"
_KEYS = "keys"  # the one entry: this issuer's current key set


def cache_lifetime(
    headers: httpx2.Headers, *, now: float, default: float, floor: float, ceiling: float
) -> float:
    """Seconds a JWKS response may be reused (its HTTP freshness, ``default`` when it states
    none), clamped to [floor, ceiling]: even ``no-store`` keys are kept ``floor`` seconds, or
    every token would fetch them."""
    lifetime = freshness_lifetime(headers, now)
    return min(max(default if lifetime is None else lifetime, floor), ceiling)


class JWKSCache(AsyncClosing):
    """Verification keys of one issuer.

    ``jwks_uri`` is read from the issuer's metadata unless given. Keys are reused for the
    lifetime the JWKS response allows (``Cache-Control: max-age``; between
    ``min_refresh_interval`` and ``max_cache_seconds``). A token naming an unknown ``kid``
    triggers one refetch, and at most one per ``min_refresh_interval`` however many such tokens
    arrive. When a refetch fails, the last good keys stay in use. Without any keys, fetches are
    coalesced and back off after failures (module docstring). ``clock`` (seconds since the
    epoch; :func:`mcpauth.caching.wall_clock` by default) is injectable: every time the cache reads
    goes through it.

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
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.issuer = issuer
        self.jwks_uri = jwks_uri
        self.min_refresh_interval = min_refresh_interval
        self.default_cache_seconds = default_cache_seconds
        self.max_cache_seconds = max_cache_seconds
        self._client = LazyClient(http)
        self._last_attempt = float("-inf")
        self.fetch_count = 0
        self._gate = FetchGate(
            backoff=failure_backoff, max_backoff=max_failure_backoff, clock=clock
        )
        # The last good keys stay (stale) after their lifetime: the fallback when a refetch fails.
        self._cache: ExpiringCache[str, dict[str, jwt.VerificationKey]] = ExpiringCache(
            default_cache_seconds, max_entries=1, clock=self._gate.now, keep_stale=True
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
        fresh = self._cache.get(_KEYS)
        if fresh is not None:
            return fresh
        self._check_backoff()
        async with self._gate.lock:
            fresh = self._cache.get(_KEYS)
            if fresh is not None:
                return fresh
            return await self._fetch_or_stale()

    async def refresh_for_unknown_kid(self) -> Mapping[str, jwt.VerificationKey] | None:
        """Refetch because a token named an unknown ``kid``; ``None`` when a fetch happened
        less than ``min_refresh_interval`` ago (nothing new to learn).

        Raises:
            TemporarilyUnavailable: no keys could be fetched and none are cached.
        """
        async with self._gate.lock:
            if self._now() - self._last_attempt < self.min_refresh_interval:
                return None
            return await self._fetch_or_stale()

    def _now(self) -> float:
        return self._gate.now()

    def _stale(self) -> dict[str, jwt.VerificationKey] | None:
        held = self._cache.get_stale(_KEYS)
        return None if held is None else held[0]

    def _check_backoff(self) -> None:
        """Without keys, refuse at once while a failure's back-off lasts."""
        if self._stale() is None:
            self._gate.check()

    async def _fetch_or_stale(self) -> Mapping[str, jwt.VerificationKey]:
        now = self._now()
        stale = self._stale()
        if stale is not None and now - self._last_attempt < self.min_refresh_interval:
            return stale
        # Callers that queued on the lock behind a failed fetch share its outcome.
        self._check_backoff()
        self._last_attempt = now
        try:
            keys = await self._fetch()
        except FetchError as exc:
            delay = self._gate.failed()
            logger.warning(
                "cannot fetch the signing keys of %s (failure %d, next try in %.0fs): %s",
                self.issuer, self._gate.failures, delay, exc.message,
            )  # fmt: skip
            if stale is None:
                raise unavailable(delay, UNAVAILABLE) from exc
            return stale
        self._gate.succeeded()
        return keys

    async def _fetch(self) -> dict[str, jwt.VerificationKey]:
        try:
            return await self._fetch_unchecked()
        except ConfigurationError as exc:  # e.g. metadata naming a plain-http jwks_uri
            raise FetchError(str(exc)) from exc

    async def _fetch_unchecked(self) -> dict[str, jwt.VerificationKey]:
        http = self._client.get()
        if self.jwks_uri is None:
            metadata = await discover_metadata(http, self.issuer)
            if not metadata.jwks_uri:
                raise FetchError(f"{self.issuer} publishes no jwks_uri")
            self.jwks_uri = metadata.jwks_uri
        self.fetch_count += 1
        document, headers = await fetch_json(http, self.jwks_uri)
        keys = jwt.key_set(document)
        if not keys:
            raise FetchError(f"{self.jwks_uri} holds no usable signing key")
        lifetime = cache_lifetime(
            headers,
            now=self._gate.now(),
            default=self.default_cache_seconds,
            floor=self.min_refresh_interval,
            ceiling=self.max_cache_seconds,
        )
        self._cache.put(_KEYS, keys, ttl=lifetime)
        return keys
