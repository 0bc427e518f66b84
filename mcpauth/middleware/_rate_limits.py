"""Per-caller request limits (:attr:`~mcpauth.middleware.Limits.rate_limit`): fixed windows
that start at a caller's first request, counted in this process (:class:`MemoryRateCounter`)
or, for every replica at once, in Redis (``_redis.RedisRateCounter``). A caller is the
issuer, subject and client of its token, kept only as a digest.

Over the limit the caller gets 429 with ``Retry-After`` (the seconds left in its window); when
the shared counter cannot count, 503 with ``Retry-After``, never a pass. Both in the JSON-RPC
shape the middleware answers MCP requests with."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from typing import Protocol

import orjson

from mcpauth.caching import wall_clock
from mcpauth.errors import TemporarilyUnavailable

__all__ = ["SERVER_BUSY", "MemoryRateCounter", "RateCounter", "RateLimiter", "caller_key"]

SERVER_BUSY = -32000  # JSON-RPC: an implementation-defined server error
TOO_MANY = "Too many requests; retry after the time in Retry-After"
CANNOT_COUNT = "Requests cannot be counted right now; retry shortly"


class RateCounter(Protocol):
    """Where a caller's requests are counted."""

    async def hit(self, key: str, window: float) -> tuple[int, float]:
        """Count one request of ``key``: the requests in its current window (this one
        included) and the seconds left in it; a window starts at a key's first request.

        Raises:
            TemporarilyUnavailable: the count cannot be made (a shared counter is down).
        """
        ...


def caller_key(principal: tuple[str | None, str | None, str]) -> str:
    """A caller's key: the SHA-256 of its (issuer, subject, client), so that no user id is
    kept in the clear."""
    return hashlib.sha256(orjson.dumps(principal)).hexdigest()


class MemoryRateCounter:
    """The counts of one process, for at most ``max_keys`` callers. Windows are all as long,
    so the order callers' windows started in is the order they end in: expired ones are
    dropped from the front as new ones start, and when ``max_keys`` windows are open the one
    that ends first is dropped (that caller starts afresh: a bound on memory, met only by
    that many distinct callers with valid tokens)."""

    def __init__(self, max_keys: int = 100_000, *, clock: Callable[[], float] = wall_clock) -> None:
        if max_keys < 1:
            raise ValueError("max_keys must be at least 1")
        self._max = max_keys
        self._clock = clock
        self._windows: dict[str, list[float]] = {}  # key -> [count, ends_at], oldest first

    def __len__(self) -> int:
        return len(self._windows)

    async def hit(self, key: str, window: float) -> tuple[int, float]:
        now = self._clock()
        entry = self._windows.get(key)
        if entry is None or entry[1] <= now:
            if entry is not None:
                del self._windows[key]  # its new window goes to the back
            self._make_room(now)
            entry = self._windows[key] = [0, now + window]
        entry[0] += 1
        return int(entry[0]), entry[1] - now

    def _make_room(self, now: float) -> None:
        windows = self._windows
        while windows:
            oldest = next(iter(windows))
            if windows[oldest][1] > now and len(windows) < self._max:
                return
            del windows[oldest]


class RateLimiter:
    """``limit`` requests per caller in each ``window`` seconds, counted by ``counter``."""

    def __init__(self, counter: RateCounter, limit: int, window: float) -> None:
        self.counter = counter
        self.limit = limit
        self.window = window

    async def refusal(
        self, principal: tuple[str | None, str | None, str]
    ) -> tuple[int, str, str] | None:
        """Count a request of ``principal``: ``None`` within the limit, else the refusal's
        ``(status, message, Retry-After)``: 429 over the limit, 503 when it cannot be counted."""
        try:
            count, left = await self.counter.hit(caller_key(principal), self.window)
        except TemporarilyUnavailable as exc:
            return 503, CANNOT_COUNT, exc.headers.get("Retry-After", "1")
        if count <= self.limit:
            return None
        return 429, TOO_MANY, str(max(1, math.ceil(left)))
