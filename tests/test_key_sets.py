"""The one key-set cache (mcpauth/key_sets.py) on its own, with a stand-in fetcher and clock:
what every user gets whatever its fetcher. Keys are kept as long as their response allows,
within the policy's bounds; a fetch past its deadline fails and backs off; a declined fetch is
no failure; a refresh within the refetch interval learns nothing, and one asked for while a
fetch is under way joins it; only so many sources are remembered; and on an event loop other
than asyncio the first caller's fetch is shielded from its cancellation. (Each user's own
behaviour is tested with it: tests/middleware/test_verification.py and
test_key_fetch_storms.py, tests/server/test_key_sets.py, test_client_keys.py and
test_upstream_sign_in.py.)"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import anyio
import pytest

from mcpauth import key_sets
from mcpauth.errors import FetchDeclined, FetchError, TemporarilyUnavailable
from mcpauth.key_sets import Fetched, KeySetCache, KeySetPolicy

T = TypeVar("T")
URL = "https://issuer.example/jwks"
POLICY = KeySetPolicy(
    unavailable="keys unavailable",
    busy="keys busy",
    default_lifetime=300,
    max_lifetime=3600,
    refetch_interval=60,
    backoff=5,
    max_backoff=40,
    deadline=0.05,
    max_sources=2,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Source:
    """Answers ``kids`` with ``headers``; or raises ``error``; or, with ``stall``, waits until
    ``release`` is set."""

    kids: tuple[str, ...] = ("k1",)
    headers: dict[str, str] = field(default_factory=dict)
    error: Exception | None = None
    stall: bool = False
    release: asyncio.Event = field(default_factory=asyncio.Event)
    fetched: list[str] = field(default_factory=list)

    async def __call__(self, source: str, requester: str) -> Fetched:
        self.fetched.append(source)
        if self.stall:
            await self.release.wait()
        if self.error is not None:
            raise self.error
        return Fetched({"kids": list(self.kids)}, self.headers)


def kids(document: Mapping[str, Any]) -> frozenset[str]:
    return frozenset(document["kids"])


def cache(source: Source, clock: Clock, policy: KeySetPolicy = POLICY) -> KeySetCache[Any]:
    return KeySetCache(source, kids, policy, clock=clock)


def run(scenario: Callable[[], Awaitable[T]]) -> T:
    return asyncio.run(asyncio.wait_for(scenario(), 10))


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


@pytest.mark.parametrize(
    ("cache_control", "kept"),
    [(None, 300), ("max-age=120", 120), ("no-store", 60), ("max-age=999999", 3600)],
)
def test_keys_are_kept_as_long_as_their_response_allows_within_the_bounds(
    cache_control: str | None, kept: int
) -> None:
    async def scenario() -> None:
        clock = Clock()
        source = Source(headers={"cache-control": cache_control} if cache_control else {})
        keys = cache(source, clock)
        await keys.get(URL)
        clock.now += kept - 1
        await keys.get(URL)
        assert len(source.fetched) == 1
        clock.now += 1
        await keys.get(URL)
        assert len(source.fetched) == 2

    run(scenario)


def test_a_fetch_past_its_deadline_fails_backs_off_and_names_nothing() -> None:
    async def scenario() -> None:
        clock, source = Clock(), Source(stall=True)
        keys = cache(source, clock)
        with pytest.raises(TemporarilyUnavailable) as failed:
            await keys.get(URL)
        assert isinstance(failed.value.__cause__, TimeoutError)
        assert (failed.value.description, failed.value.headers) == (
            "keys unavailable",
            {"Retry-After": "5"},
        )
        clock.now += 4  # within the back-off: answered from memory
        with pytest.raises(TemporarilyUnavailable) as remembered:
            await keys.get(URL)
        assert remembered.value.headers == {"Retry-After": "1"}
        assert isinstance(remembered.value.__cause__, TimeoutError)
        assert len(source.fetched) == 1
        source.stall = False
        clock.now += 1
        assert await keys.get(URL) == {"k1"}

    run(scenario)


def test_a_declined_fetch_is_busy_and_no_failure_of_the_source() -> None:
    async def scenario() -> None:
        clock, source = Clock(), Source(error=FetchDeclined("too many fetches"))
        keys = cache(source, clock)
        for _ in range(2):  # no back-off: the next caller may try at once
            with pytest.raises(TemporarilyUnavailable) as declined:
                await keys.get(URL)
            assert (declined.value.description, declined.value.headers) == (
                "keys busy",
                {"Retry-After": "1"},
            )
            assert isinstance(declined.value.__cause__, FetchDeclined)
        assert len(source.fetched) == 2
        source.error = None
        held = await keys.get(URL)
        source.error = FetchDeclined("too many fetches")
        clock.now += 300  # stale, and the refetch is declined: the keys held still serve
        assert await keys.get(URL) is held

    run(scenario)


def test_a_refresh_within_the_interval_learns_nothing_and_one_under_way_is_joined() -> None:
    async def scenario() -> None:
        clock, source = Clock(), Source()
        keys = cache(source, clock)
        await keys.get(URL)
        clock.now += 59
        assert await keys.refresh(URL) is None
        assert await keys.get(URL, kid="k2") == {"k1"}  # an unknown kid: no fetch either
        assert len(source.fetched) == 1
        clock.now += 1
        source.kids, source.stall = ("k1", "k2"), True
        first = asyncio.ensure_future(keys.get(URL, kid="k2"))
        await settle()
        second = asyncio.ensure_future(keys.refresh(URL))  # joins the fetch under way
        third = asyncio.ensure_future(keys.get(URL, kid="k2"))  # and so does this one
        await settle()
        source.release.set()
        assert await first == await second == await third == {"k1", "k2"}
        assert len(source.fetched) == 2

    run(scenario)


def test_a_failure_with_keys_held_serves_them_and_backs_off() -> None:
    async def scenario() -> None:
        clock, source = Clock(), Source()
        keys = cache(source, clock, replace(POLICY, backoff=100, max_backoff=100))
        held = await keys.get(URL)
        source.error = FetchError(f"{URL} answered 500")
        clock.now += 300
        assert await keys.get(URL) is held
        assert keys.peek(URL) is held
        assert keys.peek(URL, fresh_only=True) is None  # stale: only a worker asking may have it
        clock.now += 60  # past the refetch interval, within the back-off: no fetch
        assert await keys.refresh(URL) is held
        assert await keys.get(URL, kid="k2") is held
        assert len(source.fetched) == 2
        clock.now += 40  # the back-off is over
        assert await keys.refresh(URL) is held
        assert len(source.fetched) == 3

    run(scenario)


def test_only_so_many_sources_are_remembered() -> None:
    async def scenario() -> None:
        clock, source = Clock(), Source()
        keys = cache(source, clock)
        for url in ("https://a.example/jwks", "https://b.example/jwks", URL):
            await keys.get(url)
        assert keys.peek("https://a.example/jwks") is None  # the least recently used
        assert keys.peek("https://b.example/jwks") == keys.peek(URL) == {"k1"}

    run(scenario)


def test_elsewhere_than_asyncio_the_first_callers_fetch_outlives_its_cancellation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under trio (no asyncio task to hand the fetch to) the first caller fetches itself,
    shielded: cancelling it does not cancel the fetch the others wait for."""
    monkeypatch.setattr(key_sets, "_asyncio_loop", lambda: None)

    async def scenario() -> None:
        clock, source = Clock(), Source(stall=True)
        keys = cache(source, clock, KeySetPolicy(unavailable="keys unavailable", deadline=5))
        results: dict[str, Any] = {}
        scopes: list[anyio.CancelScope] = []

        async def first() -> None:
            with anyio.CancelScope() as scope:
                scopes.append(scope)
                results["first"] = await keys.get(URL)

        async def second() -> None:
            results["second"] = await keys.get(URL)

        async with anyio.create_task_group() as group:
            group.start_soon(first)
            await settle()
            group.start_soon(second)
            await settle()
            scopes[0].cancel()
            await settle()
            assert results == {}  # the first caller is still fetching, shielded
            source.release.set()
        assert results["second"] == {"k1"}
        assert source.fetched == [URL]

    run(scenario)
