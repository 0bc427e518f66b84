"""The mcpauth exception tree.

    MCPAuthError
    ├── ConfigurationError            bad settings, refused at start-up
    ├── FetchError                    a remote document could not be fetched (not sent as is)
    ├── FetchDeclined                 not fetched now: a cap on fetches is reached
    └── OAuthError                    carries an RFC error code, an HTTP status and a description
        ├── InvalidRequest            RFC 6749 §4.1.2.1 / §5.2
        │   └── PayloadTooLarge       413: a body past the limit, refused unread
        ├── InvalidClient             401, RFC 6749 §5.2
        ├── InvalidGrant
        ├── UnauthorizedClient
        ├── UnsupportedGrantType
        ├── UnsupportedResponseType
        ├── InvalidScope
        ├── AccessDenied              also the device grant's, RFC 8628 §3.5
        ├── ServerError
        ├── TemporarilyUnavailable
        ├── InvalidTarget             RFC 8707 §2
        ├── InvalidClientMetadata     RFC 7591 §3.2.2
        ├── InvalidRedirectUri        RFC 7591 §3.2.2
        ├── InvalidToken              401, RFC 6750 §3.1
        ├── InsufficientScope         403, RFC 6750 §3.1
        ├── InvalidDPoPProof          401, RFC 9449 §7.1
        ├── UseDPoPNonce              401 with DPoP-Nonce, RFC 9449 §9
        ├── TooManyRequests           429 with Retry-After
        ├── AuthorizationPending      RFC 8628 §3.5: the person has not decided yet
        ├── SlowDown                  RFC 8628 §3.5: poll less often (5 s more)
        └── ExpiredToken              RFC 8628 §3.5: the device code expired

Every OAuth error renders itself as the RFC's JSON body (``to_dict``); the HTTP layer of each
part decides how to send it. That rendering is the one place an ``error_description`` is made
wire-safe (:func:`wire_description`).
"""

from __future__ import annotations

from typing import ClassVar

from mcpauth.oauth import OUTSIDE_ERROR_TEXT

__all__ = [
    "AccessDenied",
    "AuthorizationPending",
    "ConfigurationError",
    "ExpiredToken",
    "FetchError",
    "InsufficientScope",
    "InvalidClient",
    "InvalidClientMetadata",
    "InvalidDPoPProof",
    "InvalidGrant",
    "InvalidRedirectUri",
    "InvalidRequest",
    "InvalidScope",
    "InvalidTarget",
    "InvalidToken",
    "MCPAuthError",
    "OAuthError",
    "PayloadTooLarge",
    "ServerError",
    "SlowDown",
    "TemporarilyUnavailable",
    "TooManyRequests",
    "UnauthorizedClient",
    "UnsupportedGrantType",
    "UnsupportedResponseType",
    "UseDPoPNonce",
    "error_for",
]

# RFC 6749 §5.2 / §4.1.2.1: error_description is %x20-21 / %x23-5B / %x5D-7E
_SUBSTITUTES = {
    "\u00a7": "section ",
    '"': "'",
    "\\": "/",
    "\u2018": "'",
    "\u2019": "'",
    "\u201c": "'",
    "\u201d": "'",
    "\u2013": "-",
    "\u2014": "-",
    "\u2026": "...",
    "\u2192": "->",
    "\t": " ",
}


def wire_description(text: str) -> str:
    """``text`` restricted to the characters RFC 6749 §5.2 allows in ``error_description``:
    quotes, backslashes, controls and non-ASCII characters (an echoed value may hold any) are
    replaced, common typography by its ASCII look-alike and anything else by ``?``."""
    return OUTSIDE_ERROR_TEXT.sub(lambda m: _SUBSTITUTES.get(m.group(), "?"), text)


class MCPAuthError(Exception):
    """Root of every exception mcpauth raises on purpose."""


class ConfigurationError(MCPAuthError):
    """A setting is missing or invalid."""


class FetchError(MCPAuthError):
    """A remote document (authorization server metadata, a JWKS, a client metadata document)
    could not be fetched, or its response was refused. ``message`` says which rule and may name
    the URL: it is for logs and for whoever configured that URL. Each part decides what its own
    caller is told (the middleware answers 503 without it, the server ``invalid_client``)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class FetchDeclined(MCPAuthError):
    """Not fetched now because a limit is reached; the message says which, in terms safe to
    show to anyone (nothing about the host)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class OAuthError(MCPAuthError):
    """An OAuth error response: wire ``error`` code, HTTP status and a human description."""

    error: ClassVar[str] = "invalid_request"
    status_code: ClassVar[int] = 400

    def __init__(self, description: str = "", *, headers: dict[str, str] | None = None) -> None:
        super().__init__(description or self.error)
        self.description = description
        self.headers: dict[str, str] = dict(headers or {})

    def to_dict(self) -> dict[str, str]:
        body = {"error": self.error}
        if self.description:
            body["error_description"] = wire_description(self.description)
        return body

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.description!r})"


class InvalidRequest(OAuthError):
    error = "invalid_request"


class PayloadTooLarge(InvalidRequest):
    status_code = 413


class InvalidClient(OAuthError):
    error = "invalid_client"
    status_code = 401


class InvalidGrant(OAuthError):
    error = "invalid_grant"


class UnauthorizedClient(OAuthError):
    error = "unauthorized_client"


class UnsupportedGrantType(OAuthError):
    error = "unsupported_grant_type"


class UnsupportedResponseType(OAuthError):
    error = "unsupported_response_type"


class InvalidScope(OAuthError):
    error = "invalid_scope"


class AccessDenied(OAuthError):
    # sent in a redirect (no status of its own there), or by the token endpoint to a device
    # whose request was denied: 400, as every token error but invalid_client (RFC 6749 §5.2)
    error = "access_denied"


class ServerError(OAuthError):
    error = "server_error"
    status_code = 500


class TemporarilyUnavailable(OAuthError):
    error = "temporarily_unavailable"
    status_code = 503


class InvalidTarget(OAuthError):
    error = "invalid_target"


class InvalidClientMetadata(OAuthError):
    error = "invalid_client_metadata"


class InvalidRedirectUri(OAuthError):
    error = "invalid_redirect_uri"


class InvalidToken(OAuthError):
    error = "invalid_token"
    status_code = 401


class InsufficientScope(OAuthError):
    error = "insufficient_scope"
    status_code = 403


class InvalidDPoPProof(OAuthError):
    """A DPoP proof failed a check of RFC 9449 §4.3 (400 at the token endpoint; a resource
    server answers 401 with a DPoP challenge)."""

    error = "invalid_dpop_proof"


class UseDPoPNonce(OAuthError):
    """The server requires a nonce it issued in ``DPoP-Nonce`` (RFC 9449 §8, §9)."""

    error = "use_dpop_nonce"


class TooManyRequests(OAuthError):
    """Throttled; ``retry_after`` seconds go out in the ``Retry-After`` header."""

    error = "too_many_requests"
    status_code = 429

    def __init__(self, description: str = "", *, retry_after: int = 1) -> None:
        super().__init__(description, headers={"Retry-After": str(max(1, retry_after))})
        self.retry_after = max(1, retry_after)


class AuthorizationPending(OAuthError):
    """The person has not yet approved or denied the device's request (RFC 8628 §3.5)."""

    error = "authorization_pending"


class SlowDown(OAuthError):
    """The device polls too often: it must wait 5 seconds more from now on (RFC 8628 §3.5)."""

    error = "slow_down"


class ExpiredToken(OAuthError):
    """The device code expired before it was approved (RFC 8628 §3.5)."""

    error = "expired_token"


def error_for(body: dict[str, object]) -> OAuthError:
    """The :class:`OAuthError` an RFC 6749 §5.2 error body describes (the class of its
    ``error`` code, :class:`OAuthError` for a code this module has no class for)."""
    code = body.get("error")
    description = body.get("error_description")
    text = description if isinstance(description, str) else ""

    def classes(base: type[OAuthError]) -> list[type[OAuthError]]:
        return [base] + [c for sub in base.__subclasses__() for c in classes(sub)]

    found = next((c for c in classes(OAuthError)[1:] if c.error == code), None)
    if found is not None:
        return found(text)
    error = OAuthError(text or str(code))
    error.error = str(code) if isinstance(code, str) else "invalid_request"  # type: ignore[misc]
    return error
