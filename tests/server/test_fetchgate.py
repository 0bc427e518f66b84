"""The fetch gate in front of client-controlled URLs: one fetch per URL at a time, caps that
decline at once instead of queueing, failures remembered for a while and counted per
requester address. A stand-in for the network whose fetches finish when the test says so."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

import httpx2
import pytest

from mcpauth.server.clients.fetch_admission import (
    BUSY,
    TOO_MANY_FAILURES,
    FetchDeclined,
    FetchGate,
    FetchLimits,
    requester_key,
)
from mcpauth.server.clients.ssrf import FetchedResponse, FetchError

T = TypeVar("T")


@dataclass
class Network:
    """Every fetch waits until ``release`` is set, then answers 200 or raises ``error``."""

    error: FetchError | None = None
    started: list[str] = field(default_factory=list)
    release: asyncio.Event = field(default_factory=asyncio.Event)

    async def aget(self, url: str) -> FetchedResponse:
        self.started.append(url)
        await self.release.wait()
        if self.error is not None:
            raise self.error
        return FetchedResponse(url, 200, httpx2.Headers(), b"{}")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def run(scenario: Callable[[], Awaitable[T]]) -> T:
    return asyncio.run(asyncio.wait_for(scenario(), 10))


async def settle() -> None:
    """Let every task that can run, run until it waits."""
    for _ in range(5):
        await asyncio.sleep(0)


def test_fifty_concurrent_requests_for_one_url_share_one_fetch() -> None:
    async def scenario() -> None:
        network = Network()
        gate = FetchGate(network)
        url = "https://app.example/client.json"
        racers = [asyncio.ensure_future(gate.fetch(url, f"192.0.2.{n}")) for n in range(50)]
        await settle()
        assert network.started == [url]
        assert gate.in_flight() == 1
        network.release.set()
        responses = await asyncio.gather(*racers)
        assert {id(r) for r in responses} == {id(responses[0])}
        assert gate.in_flight() == 0

    run(scenario)


def test_a_requester_that_goes_away_does_not_cancel_the_fetch_others_wait_for() -> None:
    async def scenario() -> None:
        network = Network()
        gate = FetchGate(network)
        url = "https://app.example/client.json"
        first = asyncio.ensure_future(gate.fetch(url, "192.0.2.1"))
        second = asyncio.ensure_future(gate.fetch(url, "192.0.2.2"))
        await settle()
        first.cancel()
        await settle()
        network.release.set()
        assert (await second).url == url
        assert first.cancelled()

    run(scenario)


def test_a_failure_is_shared_remembered_and_the_host_asked_again_only_after_the_ttl() -> None:
    async def scenario() -> None:
        network = Network(error=FetchError("https://app.example/c: no complete response"))
        clock = Clock()
        gate = FetchGate(network, FetchLimits(failure_ttl=30), clock=clock)
        url = "https://app.example/c"
        network.release.set()
        outcomes = await asyncio.gather(
            *(gate.fetch(url, "192.0.2.1") for _ in range(5)), return_exceptions=True
        )
        assert all(isinstance(o, FetchError) for o in outcomes)
        assert network.started == [url]
        clock.now += 29
        with pytest.raises(FetchError, match=r"no complete response .*remembered"):
            await gate.fetch(url, "192.0.2.9")
        assert network.started == [url]  # answered from memory
        clock.now += 1
        with pytest.raises(FetchError, match=r"no complete response$"):
            await gate.fetch(url, "192.0.2.9")
        assert network.started == [url, url]

    run(scenario)


def test_remembered_failures_are_bounded_oldest_forgotten_first() -> None:
    async def scenario() -> None:
        network = Network(error=FetchError("refused"))
        network.release.set()
        gate = FetchGate(network, FetchLimits(remembered_failures=2))
        urls = [f"https://h{n}.example/c" for n in range(3)]
        for n, url in enumerate(urls):
            with pytest.raises(FetchError):
                await gate.fetch(url, f"192.0.2.{n}")
        for url in [urls[1], urls[2], urls[0]]:
            with pytest.raises(FetchError):
                await gate.fetch(url, "192.0.2.200")
        assert network.started == [*urls, urls[0]]  # only the oldest was asked again

    run(scenario)


@pytest.mark.parametrize(
    ("limits", "urls", "addresses"),
    [
        # the global cap: sixteen hosts, sixteen requesters
        (
            FetchLimits(max_in_flight=16),
            [f"https://h{n}.example/c" for n in range(17)],
            [f"192.0.2.{n}" for n in range(17)],
        ),
        # one host name: four documents at once, whoever asks
        (
            FetchLimits(per_host=4),
            [f"https://stall.example/{n}.json" for n in range(5)],
            [f"192.0.2.{n}" for n in range(5)],
        ),
        # one requester: four fetches at once, whatever hosts
        (
            FetchLimits(per_address=4),
            [f"https://h{n}.example/c" for n in range(5)],
            ["192.0.2.7"] * 5,
        ),
    ],
    ids=["global", "per-host", "per-address"],
)
def test_past_a_cap_a_fetch_is_declined_at_once_and_not_queued(
    limits: FetchLimits, urls: list[str], addresses: list[str]
) -> None:
    async def scenario() -> None:
        network = Network()
        gate = FetchGate(network, limits)
        running = [
            asyncio.ensure_future(gate.fetch(u, a))
            for u, a in zip(urls[:-1], addresses[:-1], strict=True)
        ]
        await settle()
        with pytest.raises(FetchDeclined) as caught:
            await gate.fetch(urls[-1], addresses[-1])  # raised without waiting for anything
        assert caught.value.message == BUSY
        assert network.started == urls[:-1]
        # elsewhere (another host, another requester) is unaffected
        other = asyncio.ensure_future(gate.fetch("https://else.example/c", "198.51.100.1"))
        network.release.set()
        if len(urls) > 16:  # the global cap counts everyone
            with pytest.raises(FetchDeclined):
                await other
        else:
            assert (await other).status_code == 200
        await asyncio.gather(*running)
        # once the fetches are done, the capped one is accepted
        assert (await gate.fetch(urls[-1], addresses[-1])).url == urls[-1]

    run(scenario)


def test_an_address_whose_fetches_keep_failing_starts_no_more_until_its_window_ends() -> None:
    async def scenario() -> None:
        network = Network(error=FetchError("refused"))
        network.release.set()
        clock = Clock()
        limits = FetchLimits(failures_per_address=3, failure_window=60, failure_ttl=1)
        gate = FetchGate(network, limits, clock=clock)
        for n in range(3):
            with pytest.raises(FetchError):
                await gate.fetch(f"https://h{n}.example/c", "2001:db8:1:2::1")
        # the same /64 is the same requester; nothing is fetched for it
        with pytest.raises(FetchDeclined) as caught:
            await gate.fetch("https://fresh.example/c", "2001:db8:1:2::ffff")
        assert caught.value.message == TOO_MANY_FAILURES
        assert len(network.started) == 3
        # another requester is not held back by this one
        with pytest.raises(FetchError):
            await gate.fetch("https://fresh.example/c", "2001:db8:1:3::1")
        clock.now += 60
        with pytest.raises(FetchError):  # a new window: fetched (and failing) again
            await gate.fetch("https://other.example/c", "2001:db8:1:2::1")
        assert len(network.started) == 5

    run(scenario)


def test_counted_addresses_are_bounded() -> None:
    async def scenario() -> None:
        network = Network(error=FetchError("refused"))
        network.release.set()
        limits = FetchLimits(failures_per_address=1, remembered_addresses=2, failure_ttl=0)
        gate = FetchGate(network, limits)
        for n in range(3):
            with pytest.raises(FetchError):
                await gate.fetch("https://h.example/c", f"192.0.2.{n}")
        with pytest.raises(FetchDeclined):
            await gate.fetch("https://h.example/c", "192.0.2.2")
        # the oldest address was forgotten (two are remembered), so it is fetched for again
        with pytest.raises(FetchError):
            await gate.fetch("https://h.example/c", "192.0.2.0")
        assert len(network.started) == 4

    run(scenario)


@pytest.mark.parametrize(
    ("address", "key"),
    [
        ("192.0.2.7", "192.0.2.7"),
        ("2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"),
        ("::ffff:192.0.2.7", "192.0.2.7"),
        ("unknown", "unknown"),
    ],
)
def test_requesters_are_counted_by_address_and_ipv6_by_its_64(address: str, key: str) -> None:
    assert requester_key(address) == key
