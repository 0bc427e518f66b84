"""Caching shared by the three parts: HTTP freshness (RFC 9111 §4.2.1) for the documents mcpauth
fetches and keeps for a while (client metadata documents on the server, every key set through
:mod:`mcpauth.key_sets`), each caller applying its own default and bounds to what the response
says; and :class:`ExpiringCache`, the one in-memory cache with per-entry expiry."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from email.utils import parsedate_to_datetime
from typing import Generic, TypeVar, cast


def cache_directives(header: str) -> dict[str, str]:
    """``Cache-Control`` directives by lowercase name (the first of a repeated one wins)."""
    found: dict[str, str] = {}
    for part in header.split(","):
        name, _, value = part.strip().partition("=")
        if name:
            found.setdefault(name.lower(), value.strip().strip('"'))
    return found


def _http_date(value: str | None) -> float | None:
    try:
        return parsedate_to_datetime(value).timestamp() if value else None
    except (TypeError, ValueError):
        return None


def freshness_lifetime(headers: Mapping[str, str], now: float) -> float | None:
    """Seconds a response may be reused according to its own headers: 0 for ``no-store`` or
    ``no-cache``, else ``s-maxage`` (these caches serve many users), ``max-age``, or
    ``Expires`` less ``Date``; an invalid value counts as already expired (§5.3). None when
    the response says nothing, so the caller's default applies."""
    directives = cache_directives(headers.get("cache-control", ""))
    if "no-store" in directives or "no-cache" in directives:
        return 0.0
    for name in ("s-maxage", "max-age"):
        if name in directives:
            value = directives[name]
            return float(value) if value.isascii() and value.isdigit() else 0.0
    if "expires" not in headers:
        return None
    expires = _http_date(headers.get("expires"))
    if expires is None:
        return 0.0
    return expires - (_http_date(headers.get("date")) or now)


K = TypeVar("K")
V = TypeVar("V")


_MISSING = object()


def _monotonic() -> float:
    return time.monotonic()


def wall_clock() -> float:
    """Unix time, looked up on each call (so freezegun can move it): for entries whose expiry
    comes from the outside world (a token's ``exp``, an HTTP date)."""
    return time.time()


class ExpiringCache(Generic[K, V]):
    """The one in-memory cache of mcpauth: thread-safe, at most ``max_entries`` entries (least
    recently used out first), each entry with its own expiry. ``ttl`` is the default lifetime;
    :meth:`put` may give an entry another one, or an absolute deadline on ``clock``.

    An expired entry is dropped when :meth:`get` meets it, unless ``keep_stale``: then it stays
    (until evicted or replaced) for :meth:`get_stale`, so a caller can fall back to its last
    good value when a refresh fails."""

    def __init__(
        self,
        ttl: float,
        max_entries: int = 10_000,
        *,
        clock: Callable[[], float] = _monotonic,
        keep_stale: bool = False,
    ) -> None:
        self.ttl = ttl
        self.max_entries = max_entries
        self._clock = clock
        self._keep_stale = keep_stale
        self._entries: OrderedDict[K, tuple[float, float, V]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def now(self) -> float:
        return self._clock()

    def get(self, key: K) -> V | None:
        """The value of an unexpired entry, or None."""
        now = self._clock()
        with self._lock:  # what _fresh does, inline: a hot path (a token cache lookup)
            entry = self._entries.get(key)
            if entry is None:
                return None
            if entry[0] <= now:
                if not self._keep_stale:
                    del self._entries[key]
                return None
            self._entries.move_to_end(key)
            return entry[2]

    def _fresh(self, key: K) -> object:
        now = self._clock()
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return _MISSING
            if entry[0] <= now:
                if not self._keep_stale:
                    del self._entries[key]
                return _MISSING
            self._entries.move_to_end(key)
            return entry[2]

    def get_stale(self, key: K) -> tuple[V, float] | None:
        """The entry's value and its age in seconds, expired or not; None if there is none."""
        with self._lock:
            entry = self._entries.get(key)
            return None if entry is None else (entry[2], self._clock() - entry[1])

    def put(
        self, key: K, value: V, *, ttl: float | None = None, expires_at: float | None = None
    ) -> None:
        """Keep ``value`` for ``ttl`` seconds (default: the cache's), or until ``expires_at``
        on the cache's clock. An entry that would already be expired is not kept."""
        now = self._clock()
        lifetime = self.ttl if ttl is None else ttl
        deadline = expires_at if expires_at is not None else now + lifetime
        with self._lock:
            if deadline <= now or self.max_entries <= 0:
                self._entries.pop(key, None)
                return
            self._entries[key] = (deadline, now, value)
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def get_or_load(self, key: K, load: Callable[[], V]) -> V:
        """The cached value (None too, if that is what was loaded), or ``load()``'s, kept for
        the default lifetime."""
        found = self._fresh(key)
        if found is not _MISSING:
            return cast(V, found)
        value = load()
        self.put(key, value)
        return value

    def forget(self, key: K) -> None:
        with self._lock:
            self._entries.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
