"""Admission for fetches of client-controlled URLs (metadata documents, ``jwks_uri``s), so
that hosts which stall or fail cannot tie the server up:

- one fetch per URL at a time: concurrent requests for it await the same fetch;
- at most ``max_in_flight`` fetches at once, ``per_host`` to one host name and ``per_address``
  started by one requester; past a cap the request is declined at once, not queued;
- a failed fetch is remembered for ``failure_ttl`` seconds (bounded): the host is asked again
  only after that, and meanwhile the failure is answered from memory;
- failed fetches are counted per requester address (IPv6 per /64) in a window; an address
  past ``failures_per_address`` starts no fetch until its window ends (bounded memory).

Everything here runs on the event loop thread, so plain dictionaries need no locks."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import time
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit

from mcpauth.errors import FetchDeclined as FetchDeclined  # one class; imported from here too
from mcpauth.key_sets import Fetched
from mcpauth.server.clients.ssrf import FetchedResponse, FetchError


class AsyncFetcher(Protocol):
    """What the gate fetches with: ``SafeFetcher`` in the server."""

    async def aget(self, url: str) -> FetchedResponse: ...


@dataclass(frozen=True)
class FetchLimits:
    max_in_flight: int = 16
    per_host: int = 4
    per_address: int = 4
    failures_per_address: int = 10
    failure_window: float = 60.0
    failure_ttl: float = 30.0
    remembered_failures: int = 1000
    remembered_addresses: int = 10_000


BUSY = "too many client documents are being fetched right now; try again shortly"
TOO_MANY_FAILURES = (
    "too many client documents requested from this address could not be fetched; try again later"
)


def requester_key(address: str) -> str:
    """Who is counted: the address, or its /64 for IPv6 (one host usually holds a whole /64)."""
    try:
        parsed = ipaddress.ip_address(address)
    except ValueError:
        return address
    if isinstance(parsed, ipaddress.IPv6Address):
        if parsed.ipv4_mapped is not None:
            return str(parsed.ipv4_mapped)
        return str(ipaddress.IPv6Network((parsed, 64), strict=False))
    return str(parsed)


def _retrieve(task: asyncio.Task[FetchedResponse]) -> None:
    if not task.cancelled():
        task.exception()  # retrieved, so an outcome nobody awaited any more is not logged


class FetchGate:
    """The one way the server fetches client-controlled URLs (see the module docstring); use
    it from the event loop only."""

    def __init__(
        self,
        fetcher: AsyncFetcher,
        limits: FetchLimits | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limits = limits or FetchLimits()
        self._fetcher = fetcher
        self._clock = clock
        self._running: dict[str, asyncio.Task[FetchedResponse]] = {}
        self._hosts: Counter[str] = Counter()
        self._starters: Counter[str] = Counter()
        self._failed: OrderedDict[str, tuple[float, str]] = OrderedDict()
        self._failures: OrderedDict[str, tuple[float, int]] = OrderedDict()

    async def fetch(self, url: str, address: str) -> FetchedResponse:
        """``url``'s response, fetched for the requester at ``address`` (or by a concurrent
        request for the same URL).

        Raises:
            FetchError: the fetch failed, now or within the last ``failure_ttl`` seconds.
            FetchDeclined: a cap or the address's failure limit is reached.
        """
        running = self._running.get(url)
        if running is None:
            now = self._clock()
            self._raise_recent_failure(url, now)
            running = self._start(url, requester_key(address), now)
        return await asyncio.shield(running)

    async def fetch_json(self, url: str, address: str) -> Fetched:
        """``url``'s JSON object and its headers (a JWKS, for the key-set cache), fetched as
        :meth:`fetch` does.

        Raises:
            FetchError: as :meth:`fetch`, or the body is not a JSON object.
            FetchDeclined: as :meth:`fetch`.
        """
        response = await self.fetch(url, address)
        try:
            document = json.loads(response.content)
        except (ValueError, RecursionError) as exc:  # RecursionError: nested too deep
            raise FetchError(f"{url} did not return JSON") from exc
        if not isinstance(document, dict):
            raise FetchError(f"{url} did not return a JSON object")
        return Fetched(document, response.headers)

    def in_flight(self) -> int:
        """How many fetches are running now."""
        return len(self._running)

    def _raise_recent_failure(self, url: str, now: float) -> None:
        failed = self._failed.get(url)
        if failed is None:
            return
        until, message = failed
        if until <= now:
            del self._failed[url]
            return
        raise FetchError(f"{message} (remembered for {until - now:.0f} s more)")

    def _start(self, url: str, who: str, now: float) -> asyncio.Task[FetchedResponse]:
        limits = self.limits
        window_start, failures = self._failures.get(who, (now, 0))
        if now - window_start < limits.failure_window and failures >= limits.failures_per_address:
            raise FetchDeclined(TOO_MANY_FAILURES)
        host = (urlsplit(url).hostname or "").lower()
        if (
            len(self._running) >= limits.max_in_flight
            or self._hosts[host] >= limits.per_host
            or self._starters[who] >= limits.per_address
        ):
            raise FetchDeclined(BUSY)
        task = asyncio.get_running_loop().create_task(self._run(url, host, who))
        task.add_done_callback(_retrieve)
        self._running[url] = task
        self._hosts[host] += 1
        self._starters[who] += 1
        return task

    async def _run(self, url: str, host: str, who: str) -> FetchedResponse:
        try:
            return await self._fetcher.aget(url)
        except FetchError as exc:
            self._remember_failure(url, who, exc.message)
            raise
        finally:
            del self._running[url]
            for counter, key in ((self._hosts, host), (self._starters, who)):
                counter[key] -= 1
                if counter[key] <= 0:
                    del counter[key]

    def _remember_failure(self, url: str, who: str, message: str) -> None:
        limits, now = self.limits, self._clock()
        self._failed[url] = (now + limits.failure_ttl, message)
        self._failed.move_to_end(url)
        while len(self._failed) > limits.remembered_failures:
            self._failed.popitem(last=False)
        window_start, failures = self._failures.pop(who, (now, 0))
        if now - window_start >= limits.failure_window:
            window_start, failures = now, 0
        self._failures[who] = (window_start, failures + 1)
        while len(self._failures) > limits.remembered_addresses:
            self._failures.popitem(last=False)
