"""Authorization server metadata discovery (RFC 8414 §3, then OpenID Connect Discovery),
bounded JSON fetching for the resource server, and :class:`FetchGate`, which coalesces and
backs off fetches from an authorization server that is failing.

A failed fetch raises :class:`~mcpauth.errors.FetchError`, whose message names the URL: it is
logged. Callers get :func:`unavailable` instead: a 503 that names nothing internal."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import anyio
import httpx2
from pydantic import ValidationError

from mcpauth.caching import wall_clock
from mcpauth.errors import ConfigurationError, FetchError, TemporarilyUnavailable
from mcpauth.metadata import AuthorizationServerMetadata
from mcpauth.uris import authorization_server_metadata_urls, secure_or_loopback

MAX_DOCUMENT_BYTES = 256 * 1024


metadata_urls = authorization_server_metadata_urls  # the discovery order (CL-04)


def check_fetch_url(url: str) -> str:
    """Only https, or http on a loopback host (RFC 8414 §2, OAuth 2.1 §1.5).

    Raises:
        ConfigurationError: any other URL.
    """
    if secure_or_loopback(url):
        return url
    raise ConfigurationError(f"refusing to fetch {url!r}: https is required")


async def capped_body(response: httpx2.Response, url: str, limit: int) -> bytes:
    """The body of a streamed response, refused as soon as it passes ``limit`` bytes: the one
    response-size rule of every fetch the middleware makes.

    Raises:
        FetchError: the body is larger than ``limit``.
        httpx2.HTTPError: the transfer failed.
    """
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body.extend(chunk)
        if len(body) > limit:
            raise FetchError(f"{url} sent more than {limit} bytes")
    return bytes(body)


async def fetch_json(http: httpx2.AsyncClient, url: str) -> tuple[dict[str, Any], httpx2.Headers]:
    """GET a JSON object of at most :data:`MAX_DOCUMENT_BYTES`, following no redirects.

    Raises:
        FetchError: network failure, non-200, too large or not a JSON object.
        ConfigurationError: the URL is not https (or loopback http).
    """
    check_fetch_url(url)
    try:
        async with http.stream(
            "GET", url, headers={"Accept": "application/json"}, follow_redirects=False
        ) as response:
            if response.status_code != 200:
                raise FetchError(f"{url} answered {response.status_code}")
            body = await capped_body(response, url, MAX_DOCUMENT_BYTES)
            headers = response.headers
    except httpx2.HTTPError as exc:
        raise FetchError(f"cannot fetch {url}: {type(exc).__name__}") from exc
    try:
        document = json.loads(body)
    except ValueError as exc:
        raise FetchError(f"{url} did not return JSON") from exc
    if not isinstance(document, dict):
        raise FetchError(f"{url} did not return a JSON object")
    return document, headers


async def discover_metadata(http: httpx2.AsyncClient, issuer: str) -> AuthorizationServerMetadata:
    """Fetch the metadata of ``issuer``: RFC 8414 first, then OpenID Connect Discovery.

    Raises:
        FetchError: no discovery URL gave a valid document whose ``issuer`` is ``issuer``.
    """
    failures: list[str] = []
    for url in metadata_urls(issuer):
        try:
            document, _ = await fetch_json(http, url)
            metadata = AuthorizationServerMetadata.model_validate(document)
        except (FetchError, ValidationError) as exc:
            failures.append(str(exc).splitlines()[0])
            continue
        # RFC 8414 §3.3: the issuer in the document MUST be identical to the one we asked for.
        if metadata.issuer != issuer:
            failures.append(f"{url} names issuer {metadata.issuer!r}")
            continue
        return metadata
    raise FetchError(f"no usable metadata for {issuer}: " + "; ".join(failures))


UNAVAILABLE = "The authorization server is unavailable; try again later"


class FetchGate:
    """Keeps a failing authorization server from being stormed: one fetch in flight at a time
    (``lock``; callers that waited on it share the outcome through :meth:`check`), and after a
    failure no new attempt for a growing, bounded delay (``backoff`` doubling up to
    ``max_backoff``). ``clock`` (seconds since the epoch; :func:`mcpauth.caching.wall_clock` by
    default) is injectable, and every time the gate's owner reads goes through :meth:`now`."""

    def __init__(
        self,
        *,
        backoff: float = 1.0,
        max_backoff: float = 60.0,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.lock = anyio.Lock()
        self.failures = 0
        self._clock = clock or wall_clock
        self._retry_at = float("-inf")

    def now(self) -> float:
        return self._clock()

    def check(self) -> None:
        """Refuse at once while a failure's back-off lasts.

        Raises:
            TemporarilyUnavailable: the plain "unavailable" error, with ``Retry-After``.
        """
        remaining = self._retry_at - self.now()
        if remaining > 0:
            raise unavailable(remaining)

    def failed(self) -> float:
        """Record a failure; the seconds until the next attempt."""
        self.failures += 1
        delay = min(self.backoff * 2.0 ** min(self.failures - 1, 32), self.max_backoff)
        self._retry_at = self.now() + delay
        return delay

    def succeeded(self) -> None:
        self.failures = 0
        self._retry_at = float("-inf")


def unavailable(retry_after: float, message: str = UNAVAILABLE) -> TemporarilyUnavailable:
    """The error callers see: no URL in it, a ``Retry-After`` of whole seconds (at least 1)."""
    retry = str(max(1, math.ceil(retry_after)))
    return TemporarilyUnavailable(message, headers={"Retry-After": retry})
