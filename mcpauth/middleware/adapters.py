"""Verifiers between mcpauth and the official MCP Python SDK, in both directions.

The SDK's ``TokenVerifier`` protocol has the same method name as mcpauth's but another
contract: it returns the SDK's ``AccessToken`` or ``None`` where mcpauth's returns a
:class:`~mcpauth.middleware.verifier.VerifiedToken` or raises ``InvalidToken``.

- :class:`FromSDK` makes an SDK verifier usable where mcpauth expects one (the middleware's
  ``verifier=``, :class:`~mcpauth.middleware.MultiIssuerVerifier`). Passed there unwrapped, a
  verifier recognisably written for the SDK is refused at construction with a ``TypeError``.
- :class:`ForSDK` makes an mcpauth verifier usable as the SDK's ``token_verifier=``. The SDK
  lets a verifier say only yes or no, so while the authorization server is unreachable ForSDK
  says no (the SDK answers 401) and logs a warning; mcpauth's own middleware answers 503.
- :func:`verified_from` turns what either kind returns into a ``VerifiedToken``. The middleware
  applies it to every result, so a verifier whose type gave nothing away at construction and
  returns an ``AccessToken`` still has its audience checked and never causes a 500.

An SDK verifier's token is accepted only when it says it was issued for this resource
(``AccessToken.resource``), unless ``audience_checked=True`` says the verifier checked the
audience itself (RFC 8707 §2: a resource server accepts only tokens issued for it).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from mcpauth.errors import FetchError, InvalidToken, OAuthError
from mcpauth.middleware._http import AsyncClosing
from mcpauth.middleware._sdk import access_token
from mcpauth.middleware.verifier import (
    TokenVerifier,
    VerifiedToken,
    require_token_verifier,
    scope_claim,
)

if TYPE_CHECKING:
    from mcp.server.auth.provider import AccessToken

__all__ = ["ForSDK", "FromSDK", "verified_from"]

logger = logging.getLogger("mcpauth.middleware")


async def _close(verifier: object) -> None:
    close = getattr(verifier, "aclose", None)
    if close is not None:
        await close()


def verified_from(result: Any, resource: str, *, audience_checked: bool = False) -> VerifiedToken:
    """A ``VerifiedToken`` from what a verifier returned: one already, or the SDK's
    ``AccessToken`` (or ``None``).

    Raises:
        InvalidToken: ``None``, an object of neither kind, or a token for another resource.
    """
    if isinstance(result, VerifiedToken):
        return result
    if result is None:
        raise InvalidToken("The access token is not valid")
    client_id = getattr(result, "client_id", None)
    scopes = getattr(result, "scopes", None)
    if not isinstance(client_id, str) or not isinstance(scopes, list | tuple):
        raise InvalidToken("The access token could not be verified")
    issued_for = getattr(result, "resource", None)
    if issued_for != resource and not (issued_for is None and audience_checked):
        raise InvalidToken("The access token was not issued for this resource")
    claims = dict(getattr(result, "claims", None) or {})
    expires_at = getattr(result, "expires_at", None)
    return VerifiedToken(
        subject=getattr(result, "subject", None) or claims.get("sub"),
        client_id=client_id,
        scopes=scope_claim(list(scopes)),
        expires_at=expires_at if isinstance(expires_at, int) else None,
        issuer=claims.get("iss") if isinstance(claims.get("iss"), str) else None,
        resource=resource,
        claims=claims,
    )


class FromSDK(AsyncClosing):
    """An SDK-style verifier (``verify_token`` returns ``AccessToken | None``) as an mcpauth
    :class:`~mcpauth.middleware.verifier.TokenVerifier` for ``resource``. :meth:`aclose` (or
    ``async with``) closes the wrapped verifier if it can be closed.

    Raises:
        TypeError: ``verifier`` has no ``verify_token``.
    """

    def __init__(self, verifier: Any, *, resource: str, audience_checked: bool = False) -> None:
        if not callable(getattr(verifier, "verify_token", None)):
            raise TypeError(f"FromSDK needs a verifier with verify_token, not {verifier!r}")
        self.verifier = verifier
        self.resource = resource
        self.audience_checked = audience_checked

    async def verify_token(self, token: str) -> VerifiedToken:
        """Raises:
        InvalidToken: the SDK verifier refused the token, or it is for another resource.
        """
        result = await self.verifier.verify_token(token)
        return verified_from(result, self.resource, audience_checked=self.audience_checked)

    async def aclose(self) -> None:
        await _close(self.verifier)


class ForSDK(AsyncClosing):
    """An mcpauth verifier as the SDK's ``token_verifier=`` (``MCPServer``/``FastMCP``):
    the SDK's ``AccessToken`` for a good token, ``None`` for any other, and ``None`` (with a
    warning logged) while the verifier cannot decide (any other mcpauth error, or a
    :class:`~mcpauth.errors.FetchError`). :meth:`aclose` (or ``async with``) closes
    the wrapped verifier.

    Raises:
        TypeError: ``verifier`` is not an mcpauth verifier (an SDK verifier needs no adapter).
    """

    def __init__(self, verifier: TokenVerifier) -> None:
        self.verifier = require_token_verifier(verifier, "ForSDK")

    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            verified = await self.verifier.verify_token(token)
        except InvalidToken:
            return None
        except OAuthError as exc:  # 503 or 500 in mcpauth; the SDK would turn a raise into 500
            logger.warning("cannot verify a token right now: %s", exc.description or exc.error)
            return None
        except FetchError as exc:
            logger.warning("cannot verify a token right now: %s", exc.message)
            return None
        sdk_token: AccessToken | None = access_token(verified, token)  # the SDK's own type
        return sdk_token

    async def aclose(self) -> None:
        await _close(self.verifier)
