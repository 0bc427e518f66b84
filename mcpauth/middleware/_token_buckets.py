"""Per-user and per-tool limits on tool calls (:attr:`~mcpauth.middleware.Limits.user_rate`,
:attr:`~mcpauth.middleware.Limits.tool_rates`): token buckets, kept in this process
(:class:`MemoryTokenBuckets`) or, for every replica at once, in Redis
(``_redis.RedisTokenBuckets``). A user is the issuer and subject of its token (the client when
there is no subject), whatever client it calls through; a bucket's key is a digest, so no user
id or tool name is kept in the clear.

A call takes one token from its user's bucket and one from its (user, tool) bucket, both or
neither: a call refused by one limit costs nothing from the other. Over a limit the call gets
429 with ``Retry-After`` (the seconds until a token is back); when the shared buckets cannot be
reached, 503 with ``Retry-After``, never a pass."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

import orjson

from mcpauth.caching import wall_clock
from mcpauth.errors import TemporarilyUnavailable
from mcpauth.middleware._rate_limits import CANNOT_COUNT
from mcpauth.middleware.options import ANY_TOOL, Rate

__all__ = ["MemoryTokenBuckets", "TokenBuckets", "ToolLimiter"]

Bucket = tuple[str, Rate]


class TokenBuckets(Protocol):
    """Where the buckets are kept."""

    async def take(self, buckets: Sequence[Bucket]) -> tuple[int, float] | None:
        """One token from each of ``buckets`` (key and rate), all or none: ``None`` when they
        were taken, else the index of the first bucket that has none and the seconds until it
        has one. A bucket never seen is full.

        Raises:
            TemporarilyUnavailable: the buckets cannot be reached (shared ones are down).
        """
        ...


class MemoryTokenBuckets:
    """The buckets of one process, at most ``max_keys`` of them: past that, the one used least
    recently is dropped (its user starts again with a full bucket: a bound on memory, met only
    by that many distinct users with valid tokens calling at once)."""

    def __init__(self, max_keys: int = 100_000, *, clock: Callable[[], float] = wall_clock) -> None:
        if max_keys < 1:
            raise ValueError("max_keys must be at least 1")
        self._max = max_keys
        self._clock = clock
        self._levels: dict[str, tuple[float, float]] = {}  # key -> (tokens, when), oldest first

    def __len__(self) -> int:
        return len(self._levels)

    async def take(self, buckets: Sequence[Bucket]) -> tuple[int, float] | None:
        now = self._clock()
        levels = []
        for index, (key, rate) in enumerate(buckets):
            tokens = float(rate.capacity)
            kept = self._levels.get(key)
            if kept is not None:
                tokens = min(tokens, kept[0] + max(0.0, now - kept[1]) * rate.refill)
            if tokens < 1:
                return index, (1 - tokens) / rate.refill
            levels.append(tokens)
        for (key, _), tokens in zip(buckets, levels, strict=True):
            self._levels.pop(key, None)  # back in at the end: the most recently used
            if len(self._levels) >= self._max:
                del self._levels[next(iter(self._levels))]
            self._levels[key] = (tokens - 1, now)
        return None


def _digest(*parts: str | None) -> str:
    return hashlib.sha256(orjson.dumps(parts)).hexdigest()


class ToolLimiter:
    """``user_rate`` and ``tool_rates`` (:class:`~mcpauth.middleware.Limits`) over ``buckets``."""

    def __init__(
        self,
        buckets: TokenBuckets,
        user_rate: Rate | None,
        tool_rates: Mapping[str, Rate] | None,
    ) -> None:
        self.buckets = buckets
        self.user_rate = user_rate
        self.tool_rates = dict(tool_rates or {})

    def _buckets(self, issuer: str | None, user: str, tool: str) -> list[tuple[str, Rate, str]]:
        found = []
        if self.user_rate is not None:
            found.append((_digest("user", issuer, user), self.user_rate, "user"))
        rate = self.tool_rates.get(tool, self.tool_rates.get(ANY_TOOL))
        if rate is not None:
            found.append((_digest("tool", issuer, user, tool), rate, "tool"))
        return found

    async def refusal(
        self, issuer: str | None, user: str, tool: str
    ) -> tuple[int, str, str] | None:
        """Take a call of ``tool`` by ``user`` (of ``issuer``): ``None`` within the limits, else
        the refusal's ``(status, which, Retry-After)``: 429 and ``"user"`` or ``"tool"`` over a
        limit, 503 and the message to show when the buckets cannot be reached."""
        found = self._buckets(issuer, user, tool)
        if not found:
            return None
        try:
            refused = await self.buckets.take([(key, rate) for key, rate, _ in found])
        except TemporarilyUnavailable as exc:
            return 503, CANNOT_COUNT, exc.headers.get("Retry-After", "1")
        if refused is None:
            return None
        index, wait = refused
        return 429, found[index][2], str(max(1, math.ceil(wait)))
