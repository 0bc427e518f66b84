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
"""

from mcpauth.client._extras import CLIENT as _CLIENT
from mcpauth.client._extras import require as _require

_require(_CLIENT, extra="client", part="mcpauth.client")

from mcpauth.client.auth import OAuth  # noqa: E402
from mcpauth.client.authorization import PendingAuthorization, select_scope  # noqa: E402
from mcpauth.client.callback import (  # noqa: E402
    CallableRedirectHandler,
    LoopbackRedirectHandler,
    RedirectHandler,
)
from mcpauth.client.challenge import BearerChallenge, parse_bearer_challenge  # noqa: E402
from mcpauth.client.compatibility import ServerCompatibility  # noqa: E402
from mcpauth.client.credentials import ClientCredentials  # noqa: E402
from mcpauth.client.discovery import Discovery, ServerSelector  # noqa: E402
from mcpauth.client.enterprise import IdentityAssertion  # noqa: E402
from mcpauth.client.errors import (  # noqa: E402
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
from mcpauth.client.options import (  # noqa: E402
    AuthorizationCodeGrant,
    ClientCredentialsGrant,
    Grant,
    JWTBearerGrant,
    Policy,
    WorkloadIdentityGrant,
)
from mcpauth.client.registration import Registration  # noqa: E402
from mcpauth.client.storage import (  # noqa: E402
    FileStorage,
    MemoryStorage,
    TokenKey,
    TokenStorage,
)
from mcpauth.client.tokens import TokenSet  # noqa: E402

__all__ = [
    "AuthorizationCodeGrant",
    "AuthorizationFailed",
    "BearerChallenge",
    "CallableRedirectHandler",
    "CallbackTimeout",
    "ClientCredentials",
    "ClientCredentialsGrant",
    "ClientError",
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
