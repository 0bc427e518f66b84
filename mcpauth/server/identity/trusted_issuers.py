"""Trusted issuers of assertions (ID-JAG identity providers, workload platforms): which issuer
names which key source, and checking an assertion with its keys.

A key source is an inline JWKS or an https JWKS URL the operator configured. Keys at a URL live
in the one key-set cache (:mod:`mcpauth.key_sets`), fetched through a fetch gate of their own
(:class:`~mcpauth.server.clients.fetch_admission.FetchGate`, built by the server context in
front of the SSRF-safe fetcher on the operator's outbound route): :meth:`KeySets.load` on the
event loop before the request's database work, :meth:`KeySets.loaded` in the worker thread from
memory. So an issuer that never answers holds a coroutine for the fetch deadline, never a
thread: one fetch per URL at a time, the gate's caps decline at once, a key set is fresh for
what its response allows (five minutes at most), an unknown ``kid`` refetches it at most once a
minute, and a failure backs off (5 s doubling to 5 min), meanwhile answered from memory. State
is kept only for the configured URLs."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any, Protocol
from urllib.parse import urlsplit

from mcpauth import jwt
from mcpauth.caching import wall_clock
from mcpauth.errors import ConfigurationError, InvalidGrant, OAuthError, TemporarilyUnavailable
from mcpauth.key_sets import Fetched, KeySetCache, KeySetPolicy

KeySet = dict[str, jwt.VerificationKey]
MAX_BYTES = 64 * 1024  # a JWKS of several RSA keys with certificate chains fits
UNAVAILABLE = "The assertion issuer's signing keys cannot be loaded right now; try again later"
BUSY = "Too many signing-key fetches are running right now; try again shortly"
POLICY = KeySetPolicy(UNAVAILABLE, busy=BUSY)  # the server's defaults (mcpauth.key_sets)
FETCH_TIMEOUT = POLICY.deadline  # seconds in all for one key-set fetch


class Gate(Protocol):
    """What fetches the keys: the server's ``FetchGate`` (single flight per URL, caps; it
    raises ``FetchError`` or ``FetchDeclined``)."""

    async def fetch_json(self, url: str, address: str) -> Fetched: ...


def is_inline(source: str) -> bool:
    """Whether a configured key source is the JWKS itself (JSON) rather than its URL."""
    return source.lstrip().startswith("{")


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


def _inline(source: str) -> KeySet:
    try:
        document: Any = json.loads(source)
    except ValueError as exc:
        raise ConfigurationError(f"a trusted issuer's inline JWKS: {exc}") from exc
    if not isinstance(document, dict):
        raise ConfigurationError("a trusted issuer's inline JWKS must be a JSON object")
    return jwt.key_set(document)


class KeySets:
    """Keys by configured source (an inline JWKS or a JWKS URL); see the module docstring.

    Raises:
        ConfigurationError: a source is neither a JSON object nor an https URL.
    """

    def __init__(
        self, sources: Iterable[str], gate: Gate, *, clock: Callable[[], float] = wall_clock
    ) -> None:
        self._inline: dict[str, KeySet] = {}
        urls: set[str] = set()
        for source in sources:
            if is_inline(source):
                self._inline[source] = _inline(source)
            else:
                url_host(source)
                urls.add(source)
        self._urls = frozenset(urls)
        policy = replace(POLICY, max_sources=max(1, len(urls)))
        self._cache = KeySetCache(
            gate.fetch_json, jwt.key_set, policy, clock=clock, name="trusted issuer keys"
        )

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
        return await self._cache.get(source, kid=kid, requester=requester)

    def loaded(self, source: str) -> KeySet | None:
        """The keys :meth:`load` last obtained for ``source`` (fresh or not), from memory only;
        None if it never has. Safe to call from any thread."""
        inline = self._inline.get(source)
        if inline is not None:
            return inline
        return self._cache.peek(source) if source in self._urls else None


class IdentityProviders:
    def __init__(self, configured: Mapping[str, str], key_sets: KeySets) -> None:
        self._configured = dict(configured)
        self._key_sets = key_sets

    def is_trusted(self, issuer: str) -> bool:
        return issuer in self._configured

    async def load(self, issuer: str, *, kid: str | None, requester: str) -> None:
        """Have ``issuer``'s keys in memory for :meth:`verify` (fetched now if they are
        missing, stale, or lack ``kid``); nothing for an issuer that is not trusted (then
        :meth:`verify` refuses the assertion). On the event loop.

        Raises:
            TemporarilyUnavailable: the keys cannot be loaded now.
        """
        source = self._configured.get(issuer)
        if source is not None:
            await self._key_sets.load(source, kid=kid, requester=requester)

    def keys(self, issuer: str) -> KeySet:
        """The issuer's keys as last loaded, from memory.

        Raises:
            InvalidGrant: the issuer is not trusted.
            TemporarilyUnavailable: its keys were never loaded.
        """
        source = self._configured.get(issuer)
        if source is None:
            raise InvalidGrant("The assertion's issuer is not a trusted identity provider")
        keys = self._key_sets.loaded(source)
        if keys is None:
            raise TemporarilyUnavailable(UNAVAILABLE, headers={"Retry-After": "1"})
        return keys

    def verify(
        self,
        assertion: str,
        issuer: str,
        *,
        typ: tuple[str, ...] | None,
        required: tuple[str, ...],
        what: str,
    ) -> dict[str, Any]:
        """The claims of ``assertion`` signed by ``issuer``'s keys as :meth:`load` left them
        (it refetched them for an unknown ``kid`` if it could); ``aud`` is left to the caller.
        ``what`` names the assertion in the errors.

        Raises:
            InvalidGrant: an unknown key, or any other check failed.
            TemporarilyUnavailable: the issuer's keys were never loaded.
        """
        keys = self.keys(issuer)
        try:
            return jwt.verify(
                assertion, keys, issuer=issuer, audience=None, typ=typ, required=required
            )
        except jwt.UnknownKeyError:
            raise InvalidGrant(f"{what} is signed with an unknown key") from None
        except OAuthError as exc:
            raise InvalidGrant(f"{what} is invalid: {exc.description}") from exc
