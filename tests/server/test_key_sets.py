"""The one key-set cache for trusted assertion issuers (docs/security.md, "Key fetches for
assertions"): a single fetch per URL however many requests wait, failures remembered with a
growing back-off and answered from memory, the last good keys kept while an issuer is down, an
unknown ``kid`` refetching at most once a minute, and caps that decline at once. A stand-in for
the network whose fetches finish when the test says so (the real fetcher and a real stalling
host are in tests/e2e/test_key_fetch_stall.py and tests/e2e/test_trusted_issuer_keys.py)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx2
import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from mcpauth import jwt
from mcpauth.errors import ConfigurationError, TemporarilyUnavailable
from mcpauth.server.clients.fetch_admission import FetchGate, FetchLimits
from mcpauth.server.clients.ssrf import FetchedResponse, FetchError
from mcpauth.server.identity.trusted_issuers import BUSY, POLICY, UNAVAILABLE, KeySets

from .test_fetchgate import Clock, run, settle  # the same stand-ins for time and the loop

FRESH_SECONDS = POLICY.max_lifetime  # five minutes
REFETCH_INTERVAL = POLICY.refetch_interval  # a minute
BACKOFF_MAX = POLICY.max_backoff  # five minutes
URL = "https://platform.example/keys"
OTHER = "https://idp.example/jwks"


def jwks(*kids: str) -> dict[str, Any]:
    public = [(ec.generate_private_key(ec.SECP256R1()).public_key(), kid) for kid in kids]
    return {"keys": [jwt.public_jwk(key, kid=kid, alg="ES256") for key, kid in public]}


@dataclass
class Network:
    """Every fetch waits until ``release`` is set, then answers ``document`` or raises
    ``error``."""

    document: dict[str, Any] = field(default_factory=lambda: jwks("k1"))
    error: FetchError | None = None
    started: list[str] = field(default_factory=list)
    release: asyncio.Event = field(default_factory=asyncio.Event)

    async def aget(self, url: str) -> FetchedResponse:
        self.started.append(url)
        await self.release.wait()
        if self.error is not None:
            raise self.error
        body = json.dumps(self.document).encode()
        return FetchedResponse(url, 200, httpx2.Headers(), body)


def key_sets(network: Network, clock: Clock, limits: FetchLimits | None = None) -> KeySets:
    """The cache as the server builds it: its gate remembers no failure (the cache backs off)."""
    gate = FetchGate(network, limits or FetchLimits(failure_ttl=0), clock=clock)
    return KeySets([URL, OTHER], gate, clock=clock)


def test_fifty_concurrent_loads_of_one_issuer_share_one_fetch() -> None:
    async def scenario() -> None:
        network, clock = Network(), Clock()
        cache = key_sets(network, clock)
        racers = [
            asyncio.ensure_future(cache.load(URL, kid="k1", requester=f"192.0.2.{n}"))
            for n in range(50)
        ]
        await settle()
        assert network.started == [URL]
        network.release.set()
        results = await asyncio.gather(*racers)
        assert all(set(keys) == {"k1"} for keys in results)
        assert cache.loaded(URL) is results[0]
        assert cache.loaded(OTHER) is None  # never asked for
        await cache.load(URL, kid="k1", requester="192.0.2.1")  # fresh: from memory
        assert network.started == [URL]

    run(scenario)


def test_a_failure_is_remembered_with_a_growing_back_off_and_said_with_retry_after() -> None:
    async def scenario() -> None:
        network, clock = Network(error=FetchError(f"{URL}: no complete response")), Clock()
        network.release.set()
        cache = key_sets(network, clock)
        waits = []
        for attempt in range(8):
            with pytest.raises(TemporarilyUnavailable) as failed:
                await cache.load(URL, kid="k1", requester="192.0.2.1")
            assert failed.value.description == UNAVAILABLE  # nothing about the host
            assert failed.value.status_code == 503
            wait = int(failed.value.headers["Retry-After"])
            waits.append(wait)
            assert len(network.started) == attempt + 1
            clock.now += wait - 1  # within the back-off: answered from memory, no fetch
            with pytest.raises(TemporarilyUnavailable) as remembered:
                await cache.load(URL, kid="k1", requester="192.0.2.2")
            assert remembered.value.headers["Retry-After"] == "1"
            assert len(network.started) == attempt + 1
            clock.now += 1
        assert waits == [5, 10, 20, 40, 80, 160, int(BACKOFF_MAX), int(BACKOFF_MAX)]
        network.error = None  # the issuer is back: the next load after the back-off succeeds
        assert set(await cache.load(URL, kid="k1", requester="192.0.2.1")) == {"k1"}

    run(scenario)


def test_the_last_good_keys_serve_while_the_issuer_is_unreachable() -> None:
    async def scenario() -> None:
        network, clock = Network(), Clock()
        network.release.set()
        cache = key_sets(network, clock)
        good = await cache.load(URL, kid="k1", requester="192.0.2.1")
        network.error = FetchError(f"{URL}: cannot connect")
        clock.now += FRESH_SECONDS  # stale: fetched again, which fails
        assert await cache.load(URL, kid="k1", requester="192.0.2.1") is good
        assert len(network.started) == 2
        clock.now += 1  # within the back-off: no fetch, the last good keys
        assert await cache.load(URL, kid="k1", requester="192.0.2.1") is good
        assert len(network.started) == 2

    run(scenario)


def test_an_unknown_kid_refetches_at_most_once_a_minute_and_finds_a_rotated_key() -> None:
    async def scenario() -> None:
        network, clock = Network(), Clock()
        network.release.set()
        cache = key_sets(network, clock)
        await cache.load(URL, kid="k1", requester="192.0.2.1")
        network.document = jwks("k1", "k2")  # the issuer rotates
        for _ in range(20):  # made-up kids within the minute: no fetch each
            clock.now += 1
            keys = await cache.load(URL, kid="made-up", requester="192.0.2.1")
            assert set(keys) == {"k1"}
        assert len(network.started) == 1
        clock.now += REFETCH_INTERVAL
        keys = await cache.load(URL, kid="k2", requester="192.0.2.1")
        assert set(keys) == {"k1", "k2"}
        assert len(network.started) == 2
        clock.now += 1
        await cache.load(URL, kid="made-up", requester="192.0.2.1")
        assert len(network.started) == 2

    run(scenario)


def test_a_fetch_cap_declines_at_once_and_is_not_remembered_as_a_failure() -> None:
    async def scenario() -> None:
        network, clock = Network(), Clock()
        cache = key_sets(network, clock, FetchLimits(max_in_flight=1, failure_ttl=0))
        first = asyncio.ensure_future(cache.load(URL, kid="k1", requester="192.0.2.1"))
        await settle()
        with pytest.raises(TemporarilyUnavailable) as declined:
            await cache.load(OTHER, kid="k1", requester="192.0.2.2")
        assert declined.value.description == BUSY
        assert declined.value.headers["Retry-After"] == "1"
        assert network.started == [URL]
        network.release.set()
        await first
        assert set(await cache.load(OTHER, kid="k1", requester="192.0.2.2")) == {"k1"}
        assert network.started == [URL, OTHER]

    run(scenario)


def test_a_requester_that_goes_away_does_not_cancel_the_fetch_others_wait_for() -> None:
    async def scenario() -> None:
        network, clock = Network(), Clock()
        cache = key_sets(network, clock)
        first = asyncio.ensure_future(cache.load(URL, kid="k1", requester="192.0.2.1"))
        second = asyncio.ensure_future(cache.load(URL, kid="k1", requester="192.0.2.2"))
        await settle()
        first.cancel()
        await settle()
        network.release.set()
        assert set(await second) == {"k1"}
        assert first.cancelled()
        assert network.started == [URL]

    run(scenario)


def test_a_document_that_is_not_a_jwks_counts_as_a_failure() -> None:
    async def scenario() -> None:
        network, clock = Network(), Clock()
        network.release.set()
        cache = key_sets(network, clock)
        network.document = {"keys": "none"}
        assert await cache.load(URL, kid="k1", requester="192.0.2.1") == {}  # no usable key
        for hostile in (b"<html>", b"[" * 50_000):  # not JSON; nested past the recursion limit
            network.aget = _answering(hostile)  # type: ignore[method-assign]
            clock.now += FRESH_SECONDS
            # the last keys are kept while backing off
            assert await cache.load(URL, kid="k1", requester="192.0.2.1") == {}
        assert network.started == [URL]  # the stand-ins do not record

    run(scenario)


def _answering(body: bytes) -> Callable[[str], Awaitable[FetchedResponse]]:
    async def aget(url: str) -> FetchedResponse:
        return FetchedResponse(url, 200, httpx2.Headers(), body)

    return aget


def test_inline_keys_need_no_fetch() -> None:
    async def scenario() -> None:
        network = Network()
        inline = json.dumps(jwks("k1"))
        cache = KeySets([inline], FetchGate(network))
        assert set(await cache.load(inline, kid="k9", requester="192.0.2.1")) == {"k1"}
        assert cache.loaded(inline) is not None
        assert network.started == []

    run(scenario)


@pytest.mark.parametrize(
    "source",
    ["http://platform.example/keys", "platform.example/keys", "https:///keys", '{"keys": '],
)
def test_a_key_source_must_be_an_inline_jwks_or_an_https_url(source: str) -> None:
    with pytest.raises(ConfigurationError):
        KeySets([source], FetchGate(Network()))
