"""Errors the client helper raises.

MCPAuthError                         (mcpauth.errors)
└── ClientError                      anything that stops the client from getting a token
    ├── DiscoveryError               no usable protected resource or server metadata
    │   ├── ResourceMismatch         PRM ``resource`` is not this server (RFC 9728 §3.3)
    │   ├── IssuerMismatch           metadata ``issuer`` differs from the one asked for
    │   └── UnsafeURL                a URL that is not http(s), or plain http off loopback
    ├── LoginRequired                no usable token and no permission to ask the user
    ├── PKCENotSupported             the server does not advertise S256
    ├── RegistrationError            no way to obtain a client ID, or the server refused
    ├── AuthorizationFailed          the redirect came back with an error, bad state or iss
    │   └── CallbackTimeout          nobody came back to the loopback listener in time
    └── TokenRequestFailed           the token endpoint said no (``error`` holds its code)
"""

from __future__ import annotations

from mcpauth.errors import MCPAuthError


class ClientError(MCPAuthError):
    """Root of the client helper's errors."""


class DiscoveryError(ClientError):
    """Protected resource or authorization server metadata could not be found or used."""


class ResourceMismatch(DiscoveryError):
    """The protected resource metadata names another resource (RFC 9728 §3.3)."""


class IssuerMismatch(DiscoveryError):
    """The authorization server metadata names another issuer (RFC 8414 §3.3)."""


class UnsafeURL(DiscoveryError):
    """A URL from a server is not one this client will contact or open."""


class LoginRequired(ClientError):
    """No stored or refreshable token, and this call may not start an authorization."""


class PKCENotSupported(ClientError):
    """``code_challenge_methods_supported`` is absent or lacks ``S256``."""


class RegistrationError(ClientError):
    """No client ID could be obtained for the authorization server."""


class AuthorizationFailed(ClientError):
    """The authorization response was an error or failed validation.

    ``error`` is the server's code only when the response passed ``state`` and ``iss`` checks;
    otherwise it is a local reason and the server's fields are not repeated (MCP, RFC 9207).
    """

    def __init__(self, message: str, *, error: str = "invalid_response") -> None:
        super().__init__(message)
        self.error = error


class CallbackTimeout(AuthorizationFailed):
    """The loopback redirect did not arrive within the wait limit."""

    def __init__(self, message: str = "timed out waiting for the authorization redirect") -> None:
        super().__init__(message, error="timeout")


class TokenRequestFailed(ClientError):
    """The token endpoint refused; ``error`` is its RFC 6749 §5.2 code."""

    def __init__(self, error: str, description: str = "", *, status_code: int = 400) -> None:
        super().__init__(f"{error}: {description}" if description else error)
        self.error = error
        self.description = description
        self.status_code = status_code
