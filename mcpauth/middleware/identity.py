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

from contextvars import ContextVar, Token
from typing import Any

from starlette.authentication import AuthCredentials, BaseUser, SimpleUser

from mcpauth.middleware import _sdk
from mcpauth.middleware._asgi import Scope
from mcpauth.middleware.verifier import VerifiedToken

__all__ = ["TokenUser", "current_token", "verified_token"]

SCOPE_KEY = "mcpauth.token"
# The caller's verified token, and its raw token for token exchange only
# (mcpauth.middleware.exchange): that one never in the scope, never sent anywhere but to the
# authorization server that issued it. One variable for both: one set and one reset a request.
_current: ContextVar[tuple[VerifiedToken, str | None] | None] = ContextVar(
    "mcpauth_token", default=None
)


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
    current = _current.get()
    return None if current is None else current[0]


def subject_token() -> str | None:
    """The current caller's token, for :class:`~mcpauth.middleware.exchange.TokenExchanger`."""
    current = _current.get()
    return None if current is None else current[1]


def make_user(token: VerifiedToken, digest: bytes) -> BaseUser:
    """The object for ``scope["user"]`` (see the module docstring)."""
    sdk_user = _sdk.authenticated_user(token, digest)
    return sdk_user if sdk_user is not None else TokenUser(token)


Resets = tuple["Token[tuple[VerifiedToken, str | None] | None]", Any]


class Caller:
    """A verified token and everything the application is shown of it, built once per token
    (the middleware keeps it with the token) and put in place around each of its requests
    with :meth:`enter` and :meth:`leave`. ``scope["auth"]`` is made per request: its list of
    scopes is the application's to change."""

    __slots__ = ("_sdk_var", "token", "user")

    def __init__(self, token: VerifiedToken, digest: bytes) -> None:
        self.token = token
        self.user = make_user(token, digest)
        self._sdk_var = _sdk.context_var(self.user)

    def enter(self, scope: Scope, raw: str | None = None) -> Resets:
        """Put the caller in ``scope`` and in the context (``raw``, the token itself, only in
        the context, for token exchange); hand what this returns to :meth:`leave`."""
        token = self.token
        scope["user"] = self.user
        scope["auth"] = AuthCredentials(token.scopes)
        scope[SCOPE_KEY] = token
        sdk = self._sdk_var
        return _current.set((token, raw)), None if sdk is None else sdk.set(self.user)

    def leave(self, resets: Resets) -> None:
        """Take the caller out of the context again, when its request is over."""
        current, sdk = resets
        if sdk is not None:
            self._sdk_var.reset(sdk)
        _current.reset(current)
