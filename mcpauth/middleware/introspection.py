"""RFC 7662 token introspection: for opaque tokens, or when revocation must take effect at
once. The resource server authenticates to the introspection endpoint (RFC 7662 §2.1).

An authorization server that fails is not stormed: discovering the endpoint is coalesced (one
discovery in flight), and after a failed discovery or an unreachable or failing (5xx)
introspection endpoint no new call is made for a growing, bounded back-off; requests in that
window get 503 with ``Retry-After`` at once (:class:`~mcpauth.middleware._discovery.FetchGate`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import httpx2

from mcpauth.errors import (
    ConfigurationError,
    FetchError,
    InvalidToken,
    ServerError,
    TemporarilyUnavailable,
)
from mcpauth.middleware._discovery import (
    MAX_DOCUMENT_BYTES,
    FetchGate,
    capped_body,
    check_fetch_url,
    discover_metadata,
    unavailable,
)
from mcpauth.middleware._http import AsyncClosing, LazyClient
from mcpauth.middleware.verifier import VerifiedToken, scope_claim
from mcpauth.oauth import basic_authorization

__all__ = ["IntrospectionVerifier"]

logger = logging.getLogger("mcpauth.middleware")


def _audiences(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [item for item in value if isinstance(item, str)]
    return []


class IntrospectionVerifier(AsyncClosing):
    """Ask the authorization server whether a token is active (RFC 7662).

    The endpoint is ``endpoint`` or the ``introspection_endpoint`` of ``issuer``'s metadata.
    A positive answer is reused for at most ``cache_seconds`` and never past the token's
    ``exp``; an answer without ``exp`` is not reused at all. ``http`` is yours to close;
    without it a client is created on the first call and closed by :meth:`aclose` (or
    ``async with``).

    Raises:
        ValueError: neither ``endpoint`` nor ``issuer``.
        ConfigurationError: ``endpoint`` is neither https nor loopback http.
    """

    def __init__(
        self,
        *,
        resource: str,
        client_id: str,
        client_secret: str,
        http: httpx2.AsyncClient | None = None,
        issuer: str | None = None,
        endpoint: str | None = None,
        cache_seconds: float = 60.0,
        leeway: float = 30.0,
        failure_backoff: float = 1.0,
        max_failure_backoff: float = 60.0,
        clock: Callable[[], float] | None = None,
    ) -> None:
        if endpoint is None and issuer is None:
            raise ValueError("IntrospectionVerifier needs an endpoint or an issuer to discover it")
        self.resource = resource
        self.issuer = issuer
        # A plain-http endpoint is refused here, not by every request (a 500 each time).
        self.endpoint = None if endpoint is None else check_fetch_url(endpoint)
        self._client = LazyClient(http)
        self.cache_seconds = cache_seconds
        self.leeway = leeway
        self._authorization = basic_authorization(client_id, client_secret)
        self._gate = FetchGate(
            backoff=failure_backoff, max_backoff=max_failure_backoff, clock=clock
        )

    @property
    def http(self) -> httpx2.AsyncClient | None:
        """The HTTP client in use (``None`` until the first call when none was given)."""
        return self._client.current

    async def aclose(self) -> None:
        """Close the HTTP client created here, if any (a given one is left open)."""
        await self._client.aclose()

    async def verify_token(self, token: str) -> VerifiedToken:
        """Introspect ``token`` and check it is active and meant for this resource.

        Raises:
            InvalidToken: inactive, expired, for another resource or from another issuer.
            TemporarilyUnavailable: the endpoint cannot be reached or answered 5xx.
            ServerError: the endpoint refused our client credentials.
        """
        data = await self._introspect(token)
        if data.get("active") is not True:
            raise InvalidToken("The access token is not active")
        # RFC 8707 §2 / MCP RS-09: the audience check is always on.
        if self.resource not in _audiences(data.get("aud")):
            raise InvalidToken("The access token was not issued for this resource")
        if self.issuer is not None and data.get("iss", self.issuer) != self.issuer:
            raise InvalidToken("The access token was issued by an untrusted issuer")
        return self._to_verified(data)

    def _to_verified(self, data: dict[str, Any]) -> VerifiedToken:
        now = self._gate.now()
        exp = data.get("exp")
        expires_at = int(exp) if isinstance(exp, int | float) else None
        if expires_at is not None and expires_at + self.leeway < now:
            raise InvalidToken("The access token has expired")
        client_id = data.get("client_id")
        subject = data.get("sub")
        if not isinstance(client_id, str) or not isinstance(subject, str | None):
            raise InvalidToken("The introspection response lacks client_id")
        cache_until = now + self.cache_seconds if expires_at is not None else now
        return VerifiedToken(
            subject=subject,
            client_id=client_id,
            scopes=scope_claim(data.get("scope")),
            expires_at=expires_at,
            issuer=str(data["iss"]) if "iss" in data else self.issuer,
            resource=self.resource,
            claims=data,
            cache_until=cache_until,
        )

    async def _introspect(self, token: str) -> dict[str, Any]:
        endpoint = await self._endpoint()
        self._gate.check()
        try:
            data = await self._post(endpoint, token)
        except TemporarilyUnavailable as exc:
            delay = self._gate.failed()
            logger.warning("introspection failed (next try in %.0fs): %s", delay, exc.description)
            raise unavailable(delay) from exc
        self._gate.succeeded()
        return data

    async def _post(self, endpoint: str, token: str) -> dict[str, Any]:
        try:
            async with self._client.get().stream(
                "POST",
                endpoint,
                data={"token": token, "token_type_hint": "access_token"},
                headers={"Authorization": self._authorization, "Accept": "application/json"},
                follow_redirects=False,
            ) as response:
                content = await capped_body(response, endpoint, MAX_DOCUMENT_BYTES)
        except httpx2.HTTPError as exc:
            raise TemporarilyUnavailable("The introspection endpoint cannot be reached") from exc
        except FetchError as exc:
            raise TemporarilyUnavailable("The introspection response is too large") from exc
        if response.status_code in (401, 403):
            raise ServerError("The introspection endpoint refused this resource server")
        if response.status_code != 200:
            raise TemporarilyUnavailable("The introspection endpoint failed")
        try:
            data = json.loads(content)
        except ValueError as exc:
            raise TemporarilyUnavailable("The introspection response is not JSON") from exc
        if not isinstance(data, dict):
            raise TemporarilyUnavailable("The introspection response is not a JSON object")
        return data

    async def _endpoint(self) -> str:
        if self.endpoint is None:
            if self.issuer is None:
                raise ServerError("No introspection endpoint configured")
            self._gate.check()
            async with self._gate.lock:
                if self.endpoint is None:
                    # Callers that queued behind a failed discovery share its outcome.
                    self._gate.check()
                    self.endpoint = await self._discover(self.issuer)
        return self.endpoint  # checked where it came from: the constructor or the discovery

    async def _discover(self, issuer: str) -> str:
        try:
            metadata = await discover_metadata(self._client.get(), issuer)
            if not metadata.introspection_endpoint:
                raise FetchError(f"{issuer} publishes no introspection_endpoint")
            endpoint = check_fetch_url(metadata.introspection_endpoint)
        except (FetchError, ConfigurationError) as exc:
            delay = self._gate.failed()
            logger.warning(
                "cannot discover the introspection endpoint (next try in %.0fs): %s", delay, exc
            )
            raise unavailable(delay) from exc
        self._gate.succeeded()
        return endpoint
