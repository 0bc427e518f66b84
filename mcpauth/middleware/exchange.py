"""Tokens for the APIs behind an MCP server, for the current caller: RFC 8693 token exchange at the
authorization server, so a tool never forwards the caller's token (MCP RS-17).

``await exchanger.token_for("https://other.example/mcp")`` inside a tool (or any code running in a
request the middleware let through) exchanges the caller's token, which the middleware keeps out of
the application's sight, for a token for that resource; ``await exchanger.upstream_token("corp")``
for the caller's own token at the identity provider they signed in with (``audience`` = the
provider's id), to call its API as them. Answers are cached per caller, target and scope until
shortly before they expire (bounded in memory). The exchanger authenticates as the MCP server's own
confidential client, registered with the token-exchange grant and the rights to exchange (``mcpauth
clients add --grant-type urn:ietf:params:oauth:grant-type:token-exchange --exchange-from THIS_URL
--exchange-to URL``)."""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Callable

import anyio
import httpx2

from mcpauth.caching import wall_clock
from mcpauth.errors import FetchError, error_for
from mcpauth.middleware import identity
from mcpauth.middleware._discovery import capped_body, check_fetch_url, discover_metadata
from mcpauth.middleware._http import AsyncClosing, LazyClient
from mcpauth.oauth import TOKEN_EXCHANGE

__all__ = ["NoCaller", "TokenExchanger"]

ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"
MARGIN_SECONDS = 30  # an exchanged token is not handed out in its last half minute
MAX_RESPONSE_BYTES = 64 * 1024


class NoCaller(RuntimeError):
    """:meth:`TokenExchanger.token_for` was called outside a request the middleware let
    through, and no ``subject_token`` was given."""


class TokenExchanger(AsyncClosing):
    """Exchanges the current caller's token for tokens for other resources (see the module
    docstring). ``token_endpoint`` is found from ``issuer``'s metadata when not given."""

    def __init__(
        self,
        *,
        issuer: str,
        client_id: str,
        client_secret: str,
        token_endpoint: str | None = None,
        http: httpx2.AsyncClient | None = None,
        max_entries: int = 1000,
        clock: Callable[[], float] = wall_clock,
    ) -> None:
        self.issuer = issuer
        self._auth = (client_id, client_secret)
        self._token_endpoint = check_fetch_url(token_endpoint) if token_endpoint else None
        self._http = LazyClient(http)
        self._max_entries = max_entries
        self._clock = clock
        self._cache: OrderedDict[tuple[bytes, str, str, str], tuple[str, float]] = OrderedDict()
        self._lock = anyio.Lock()

    async def _endpoint(self) -> str:
        if self._token_endpoint is None:
            metadata = await discover_metadata(self._http.get(), self.issuer)
            if not metadata.token_endpoint:
                raise FetchError(f"{self.issuer} publishes no token_endpoint")
            self._token_endpoint = check_fetch_url(metadata.token_endpoint)
        return self._token_endpoint

    async def token_for(
        self, resource: str, *, scope: str | None = None, subject_token: str | None = None
    ) -> str:
        """An access token for ``resource`` on behalf of the current caller.

        Raises:
            NoCaller: no caller in this context and no ``subject_token``.
            OAuthError: the authorization server refused (its error, e.g. ``invalid_target``).
            FetchError: the authorization server could not be reached.
        """
        target = {"resource": resource}
        if scope:
            target["scope"] = scope
        return await self._cached(target, subject_token)

    async def upstream_token(self, provider: str, *, subject_token: str | None = None) -> str:
        """The current caller's own access token at the identity provider ``provider`` (its
        ``id`` in the authorization server's ``[[mcpauth.upstream]]``), to call that
        provider's API as the caller. The provider must keep tokens and release them to this
        MCP server (``keep_tokens``, ``release_to``); the authorization server refreshes it
        when it has expired.

        Raises:
            NoCaller: no caller in this context and no ``subject_token``.
            OAuthError: refused: ``invalid_target`` (not released to this server),
                ``invalid_grant`` (nothing kept: the person must sign in through it again),
                ``temporarily_unavailable`` (the provider is down).
            FetchError: the authorization server could not be reached.
        """
        return await self._cached({"audience": provider}, subject_token)

    async def _cached(self, target: dict[str, str], subject_token: str | None) -> str:
        subject = subject_token or identity.subject_token()
        if subject is None:
            raise NoCaller("a token exchange needs a request the middleware authenticated")
        kind, name = (
            ("resource", target["resource"])
            if "resource" in target
            else (
                "audience",
                target["audience"],
            )
        )
        key = (hashlib.sha256(subject.encode()).digest(), kind, name, target.get("scope", ""))
        now = self._clock()
        cached = self._cache.get(key)
        if cached is not None and cached[1] > now:
            self._cache.move_to_end(key)
            return cached[0]
        token, expires_in = await self._exchange(subject, target)
        async with self._lock:
            self._cache[key] = (token, now + max(0, expires_in - MARGIN_SECONDS))
            while len(self._cache) > self._max_entries:
                self._cache.popitem(last=False)
        return token

    async def _exchange(self, subject: str, target: dict[str, str]) -> tuple[str, int]:
        form = {
            "grant_type": TOKEN_EXCHANGE,
            "subject_token": subject,
            "subject_token_type": ACCESS_TOKEN_TYPE,
            "requested_token_type": ACCESS_TOKEN_TYPE,
            **target,
        }
        url = await self._endpoint()
        try:
            async with self._http.get().stream(
                "POST", url, data=form, auth=self._auth, follow_redirects=False
            ) as response:
                content = await capped_body(response, url, MAX_RESPONSE_BYTES)
        except httpx2.HTTPError as exc:
            raise FetchError(f"cannot reach {url}: {type(exc).__name__}") from exc
        try:
            body = json.loads(content)
        except ValueError as exc:
            raise FetchError(f"{url} answered {response.status_code} without JSON") from exc
        if response.status_code != 200:
            raise error_for(body) if isinstance(body, dict) else FetchError(str(url))
        if not isinstance(body, dict):
            raise FetchError(f"{url} answered 200 with JSON that is not an object")
        token, expires_in = body.get("access_token"), body.get("expires_in", 0)
        if not isinstance(token, str) or not isinstance(expires_in, int):
            raise FetchError(f"{url} answered without an access token")
        return token, expires_in

    async def aclose(self) -> None:
        await self._http.aclose()
