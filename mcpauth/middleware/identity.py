"""The caller as the application sees it.

After a request is authenticated the ASGI scope carries:

- ``scope["user"]``: a Starlette ``BaseUser`` (``request.user``), authenticated. When the MCP
  Python SDK is installed it is the SDK's own ``AuthenticatedUser`` whose ``access_token`` holds
  ``client_id``, ``scopes``, ``expires_at``, ``resource``, ``subject`` and the claims, so the
  SDK's session ownership checks and ``get_access_token()`` see the caller. The raw token is
  never handed over (MCP RS-17): ``access_token.token`` is ``"sha256:<digest>"``.
- ``scope["auth"]``: ``starlette.authentication.AuthCredentials`` with the granted scopes.
- ``scope["mcpauth.token"]``: the :class:`VerifiedToken`; read it with :func:`verified_token`,
  or with :func:`current_token` anywhere in the request's task (tools included).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from starlette.authentication import AuthCredentials, BaseUser, SimpleUser

from mcpauth.middleware import _sdk
from mcpauth.middleware._asgi import Scope
from mcpauth.middleware.verifier import VerifiedToken

__all__ = ["TokenUser", "current_token", "verified_token"]

SCOPE_KEY = "mcpauth.token"
_current: ContextVar[VerifiedToken | None] = ContextVar("mcpauth_token", default=None)
# The caller's raw token, for token exchange only (mcpauth.middleware.exchange): never in the
# scope, never sent anywhere but to the authorization server that issued it.
_subject: ContextVar[str | None] = ContextVar("mcpauth_subject_token", default=None)


class TokenUser(SimpleUser):
    """``request.user`` when the MCP SDK is not installed: named by subject (or client)."""

    def __init__(self, token: VerifiedToken) -> None:
        super().__init__(token.subject or token.client_id)
        self.token = token
        self.client_id = token.client_id
        self.scopes = list(token.scopes)


def verified_token(conn: Any) -> VerifiedToken | None:
    """The caller's token from an ASGI scope or anything with a ``.scope`` (a Request)."""
    scope = conn if isinstance(conn, dict) else getattr(conn, "scope", {})
    token = scope.get(SCOPE_KEY)
    return token if isinstance(token, VerifiedToken) else None


def current_token() -> VerifiedToken | None:
    """The caller's token in the current request's context (works inside MCP tools)."""
    return _current.get()


def subject_token() -> str | None:
    """The current caller's token, for :class:`~mcpauth.middleware.exchange.TokenExchanger`."""
    return _subject.get()


def make_user(token: VerifiedToken, digest: bytes) -> BaseUser:
    """The object for ``scope["user"]`` (see the module docstring)."""
    sdk_user = _sdk.authenticated_user(token, digest)
    return sdk_user if sdk_user is not None else TokenUser(token)


@contextmanager
def bound(
    scope: Scope, token: VerifiedToken, user: BaseUser, raw: str | None = None
) -> Iterator[None]:
    """Put the caller in ``scope`` and in the context for the duration of the request
    (``raw``, the token itself, only in the context, for token exchange)."""
    scope["user"] = user
    scope["auth"] = AuthCredentials(list(token.scopes))
    scope[SCOPE_KEY] = token
    reset = _current.set(token)
    reset_subject = _subject.set(raw)
    try:
        with _sdk.sdk_context(user):
            yield
    finally:
        _subject.reset(reset_subject)
        _current.reset(reset)
