"""What the replicas of a resource share on Redis (:class:`~mcpauth.middleware.SharedState`):
each DPoP proof's single use, the rate counts, the tool-call buckets, and token verdicts.
Imported only when a middleware is given a shared state (it needs the ``redis`` package, the
``shared-state`` extra).

One client, and so one connection pool, per middleware (a process runs one). Every call is
bounded by the state's ``timeout`` (connecting, waiting for a free connection and the answer
together, with no retry), and any failure of Redis is :class:`TemporarilyUnavailable` with
``Retry-After``: what needs Redis is refused with 503, never passed.

Keys are ``<prefix>:<resource digest>:<kind>:<name>``, and no key or value holds a token or a
proof: a proof's key is the digest of its key thumbprint and ``jti``
(:attr:`~mcpauth.dpop.DPoPProof.replay_key`), a caller's the digest of its issuer, subject and
client, a bucket's the digest of its user (and tool), a verdict's the SHA-256 of the token, and
a verdict's value is what the verifier returned about the token
(:class:`~mcpauth.middleware.VerifiedToken`), not the token.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import orjson
import redis.asyncio as redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from mcpauth.caching import wall_clock
from mcpauth.errors import TemporarilyUnavailable
from mcpauth.middleware._cache import deadline
from mcpauth.middleware.options import Rate, SharedState
from mcpauth.middleware.verifier import VerifiedToken

__all__ = [
    "RedisRateCounter",
    "RedisReplayCache",
    "RedisState",
    "RedisTokenBuckets",
    "RedisVerdicts",
]

logger = logging.getLogger("mcpauth.middleware")
T = TypeVar("T")

UNAVAILABLE = "The shared state is unavailable; try again shortly"
RETRY_AFTER = "1"
MAX_CONNECTIONS = 64
_VERDICT_VERSION = 1
# INCR and, on a window's first request, its expiry: one atomic step (a script runs alone)
_HIT = """
local count = redis.call('INCR', KEYS[1])
local left = redis.call('PTTL', KEYS[1])
if left < 0 then
    redis.call('PEXPIRE', KEYS[1], ARGV[1])
    left = tonumber(ARGV[1])
end
return {count, left}
"""
# Token buckets, all or none, on the server's clock (every replica's bucket refills alike):
# ARGV holds each key's capacity and tokens per millisecond. A bucket is a hash of its tokens
# and when they were counted, kept until it would be full again (a missing one is full).
_TAKE = """
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local levels = {}
for i, key in ipairs(KEYS) do
    local capacity = tonumber(ARGV[2 * i - 1])
    local rate = tonumber(ARGV[2 * i])
    local kept = redis.call('HMGET', key, 'tokens', 'at')
    local tokens = capacity
    if kept[1] then
        tokens = math.min(capacity, tonumber(kept[1]) + math.max(0, now - tonumber(kept[2])) * rate)
    end
    if tokens < 1 then
        return {i, math.ceil((1 - tokens) / rate)}
    end
    levels[i] = tokens - 1
end
for i, key in ipairs(KEYS) do
    local rate = tonumber(ARGV[2 * i])
    redis.call('HSET', key, 'tokens', tostring(levels[i]), 'at', now)
    redis.call('PEXPIRE', key, math.ceil((tonumber(ARGV[2 * i - 1]) - levels[i]) / rate) + 1)
end
return {0, 0}
"""


class RedisState:
    """The Redis client of one middleware and the keys of its resource; the stores below use
    it. The client is made on first use (in the server's event loop) and closed by
    :meth:`aclose`; a later call makes a new one."""

    def __init__(
        self, config: SharedState, resource: str, *, clock: Callable[[], float] = wall_clock
    ) -> None:
        self.config = config
        self.clock = clock
        resource_tag = hashlib.sha256(resource.encode()).hexdigest()[:16]
        self._namespace = f"{config.prefix}:{resource_tag}"
        self._client: redis.Redis | None = None

    def key(self, kind: str, name: str) -> str:
        return f"{self._namespace}:{kind}:{name}"

    def client(self) -> redis.Redis:
        if self._client is None:
            timeout = self.config.timeout
            pool = redis.BlockingConnectionPool.from_url(
                self.config.url,
                max_connections=MAX_CONNECTIONS,
                timeout=timeout,
                socket_timeout=timeout,
                socket_connect_timeout=timeout,
                retry=Retry(NoBackoff(), 0),
            )
            self._client = redis.Redis.from_pool(pool)
        return self._client

    async def call(self, operation: Callable[[redis.Redis], Awaitable[T]]) -> T:
        """``operation`` on the client, within the timeout.

        Raises:
            TemporarilyUnavailable: Redis failed, refused or did not answer in time.
        """
        try:
            async with asyncio.timeout(self.config.timeout):
                return await operation(self.client())
        except (RedisError, OSError, TimeoutError) as exc:
            # the class and Redis's own words: never the URL, which may hold a password
            logger.warning("the shared state cannot be used: %s: %s", type(exc).__name__, exc)
            raise TemporarilyUnavailable(UNAVAILABLE, headers={"Retry-After": RETRY_AFTER}) from exc

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()


def _milliseconds(seconds: float) -> int:
    return max(1, math.ceil(seconds * 1000))


class RedisReplayCache:
    """The DPoP single-use record (:class:`~mcpauth.dpop.ReplayCache`) on Redis: the first
    ``SET NX`` of a proof's key wins, at whichever replica; the key lives until the proof
    could no longer be accepted."""

    def __init__(self, state: RedisState) -> None:
        self._state = state

    async def first_use(self, key: str, expires_at: float) -> bool:
        """Record ``key`` until ``expires_at``; False if it is already recorded (a replay).

        Raises:
            TemporarilyUnavailable: Redis cannot say (the proof is refused with 503).
        """
        name = self._state.key("dpop", key)
        ttl = _milliseconds(expires_at - self._state.clock())
        return bool(await self._state.call(lambda r: r.set(name, b"1", nx=True, px=ttl)))


class RedisRateCounter:
    """Rate counts on Redis (``_rate_limits.RateCounter``): ``INCR`` and the window's expiry in
    one script, so that every replica counts into the same window."""

    def __init__(self, state: RedisState) -> None:
        self._state = state
        self._script: Any = None

    async def hit(self, key: str, window: float) -> tuple[int, float]:
        name = self._state.key("rate", key)
        ttl = _milliseconds(window)

        async def run(client: redis.Redis) -> Any:
            if self._script is None:
                self._script = client.register_script(_HIT)
            return await self._script(keys=[name], args=[ttl], client=client)

        count, left = await self._state.call(run)
        return int(count), int(left) / 1000


class RedisTokenBuckets:
    """Tool-call buckets on Redis (``_token_buckets.TokenBuckets``): read, refilled and taken
    from in one script on the server's clock, so that every replica takes from the same
    buckets."""

    def __init__(self, state: RedisState) -> None:
        self._state = state
        self._script: Any = None

    async def take(self, buckets: Sequence[tuple[str, Rate]]) -> tuple[int, float] | None:
        keys = [self._state.key("bucket", key) for key, _ in buckets]
        args: list[str] = []
        for _, rate in buckets:
            args += [str(rate.capacity), repr(rate.refill / 1000)]

        async def run(client: redis.Redis) -> Any:
            if self._script is None:
                self._script = client.register_script(_TAKE)
            return await self._script(keys=keys, args=args, client=client)

        refused, wait = await self._state.call(run)
        if int(refused) == 0:
            return None
        return int(refused) - 1, int(wait) / 1000


class RedisVerdicts:
    """Token verdicts on Redis, shared by the replicas: a verdict one replica obtained (by
    introspection) is reused by the others until its own deadline, the one each replica
    keeps it to in memory as well, so a revocation is seen everywhere once that deadline
    passes. Keyed by the token's SHA-256; refusals are not kept."""

    def __init__(self, state: RedisState) -> None:
        self._state = state

    async def get(self, digest: bytes) -> VerifiedToken | None:
        """The verdict kept for the token of ``digest``; ``None`` when there is none (or what
        is kept cannot be read, or is past its deadline by this replica's clock).

        Raises:
            TemporarilyUnavailable: Redis cannot say.
        """
        name = self._state.key("verdict", digest.hex())
        value = await self._state.call(lambda r: r.get(name))
        if value is None:
            return None
        try:
            verified = _decode(value)
        except (ValueError, TypeError, KeyError):
            logger.warning("a shared token verdict cannot be read; verifying the token again")
            return None
        until = deadline(verified)
        return verified if until is not None and until > self._state.clock() else None

    async def put(self, digest: bytes, verified: VerifiedToken) -> None:
        """Keep ``verified`` for the token of ``digest`` until its deadline (the one
        :func:`~mcpauth.middleware._cache.deadline` gives). A verdict without a deadline, or
        whose claims are not JSON, is not kept.

        Raises:
            TemporarilyUnavailable: Redis cannot keep it.
        """
        until = deadline(verified)
        if until is None:
            return
        try:
            value = _encode(verified)
        except TypeError:
            return
        name = self._state.key("verdict", digest.hex())
        ttl = _milliseconds(until - self._state.clock())
        await self._state.call(lambda r: r.set(name, value, px=ttl))


def _encode(verified: VerifiedToken) -> bytes:
    return orjson.dumps(
        {
            "v": _VERDICT_VERSION,
            "subject": verified.subject,
            "client_id": verified.client_id,
            "scopes": list(verified.scopes),
            "expires_at": verified.expires_at,
            "issuer": verified.issuer,
            "resource": verified.resource,
            "claims": dict(verified.claims),
            "cache_until": verified.cache_until,
        }
    )


def _decode(value: bytes | str) -> VerifiedToken:
    data = orjson.loads(value)
    if not isinstance(data, dict) or data.get("v") != _VERDICT_VERSION:
        raise ValueError("not a verdict of this version")
    scopes, claims = data["scopes"], data["claims"]
    subject, issuer = data["subject"], data["issuer"]
    if not (
        isinstance(scopes, list)
        and all(isinstance(s, str) for s in scopes)
        and isinstance(claims, dict)
        and isinstance(data["client_id"], str)
        and isinstance(data["resource"], str)
        and isinstance(subject, str | None)
        and isinstance(issuer, str | None)
        and isinstance(data["expires_at"], int | None)
        and isinstance(data["cache_until"], int | float | None)
    ):
        raise ValueError("a field of the wrong type")
    return VerifiedToken(
        subject=subject,
        client_id=data["client_id"],
        scopes=tuple(scopes),
        expires_at=data["expires_at"],
        issuer=issuer,
        resource=data["resource"],
        claims=claims,
        cache_until=data["cache_until"],
    )
