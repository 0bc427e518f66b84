"""Token acquisition for MCP clients: discovery, registration, PKCE, refresh and step-up.

    from mcpauth.client import FileStorage, OAuth, Registration

    auth = OAuth(
        "https://mcp.example.com/mcp",
        registration=Registration(client_name="My agent"),
        storage=FileStorage(),
    )
    httpx2.get(url, auth=auth)                         # or httpx2.AsyncClient(auth=auth)

Needs the ``client`` extra (``pip install 'mcpauth-kit[client]'``). The reference is
``docs/api/client.md``; the sans-I/O flow underneath is :mod:`mcpauth.client.flow`. Imports
nothing from ``mcpauth.server``.

Each name is imported from its module when first used (PEP 562), so that ``mcpauth token``
reading a stored token loads neither the HTTP libraries nor pydantic nor the JOSE stack.
"""

import importlib as _importlib
import typing as _typing

from mcpauth.client._extras import CLIENT as _CLIENT
from mcpauth.client._extras import require as _require

_require(_CLIENT, extra="client", part="mcpauth.client")

if _typing.TYPE_CHECKING:
    from mcpauth.client.auth import OAuth
    from mcpauth.client.authorization import (
        PendingAuthorization,
        select_scope,
    )
    from mcpauth.client.callback import (
        CallableRedirectHandler,
        LoopbackRedirectHandler,
        RedirectHandler,
    )
    from mcpauth.client.challenge import (
        BearerChallenge,
        parse_bearer_challenge,
    )
    from mcpauth.client.compatibility import ServerCompatibility
    from mcpauth.client.credentials import ClientCredentials
    from mcpauth.client.device import DeviceAuthorization
    from mcpauth.client.discovery import (
        Discovery,
        ServerSelector,
    )
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
    from mcpauth.client.options import (
        AuthorizationCodeGrant,
        ClientCredentialsGrant,
        DeviceCodeGrant,
        Grant,
        JWTBearerGrant,
        Policy,
        WorkloadIdentityGrant,
    )
    from mcpauth.client.registration import Registration
    from mcpauth.client.storage import (
        FileStorage,
        MemoryStorage,
        TokenKey,
        TokenStorage,
    )
    from mcpauth.client.tokens import TokenSet

__all__ = [
    "AuthorizationCodeGrant",
    "AuthorizationFailed",
    "BearerChallenge",
    "CallableRedirectHandler",
    "CallbackTimeout",
    "ClientCredentials",
    "ClientCredentialsGrant",
    "ClientError",
    "DeviceAuthorization",
    "DeviceCodeGrant",
    "Discovery",
    "DiscoveryError",
    "FileStorage",
    "Grant",
    "IdentityAssertion",
    "IssuerMismatch",
    "JWTBearerGrant",
    "LoginRequired",
    "LoopbackRedirectHandler",
    "MemoryStorage",
    "OAuth",
    "PKCENotSupported",
    "PendingAuthorization",
    "Policy",
    "RedirectHandler",
    "Registration",
    "RegistrationError",
    "ResourceMismatch",
    "ServerCompatibility",
    "ServerSelector",
    "TokenKey",
    "TokenRequestFailed",
    "TokenSet",
    "TokenStorage",
    "UnsafeURL",
    "WorkloadIdentityGrant",
    "parse_bearer_challenge",
    "select_scope",
]

# the module each name comes from
_HOMES = {
    "OAuth": "auth",
    "PendingAuthorization": "authorization",
    "select_scope": "authorization",
    "CallableRedirectHandler": "callback",
    "LoopbackRedirectHandler": "callback",
    "RedirectHandler": "callback",
    "BearerChallenge": "challenge",
    "parse_bearer_challenge": "challenge",
    "ServerCompatibility": "compatibility",
    "ClientCredentials": "credentials",
    "DeviceAuthorization": "device",
    "Discovery": "discovery",
    "ServerSelector": "discovery",
    "IdentityAssertion": "enterprise",
    "AuthorizationFailed": "errors",
    "CallbackTimeout": "errors",
    "ClientError": "errors",
    "DiscoveryError": "errors",
    "IssuerMismatch": "errors",
    "LoginRequired": "errors",
    "PKCENotSupported": "errors",
    "RegistrationError": "errors",
    "ResourceMismatch": "errors",
    "TokenRequestFailed": "errors",
    "UnsafeURL": "errors",
    "AuthorizationCodeGrant": "options",
    "ClientCredentialsGrant": "options",
    "DeviceCodeGrant": "options",
    "Grant": "options",
    "JWTBearerGrant": "options",
    "Policy": "options",
    "WorkloadIdentityGrant": "options",
    "Registration": "registration",
    "FileStorage": "storage",
    "MemoryStorage": "storage",
    "TokenKey": "storage",
    "TokenStorage": "storage",
    "TokenSet": "tokens",
}


def __getattr__(name: str) -> _typing.Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value  # bound: the next use does not come here
    return value


def __dir__() -> list[str]:
    """What the package offers: what it has bound so far and what it binds on first use."""
    return sorted({*globals(), *_HOMES})
