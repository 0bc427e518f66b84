"""Verifiers between mcpauth and the official MCP Python SDK, in both directions.

The SDK's ``TokenVerifier`` protocol has the same method name as mcpauth's but another
contract: it returns the SDK's ``AccessToken`` or ``None`` where mcpauth's returns a
:class:`~mcpauth.middleware.verifier.VerifiedToken` or raises ``InvalidToken``.

- :func:`verified_from` turns what either kind returns into a ``VerifiedToken`` (the
  middleware applies it to every verifier, so an SDK verifier passed as ``verifier=`` works and
  never yields a 500); :class:`FromSDK` does the same as a named wrapper.
- :class:`ForSDK` makes an mcpauth verifier usable as the SDK's ``token_verifier=``.

An SDK verifier's token is accepted only when it says it was issued for this resource
(``AccessToken.resource``), unless ``audience_checked=True`` says the verifier checked the
audience itself (RFC 8707 §2: a resource server accepts only tokens issued for it).
"""

from __future__ import annotations

from typing import Any

from mcpauth.errors import InvalidToken
from mcpauth.middleware._sdk import access_token
from mcpauth.middleware.verifier import TokenVerifier, VerifiedToken, parse_scope

__all__ = ["ForSDK", "FromSDK", "verified_from"]


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
        scopes=parse_scope(list(scopes)),
        expires_at=expires_at if isinstance(expires_at, int) else None,
        issuer=claims.get("iss") if isinstance(claims.get("iss"), str) else None,
        resource=resource,
        claims=claims,
    )


class FromSDK:
    """An SDK-style verifier (``verify_token`` returns ``AccessToken | None``) as an mcpauth
    :class:`~mcpauth.middleware.verifier.TokenVerifier` for ``resource``."""

    def __init__(self, verifier: Any, *, resource: str, audience_checked: bool = False) -> None:
        self.verifier = verifier
        self.resource = resource
        self.audience_checked = audience_checked

    async def verify_token(self, token: str) -> VerifiedToken:
        """Raises:
        InvalidToken: the SDK verifier refused the token, or it is for another resource.
        """
        result = await self.verifier.verify_token(token)
        return verified_from(result, self.resource, audience_checked=self.audience_checked)


class ForSDK:
    """An mcpauth verifier as the SDK's ``token_verifier=`` (``FastMCP``/``MCPServer``
    ``token_verifier``): ``AccessToken`` for a good token, ``None`` for any other."""

    def __init__(self, verifier: TokenVerifier) -> None:
        self.verifier = verifier

    async def verify_token(self, token: str) -> Any:
        try:
            verified = await self.verifier.verify_token(token)
        except InvalidToken:
            return None
        return access_token(verified, token)  # the SDK's own type (it is installed: it asked)
