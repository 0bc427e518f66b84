"""The one place the MCP Python SDK is touched, and only when it is installed.

The SDK recognises an authenticated caller by ``isinstance(user, AuthenticatedUser)`` and
reads it from a context variable in ``get_access_token()``; neither can be imitated, so this
adapter builds the SDK's own objects. The import happens on first use, never at import time.
"""

from __future__ import annotations

import importlib.util
from functools import cache
from typing import Any

from starlette.authentication import BaseUser

from mcpauth.middleware.verifier import VerifiedToken


@cache
def _sdk() -> Any:
    if importlib.util.find_spec("mcp") is None:
        return None
    try:
        from mcp.server.auth.middleware import auth_context, bearer_auth
        from mcp.server.auth.provider import AccessToken
    except ImportError:
        return None
    return (bearer_auth.AuthenticatedUser, AccessToken, auth_context.auth_context_var)


def available() -> bool:
    """True when the SDK's auth types can be used."""
    return _sdk() is not None


def access_token(token: VerifiedToken, handle: str) -> Any:
    """The SDK's ``AccessToken`` for ``token`` (``handle`` goes in its ``token`` field), or
    ``None`` without the SDK."""
    sdk = _sdk()
    if sdk is None:
        return None
    return sdk[1](
        token=handle,
        client_id=token.client_id,
        scopes=list(token.scopes),
        expires_at=token.expires_at,
        resource=token.resource,
        subject=token.subject,
        claims=dict(token.claims),
    )


def authenticated_user(token: VerifiedToken, digest: bytes) -> BaseUser | None:
    """An SDK ``AuthenticatedUser`` for ``token``, or ``None`` without the SDK. The app sees a
    digest of the token, never the token."""
    sdk = _sdk()
    if sdk is None:
        return None
    user: BaseUser = sdk[0](access_token(token, "sha256:" + digest.hex()))
    return user


def context_var(user: BaseUser) -> Any:
    """The SDK's auth context variable, which the middleware sets to ``user`` around the
    application call; ``None`` without the SDK or for a user that is not the SDK's own."""
    sdk = _sdk()
    if sdk is None or not isinstance(user, sdk[0]):
        return None
    return sdk[2]
