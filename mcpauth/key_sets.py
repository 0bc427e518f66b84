"""The one key-set cache: the signing keys mcpauth verifies with, by the source they come from
(a JWKS URL; the middleware's is its issuer, whose ``jwks_uri`` it discovers). Every part uses
it: the middleware for its authorization server's keys, the server for the issuers it trusts for
assertions, for upstream OpenID providers and for ``private_key_jwt`` clients' ``jwks_uri``.

Each user brings the fetcher that reaches its URLs (plain httpx2 in the middleware, the
operator's outbound route for issuers and providers the operator configured, the SSRF-safe fetch
gate for URLs a client names; each fetcher caps the body it reads), the parser that makes keys of
a JWKS document, and a :class:`KeySetPolicy`. The cache applies the same rules to all:

- keys are reused for as long as their response allows (HTTP caching, RFC 9111 §4.2.1),
  ``default_lifetime`` when it says nothing, clamped to [``refetch_interval``, ``max_lifetime``];
- one fetch per source at a time: concurrent callers await the same one, and a caller that
  goes away does not cancel it;
- every fetch ends by ``deadline`` seconds;
- an unknown ``kid`` fetches the keys again early, at most once per ``refetch_interval`` per
  source, so tokens naming made-up key ids cannot turn into a fetch each;
- a failed fetch backs off (``backoff`` doubling up to ``max_backoff``): meanwhile the last
  good keys are used or, with none, the caller is answered ``temporarily_unavailable`` with
  ``Retry-After`` at once, without a connection; where and how it failed goes to the log only;
- a fetch that a cap declines (:class:`~mcpauth.errors.FetchDeclined`) is no failure of the
  host: the last good keys, or ``temporarily_unavailable`` with ``Retry-After: 1``;
- at most ``max_sources`` sources are remembered (the least recently used is forgotten first).

Internal (not part of the public API). Use it from one event loop; :meth:`KeySetCache.peek`
only reads memory and is safe from any thread (the server's worker threads verify with what the
event loop loaded)."""

from __future__ import annotations

import asyncio
import logging
import math
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Container, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import anyio

from mcpauth.caching import freshness_lifetime, wall_clock
from mcpauth.errors import FetchDeclined, FetchError, TemporarilyUnavailable

log = logging.getLogger("mcpauth.key_sets")

# what a failed fetch or an unusable document raises (RecursionError: JSON nested too deep)
FAILURES = (FetchError, TimeoutError, ValueError, RecursionError)

Keys = TypeVar("Keys", bound=Container[str])  # whether a kid is known: ``kid in keys``


@dataclass(frozen=True)
class Fetched:
    """A JWKS response: its JSON object and the headers that say how long it may be reused."""

    document: Mapping[str, Any]
    headers: Mapping[str, str]


# What fetches a source: ``fetch(source, requester)``, ``requester`` being the address a fetch
# gate counts (or ""). It raises FetchError when the fetch fails or its answer is not a JSON
# object within its cap, FetchDeclined when a cap declines the fetch (no failure of the host).
Fetcher = Callable[[str, str], Awaitable[Fetched]]


@dataclass(frozen=True)
class KeySetPolicy:
    """How one user's keys are kept (the module docstring says what each bound does);
    ``unavailable`` and ``busy`` are the descriptions its callers see. The defaults are the
    server's, for keys of issuers it trusts: fresh at most five minutes (a key the issuer
    withdraws is trusted no longer than that), an unknown ``kid`` refetching at most once a
    minute, a back-off of 5 s doubling to 5 minutes, 5 s for a fetch."""

    unavailable: str
    busy: str = "Too many signing-key fetches are running right now; try again shortly"
    default_lifetime: float = 300.0
    max_lifetime: float = 300.0
    refetch_interval: float = 60.0
    backoff: float = 5.0
    max_backoff: float = 300.0
    deadline: float = 5.0
    max_sources: int = 1000


def cache_lifetime(
    headers: Mapping[str, str], *, now: float, default: float, floor: float, ceiling: float
) -> float:
    """Seconds a JWKS response may be reused (its HTTP freshness, ``default`` when it states
    none), clamped to [floor, ceiling]: even ``no-store`` keys are kept ``floor`` seconds, or
    every token would fetch them."""
    lifetime = freshness_lifetime(headers, now)
    return min(max(default if lifetime is None else lifetime, floor), ceiling)


def _asyncio_loop() -> asyncio.AbstractEventLoop | None:
    """The running asyncio event loop; None under another one (trio, through anyio)."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class _Flight(Generic[Keys]):
    """The one fetch of a source that every caller awaits, and its outcome."""

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.keys: Keys | None = None
        self.error: BaseException | None = None

    def outcome(self) -> Keys:
        if self.error is not None:
            raise self.error
        if self.keys is None:  # the fetch itself was cancelled (the event loop is closing)
            raise TemporarilyUnavailable("The signing keys were not loaded; try again")
        return self.keys


@dataclass
class _Source(Generic[Keys]):
    """What is known about one source."""

    keys: Keys | None = None
    expires_at: float = -math.inf  # the keys are fresh until then
    attempted_at: float = -math.inf  # the last fetch started
    failures: int = 0  # since the last success
    retry_at: float = -math.inf  # no fetch before this (the back-off after a failure)
    error: BaseException | None = None  # the last failure (for the log and the callers' cause)
    flight: _Flight[Keys] | None = None


class KeySetCache(Generic[Keys]):
    """Keys by source; see the module docstring. ``parse`` makes keys of a JWKS document
    (raising ``ValueError`` or ``FetchError`` for one that is unusable: a failure); ``clock``
    is seconds since the epoch (:func:`~mcpauth.caching.wall_clock` by default); ``name``
    says whose keys these are in the log."""

    def __init__(
        self,
        fetch: Fetcher,
        parse: Callable[[Mapping[str, Any]], Keys],
        policy: KeySetPolicy,
        *,
        clock: Callable[[], float] = wall_clock,
        name: str = "signing keys",
    ) -> None:
        self.policy = policy
        self.name = name
        self._fetch = fetch
        self._parse = parse
        self._clock = clock
        self._sources: OrderedDict[str, _Source[Keys]] = OrderedDict()
        self._tasks: set[asyncio.Task[None]] = set()

    def now(self) -> float:
        return self._clock()

    def peek(self, source: str, *, fresh_only: bool = False) -> Keys | None:
        """The keys last loaded from ``source`` (stale ones too, unless ``fresh_only``), from
        memory only; None if there are none. Safe from any thread."""
        state = self._sources.get(source)
        if state is None or (fresh_only and self.now() >= state.expires_at):
            return None
        return state.keys

    async def get(self, source: str, *, kid: str | None = None, requester: str = "") -> Keys:
        """The keys of ``source``, fetched first when there are none, they are stale, or they
        lack ``kid`` (that reason at most once per ``refetch_interval``).

        Raises:
            TemporarilyUnavailable: there are no keys and none could be fetched (now or within
                the back-off), or a cap declined the fetch; ``Retry-After`` says when to try
                again, and the exception's ``__cause__`` is the failure (for the log).
        """
        state = self._state(source)
        if state.keys is not None and not self._wants_fetch(state, state.keys, kid):
            return state.keys
        return await self._load(source, state, requester)

    async def refresh(self, source: str, *, requester: str = "") -> Keys | None:
        """Fetch again because a token named a ``kid`` the keys lack: the keys then (the last
        good ones if the fetch fails), or None when a fetch started less than
        ``refetch_interval`` ago (nothing new to learn).

        Raises:
            TemporarilyUnavailable: as :meth:`get`.
        """
        state = self._state(source)
        if state.flight is None and not self._may_refetch(state):
            return None
        return await self._load(source, state, requester)  # or join the fetch under way

    def _state(self, source: str) -> _Source[Keys]:
        state = self._sources.get(source)
        if state is None:
            state = self._sources[source] = _Source()
            self._forget_beyond_bound()
        self._sources.move_to_end(source)
        return state

    def _forget_beyond_bound(self) -> None:
        idle = [name for name, state in self._sources.items() if state.flight is None]
        for name in idle[: max(0, len(self._sources) - self.policy.max_sources)]:
            del self._sources[name]

    def _may_refetch(self, state: _Source[Keys]) -> bool:
        return state.keys is None or self.now() - state.attempted_at >= self.policy.refetch_interval

    def _wants_fetch(self, state: _Source[Keys], keys: Keys, kid: str | None) -> bool:
        # the issuer may have rotated its keys; a made-up kid must not cause a fetch each time
        unknown = kid is not None and kid not in keys
        if unknown and state.flight is not None:
            return True  # the fetch under way may bring it
        stale = self.now() >= state.expires_at
        return (stale or unknown) and self._may_refetch(state)

    async def _load(self, source: str, state: _Source[Keys], requester: str) -> Keys:
        flight = state.flight
        if flight is None:
            remaining = state.retry_at - self.now()
            if remaining > 0:
                if state.keys is not None:
                    return state.keys  # the last good keys while the source is unreachable
                raise self._unavailable(remaining) from state.error
            flight = state.flight = _Flight()
            await self._start(self._fly(source, state, flight, requester))
        await flight.done.wait()
        return flight.outcome()

    async def _start(self, fetch: Coroutine[Any, Any, None]) -> None:
        """Run ``fetch`` so that no caller's cancellation cancels it: as a task of its own on
        asyncio; elsewhere (trio) in the first caller's task, shielded."""
        loop = _asyncio_loop()
        if loop is None:
            with anyio.CancelScope(shield=True):
                await fetch
            return
        task = loop.create_task(fetch)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _fly(
        self, source: str, state: _Source[Keys], flight: _Flight[Keys], requester: str
    ) -> None:
        try:
            flight.keys = await self._fetch_keys(source, state, requester)
        except Exception as exc:  # noqa: BLE001 - handed to every caller, who raises it
            flight.error = exc
        finally:
            state.flight = None
            flight.done.set()

    async def _fetch_keys(self, source: str, state: _Source[Keys], requester: str) -> Keys:
        state.attempted_at = self.now()
        try:
            with anyio.fail_after(self.policy.deadline):
                fetched = await self._fetch(source, requester)
            keys = self._parse(fetched.document)
        except FetchDeclined as exc:  # a cap, not the source's failure: nothing remembered
            if state.keys is not None:
                return state.keys
            raise TemporarilyUnavailable(self.policy.busy, headers={"Retry-After": "1"}) from exc
        except FAILURES as exc:
            return self._failed(source, state, exc)
        now = self.now()
        policy = self.policy
        lifetime = cache_lifetime(
            fetched.headers,
            now=now,
            default=policy.default_lifetime,
            floor=policy.refetch_interval,
            ceiling=policy.max_lifetime,
        )
        state.keys, state.expires_at = keys, now + lifetime
        state.failures, state.retry_at, state.error = 0, -math.inf, None
        return keys

    def _failed(self, source: str, state: _Source[Keys], exc: BaseException) -> Keys:
        state.failures += 1
        policy = self.policy
        delay = min(policy.backoff * 2.0 ** min(state.failures - 1, 32), policy.max_backoff)
        state.retry_at, state.error = self.now() + delay, exc
        # where and how the fetch failed goes to the log, never to the caller
        log.warning(
            "%s not fetched from %s (failure %d, next try in %.0f s): %s",
            self.name, source[:200], state.failures, delay, str(exc) or type(exc).__name__,
        )  # fmt: skip
        if state.keys is not None:
            return state.keys  # the last good keys while the source is unreachable
        raise self._unavailable(delay) from exc

    def _unavailable(self, wait: float) -> TemporarilyUnavailable:
        retry = str(max(1, math.ceil(wait)))
        return TemporarilyUnavailable(self.policy.unavailable, headers={"Retry-After": retry})
