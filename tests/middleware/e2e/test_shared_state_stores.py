"""The Redis stores of ``shared_state`` against a real ``redis-server``: the DPoP single-use
record (first use wins across clients, keys live as long as the proof, resources apart), the
rate counter (atomic under concurrency, one window for every client, a new one after it ends),
token verdicts (round trip, deadline by the replica's clock, unreadable values ignored, no
token kept), and every failure a 503 with ``Retry-After``: Redis down, or a Redis that never
answers, within the timeout. Then two in-process middlewares with an introspection verifier:
one introspection serves both replicas, and a revocation is seen by both once the verdict's
deadline passes."""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from freezegun import freeze_time

from mcpauth.caching import wall_clock
from mcpauth.errors import TemporarilyUnavailable
from mcpauth.middleware import (
    IntrospectionVerifier,
    ProtectedResourceMiddleware,
    SharedState,
    VerifiedToken,
)
from mcpauth.middleware._redis import (
    RedisRateCounter,
    RedisReplayCache,
    RedisState,
    RedisVerdicts,
)
from tests.middleware.helpers import (
    INTROSPECTION_CLIENT,
    ISSUER,
    RESOURCE,
    FakeAuthorizationServer,
    RecordingApp,
    bearer,
    client_for,
)
from tests.redis_server import RedisServer, SilentListener, start_redis

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

# Where a test is not about the timeout, one that a loaded machine cannot reach by accident
GENEROUS = 2.0


@pytest.fixture
async def states(redis_url: str) -> AsyncIterator[Callable[..., RedisState]]:
    """``RedisState`` objects on the session's (emptied) server, each its own client, as
    separate replicas would have; closed after the test."""
    made: list[RedisState] = []

    def make(resource: str = RESOURCE, **options: Any) -> RedisState:
        options.setdefault("timeout", GENEROUS)
        state = RedisState(SharedState(redis_url, **options), resource)
        made.append(state)
        return state

    yield make
    for state in made:
        await state.aclose()


@pytest.fixture
def redis_client(redis_server: RedisServer) -> Iterator[Any]:
    with redis_server.client() as client:
        yield client


async def test_the_first_use_of_a_proof_wins_at_whichever_replica(
    states: Callable[..., RedisState], redis_client: Any
) -> None:
    one, other = RedisReplayCache(states()), RedisReplayCache(states())
    expires_at = wall_clock() + 60
    assert await one.first_use("proof-a", expires_at)
    assert not await other.first_use("proof-a", expires_at)
    assert not await one.first_use("proof-a", expires_at)
    assert await other.first_use("proof-b", expires_at)
    (name,) = [k for k in redis_client.keys("*") if k.endswith(b":dpop:proof-a")]
    assert 55_000 < redis_client.pttl(name) <= 60_000  # kept as long as the proof is good


async def test_the_proof_record_of_one_resource_is_not_another_s(
    states: Callable[..., RedisState],
) -> None:
    here = RedisReplayCache(states(RESOURCE))
    there = RedisReplayCache(states("https://other.example.com/mcp"))
    assert await here.first_use("proof", wall_clock() + 60)
    assert await there.first_use("proof", wall_clock() + 60)


async def test_a_proof_key_is_free_again_once_the_proof_has_expired(
    states: Callable[..., RedisState],
) -> None:
    record = RedisReplayCache(states())
    assert await record.first_use("short-lived", wall_clock() + 0.05)
    deadline = time.monotonic() + 5
    while not await record.first_use("short-lived", wall_clock() + 60):
        assert time.monotonic() < deadline, "the record never let the key go"
        await asyncio.sleep(0.02)


async def test_rate_counts_are_atomic_and_shared_by_every_client(
    states: Callable[..., RedisState],
) -> None:
    # 50 connections opened at once on a loaded machine: a timeout longer still
    one, other = RedisRateCounter(states(timeout=5)), RedisRateCounter(states(timeout=5))
    hits = await asyncio.gather(*(c.hit("caller", 60) for _ in range(25) for c in (one, other)))
    assert sorted(count for count, _ in hits) == list(range(1, 51))
    assert all(55 < left <= 60 for _, left in hits)
    assert (await one.hit("someone-else", 60))[0] == 1


async def test_a_rate_window_ends_and_the_next_one_starts_at_one(
    states: Callable[..., RedisState],
) -> None:
    counter = RedisRateCounter(states())
    assert (await counter.hit("caller", 0.1))[0] == 1
    assert (await counter.hit("caller", 0.1))[0] == 2
    deadline = time.monotonic() + 5
    while (await counter.hit("caller", 0.1))[0] != 1:
        assert time.monotonic() < deadline, "the window never ended"
        await asyncio.sleep(0.02)


def later(seconds: float) -> Any:
    """Wall-clock time moved ``seconds`` on (the event loop keeps real monotonic time)."""
    moment = datetime.fromtimestamp(time.time() + seconds, tz=UTC)
    return freeze_time(moment, real_asyncio=True)


def verdict(**changes: Any) -> VerifiedToken:
    values: dict[str, Any] = {
        "subject": "alice",
        "client_id": "client-1",
        "scopes": ("mcp:basic", "files:read"),
        "expires_at": int(wall_clock()) + 300,
        "issuer": ISSUER,
        "resource": RESOURCE,
        "claims": {"active": True, "sub": "alice", "nested": {"a": [1, 2]}},
        "cache_until": wall_clock() + 60,
    }
    values.update(changes)
    return VerifiedToken(**values)


async def test_a_verdict_comes_back_as_it_was_kept_until_its_deadline(
    states: Callable[..., RedisState], redis_client: Any
) -> None:
    one, other = RedisVerdicts(states()), RedisVerdicts(states())
    digest = hashlib.sha256(b"the token").digest()
    kept = verdict()
    await one.put(digest, kept)
    assert await other.get(digest) == kept
    assert await other.get(hashlib.sha256(b"another token").digest()) is None
    (name,) = redis_client.keys("*:verdict:*")
    assert name.endswith(digest.hex().encode())
    assert 55_000 < redis_client.pttl(name) <= 60_000  # cache_until, before exp
    with later(61):  # this replica's clock is past the deadline
        assert await other.get(digest) is None


async def test_verdicts_without_a_deadline_or_json_claims_are_not_kept(
    states: Callable[..., RedisState], redis_client: Any
) -> None:
    verdicts = RedisVerdicts(states())
    await verdicts.put(b"1" * 32, verdict(expires_at=None, cache_until=None))
    await verdicts.put(b"2" * 32, verdict(claims={"when": object()}))
    assert redis_client.keys("*") == []


async def test_a_verdict_kept_for_one_resource_is_not_another_s(
    states: Callable[..., RedisState],
) -> None:
    kept = verdict()
    await RedisVerdicts(states(RESOURCE)).put(b"5" * 32, kept)
    assert await RedisVerdicts(states("https://other.example.com/mcp")).get(b"5" * 32) is None
    assert await RedisVerdicts(states(RESOURCE)).get(b"5" * 32) == kept


@pytest.mark.parametrize(
    "stored",
    [b"not json", b"[]", b'{"v": 2}', b'{"v": 1, "scopes": "a b"}', b'{"v": 1, "subject": 1}'],
)
async def test_a_verdict_that_cannot_be_read_is_a_miss(
    states: Callable[..., RedisState], redis_client: Any, stored: bytes
) -> None:
    state = states()
    digest = b"3" * 32
    redis_client.set(state.key("verdict", digest.hex()), stored)
    assert await RedisVerdicts(state).get(digest) is None


async def test_every_store_says_503_with_retry_after_when_redis_is_down() -> None:
    server = start_redis()
    state = RedisState(SharedState(server.url, timeout=GENEROUS), RESOURCE)
    try:
        assert await RedisReplayCache(state).first_use("proof", wall_clock() + 60)
        server.stop()
        calls = [
            RedisReplayCache(state).first_use("other", wall_clock() + 60),
            RedisRateCounter(state).hit("caller", 60),
            RedisVerdicts(state).get(b"4" * 32),
            RedisVerdicts(state).put(b"4" * 32, verdict()),
        ]
        for call in calls:
            with pytest.raises(TemporarilyUnavailable) as refused:
                await call
            assert refused.value.headers == {"Retry-After": "1"}
            assert refused.value.status_code == 503
    finally:
        server.stop()
        await state.aclose()


async def test_a_redis_that_never_answers_costs_the_timeout_and_no_more(
    silent_redis: SilentListener,
) -> None:
    state = RedisState(SharedState(silent_redis.url, timeout=0.2), RESOURCE)
    try:
        for call in (
            RedisReplayCache(state).first_use("proof", wall_clock() + 60),
            RedisRateCounter(state).hit("caller", 60),
        ):
            started = time.monotonic()
            with pytest.raises(TemporarilyUnavailable):
                await call
            assert 0.2 <= time.monotonic() - started < 0.7
    finally:
        await state.aclose()


def introspected(auth_server: FakeAuthorizationServer, subject: str) -> str:
    """A new opaque token the authorization server's introspection calls active."""
    token = f"opaque-token-{subject}-" + "x" * 20
    auth_server.active[token] = {
        "active": True,
        "sub": subject,
        "client_id": "client-1",
        "scope": "mcp:basic",
        "aud": RESOURCE,
        "iss": ISSUER,
        "exp": int(time.time()) + 3600,
    }
    return token


def introspecting_replica(as_http: Any, shared_state: str) -> ProtectedResourceMiddleware:
    verifier = IntrospectionVerifier(
        resource=RESOURCE,
        client_id=INTROSPECTION_CLIENT[0],
        client_secret=INTROSPECTION_CLIENT[1],
        http=as_http,
        endpoint=f"{ISSUER}/introspect",
        cache_seconds=60,
    )
    return ProtectedResourceMiddleware(
        RecordingApp(),
        resource=RESOURCE,
        authorization_servers=[ISSUER],
        verifier=verifier,
        shared_state=SharedState(shared_state, timeout=GENEROUS),
    )


async def test_replicas_share_introspection_verdicts_and_see_a_revocation_after_the_deadline(
    auth_server: FakeAuthorizationServer, as_http: Any, redis_url: str, redis_client: Any
) -> None:
    token = introspected(auth_server, "alice")
    first, second = (introspecting_replica(as_http, redis_url) for _ in "ab")
    async with client_for(first) as a, client_for(second) as b:
        assert (await a.get("/mcp", headers=bearer(token))).status_code == 200
        assert (await b.get("/mcp", headers=bearer(token))).status_code == 200
        assert auth_server.fetches["introspect"] == 1  # the second replica asked no one
        del auth_server.active[token]  # revoked at the authorization server
        within = [await c.get("/mcp", headers=bearer(token)) for c in (a, b)]
        with later(61):  # every replica's deadline has passed
            after = [await c.get("/mcp", headers=bearer(token)) for c in (a, b)]
    await first.aclose()
    await second.aclose()
    assert [r.status_code for r in within] == [200, 200]  # reused until the deadline
    assert [r.status_code for r in after] == [401, 401]
    for key in redis_client.keys("*"):
        assert token.encode() not in key
        assert token.encode() not in (redis_client.get(key) or b"")


async def test_a_verdict_in_memory_needs_no_redis_and_a_miss_asks_the_verifier(
    auth_server: FakeAuthorizationServer, as_http: Any
) -> None:
    token, other = introspected(auth_server, "bob"), introspected(auth_server, "carol")
    server = start_redis()
    try:
        middleware = introspecting_replica(as_http, server.url)
        async with client_for(middleware) as client:
            assert (await client.get("/mcp", headers=bearer(token))).status_code == 200
            server.stop()
            kept = await client.get("/mcp", headers=bearer(token))
            missed = await client.get("/mcp", headers=bearer(other))
        await middleware.aclose()
    finally:
        server.stop()
    assert kept.status_code == 200  # from this process's memory
    assert missed.status_code == 200  # Redis down: the introspection endpoint decided
    assert auth_server.fetches["introspect"] == 2
