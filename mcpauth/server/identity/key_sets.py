"""The one cache of the signing keys of every issuer this server trusts for assertions (workload
platforms, ID-JAG identity providers): each an inline JWKS or a JWKS URL the operator configured.

Keys at a URL are loaded on the event loop, before the request's database work
(:meth:`KeySets.load`), through a fetch gate of their own
(:class:`~mcpauth.server.clients.fetch_admission.FetchGate`, built by the server context in
front of the SSRF-safe fetcher); the work in the database threads then reads them from memory
(:meth:`KeySets.loaded`). So an issuer that never answers holds a coroutine for the fetch
deadline, never a thread, and no lock is held while a fetch runs:

- one fetch per URL at a time: concurrent requests await the same one (single flight);
- the gate's caps (fetches at once, per host, per requesting address) decline at once;
- a key set is fresh for five minutes; an unknown ``kid`` refetches it early, at most once a
  minute per URL, so assertions with made-up ``kid``s cannot turn into a fetch each;
- a failed fetch is remembered with a back-off (5 s doubling to 5 min): meanwhile the last good
  keys are used, or, if there are none, the request is answered ``temporarily_unavailable``
  with ``Retry-After`` from memory, without connecting.

State is kept only for the configured URLs (bounded by the configuration); everything here runs
on the event loop thread except :meth:`KeySets.loaded`, which only reads one reference."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

from mcpauth import jwt
from mcpauth.errors import (
    ConfigurationError,
    FetchDeclined,
    FetchError,
    TemporarilyUnavailable,
)

KeySet = dict[str, jwt.VerificationKey]
FRESH_SECONDS = 300.0
REFETCH_INTERVAL = 60.0  # an unknown kid refetches a URL at most this often
BACKOFF_START, BACKOFF_MAX = 5.0, 300.0
FETCH_TIMEOUT = 5.0  # seconds in all for one key-set fetch
MAX_BYTES = 64 * 1024  # a JWKS of several RSA keys with certificate chains fits
UNAVAILABLE = "The assertion issuer's signing keys cannot be loaded right now; try again later"
BUSY = "Too many signing-key fetches are running right now; try again shortly"
log = logging.getLogger(__name__)


class Fetched(Protocol):
    @property
    def content(self) -> bytes: ...


class Gate(Protocol):
    """What fetches the keys: the server's ``FetchGate`` for key sets (single flight per URL,
    caps; it raises ``FetchError`` or ``FetchDeclined``). Another fetcher of this shape (the
    upstream providers' client on the same outbound route, say) can stand in for it."""

    async def fetch(self, url: str, address: str) -> Fetched: ...


def is_inline(source: str) -> bool:
    """Whether a configured key source is the JWKS itself (JSON) rather than its URL."""
    return source.lstrip().startswith("{")


def _parse(content: bytes | str) -> KeySet:
    document: Any = json.loads(content)
    if not isinstance(document, dict):
        raise ValueError("a JWKS must be a JSON object")
    return jwt.key_set(document)


def url_host(source: str) -> str:
    """The host of a key source that is a URL (the operator chose it: the fetcher may reach it
    even at an internal address, a Kubernetes API server say).

    Raises:
        ConfigurationError: the URL is not https or names no host.
    """
    parts = urlsplit(source)
    if parts.scheme != "https" or not parts.hostname:
        raise ConfigurationError(
            f"a trusted issuer's keys must be an inline JWKS or an https URL, not {source[:80]!r}"
        )
    return parts.hostname


@dataclass
class _KeySource:
    """What is known about one JWKS URL."""

    keys: KeySet | None = None
    fetched_at: float = -math.inf  # the last fetch that succeeded
    attempted_at: float = -math.inf  # the last fetch started
    failures: int = 0  # since the last success
    retry_at: float = -math.inf  # no fetch before this (the back-off after a failure)


def _retrieve(task: asyncio.Task[KeySet]) -> None:
    if not task.cancelled():
        task.exception()  # retrieved, so an outcome nobody awaits any more is not logged


class KeySets:
    """Keys by configured source (an inline JWKS or a JWKS URL); see the module docstring.

    Raises:
        ConfigurationError: a source is neither a JSON object nor an https URL.
    """

    def __init__(
        self,
        sources: Iterable[str],
        gate: Gate,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._inline: dict[str, KeySet] = {}
        self._urls: dict[str, _KeySource] = {}
        for source in sources:
            if is_inline(source):
                try:
                    self._inline[source] = _parse(source)
                except ValueError as exc:
                    raise ConfigurationError(f"a trusted issuer's inline JWKS: {exc}") from exc
            else:
                url_host(source)
                self._urls[source] = _KeySource()
        self._gate = gate
        self._clock = clock
        self._loading: dict[str, asyncio.Task[KeySet]] = {}

    async def load(self, source: str, *, kid: str | None, requester: str) -> KeySet:
        """The keys of ``source``, fetched first if they are missing, stale, or lack ``kid``
        (at most once a minute for that reason), for the requester at ``requester``; on the
        event loop.

        Raises:
            TemporarilyUnavailable: no keys could be loaded (now or within the back-off), or a
                fetch cap is reached; ``Retry-After`` says when to try again.
        """
        inline = self._inline.get(source)
        if inline is not None:
            return inline
        state = self._urls[source]
        now = self._clock()
        if state.keys is not None and not self._wants_fetch(state, kid, now):
            return state.keys
        task = self._loading.get(source)
        if task is None:
            if now < state.retry_at:
                if state.keys is not None:
                    return state.keys  # the last good keys while the issuer is unreachable
                raise _unavailable(state.retry_at - now)
            task = asyncio.get_running_loop().create_task(self._fetch(source, state, requester))
            task.add_done_callback(_retrieve)
            self._loading[source] = task
        return await asyncio.shield(task)

    def loaded(self, source: str) -> KeySet | None:
        """The keys :meth:`load` last obtained for ``source`` (fresh or not), from memory only;
        None if it never has. Safe to call from any thread."""
        inline = self._inline.get(source)
        if inline is not None:
            return inline
        state = self._urls.get(source)
        return None if state is None else state.keys

    def _wants_fetch(self, state: _KeySource, kid: str | None, now: float) -> bool:
        if now - state.fetched_at >= FRESH_SECONDS:
            return True
        unknown = kid is not None and state.keys is not None and kid not in state.keys
        # the issuer may have rotated its keys; a made-up kid must not cause a fetch each time
        return unknown and now - state.attempted_at >= REFETCH_INTERVAL

    async def _fetch(self, source: str, state: _KeySource, requester: str) -> KeySet:
        state.attempted_at = self._clock()
        try:
            response = await self._gate.fetch(source, requester)
            keys = _parse(response.content)
        except FetchDeclined as exc:  # a cap, not the issuer's failure: nothing remembered
            if state.keys is not None:
                return state.keys
            raise TemporarilyUnavailable(BUSY, headers={"Retry-After": "1"}) from exc
        except (FetchError, ValueError, RecursionError) as exc:  # RecursionError: deep JSON
            return self._failed(source, state, exc)
        finally:
            del self._loading[source]
        state.keys, state.fetched_at = keys, self._clock()
        state.failures, state.retry_at = 0, -math.inf
        return keys

    def _failed(self, source: str, state: _KeySource, exc: Exception) -> KeySet:
        state.failures += 1
        backoff = min(BACKOFF_START * 2 ** (state.failures - 1), BACKOFF_MAX)
        state.retry_at = self._clock() + backoff
        # where and how the fetch failed goes to the log, never to the requester
        log.warning(
            "trusted issuer keys not fetched from %s (failure %d, next try in %.0f s): %s",
            source,
            state.failures,
            backoff,
            exc,
        )
        if state.keys is not None:
            return state.keys  # the last good keys while the issuer is unreachable
        raise _unavailable(backoff) from exc


def _unavailable(wait: float) -> TemporarilyUnavailable:
    return TemporarilyUnavailable(
        UNAVAILABLE, headers={"Retry-After": str(max(1, math.ceil(wait)))}
    )
