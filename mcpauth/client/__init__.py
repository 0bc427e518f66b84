"""Token acquisition for MCP clients: discovery, registration, PKCE, refresh and step-up.

    from mcpauth.client import OAuth, FileStorage

    auth = OAuth("https://mcp.example.com/mcp", storage=FileStorage())
    httpx.get(url, auth=auth)                         # or httpx2.AsyncClient(auth=auth)

Imports nothing from ``mcpauth.server``.
"""

from mcpauth.client.auth import OAuth
from mcpauth.client.authorization import PendingAuthorization, select_scope
from mcpauth.client.callback import (
    CallableRedirectHandler,
    LoopbackRedirectHandler,
    RedirectHandler,
)
from mcpauth.client.challenge import BearerChallenge, parse_bearer_challenge
from mcpauth.client.credentials import ClientCredentials
from mcpauth.client.discovery import Discovery
from mcpauth.client.enterprise import IdentityAssertion
from mcpauth.client.errors import (
    AuthorizationFailed,
    CallbackTimeout,
    ClientError,
    DiscoveryError,
    IssuerMismatch,
    LoginRequired,
    PKCENotSupported,
    RegistrationError,
    ResourceMismatch,
    TokenRequestFailed,
    UnsafeURL,
)
from mcpauth.client.storage import FileStorage, MemoryStorage, TokenKey, TokenStorage
from mcpauth.client.tokens import TokenSet

__all__ = [
    "AuthorizationFailed",
    "BearerChallenge",
    "CallableRedirectHandler",
    "CallbackTimeout",
    "ClientCredentials",
    "ClientError",
    "Discovery",
    "DiscoveryError",
    "FileStorage",
    "IdentityAssertion",
    "IssuerMismatch",
    "LoginRequired",
    "LoopbackRedirectHandler",
    "MemoryStorage",
    "OAuth",
    "PKCENotSupported",
    "PendingAuthorization",
    "RedirectHandler",
    "RegistrationError",
    "ResourceMismatch",
    "TokenKey",
    "TokenRequestFailed",
    "TokenSet",
    "TokenStorage",
    "UnsafeURL",
    "parse_bearer_challenge",
    "select_scope",
]
