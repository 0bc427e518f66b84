"""Reading the access token from a request: the ``Authorization`` header only (RFC 6750 §2.1,
RFC 9449 §7.1; never the query string or a form body, OAuth 2.1 "Bearer Token Requests",
docs/security.md T17), with the ``Bearer`` or the ``DPoP`` scheme."""

from __future__ import annotations

import re

from mcpauth.errors import InvalidRequest, InvalidToken
from mcpauth.middleware._asgi import Scope, header_values

# RFC 6750 §2.1 b64token
_B64TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
DEFAULT_MAX_HEADER_BYTES = 8192


def bearer_token(scope: Scope, *, max_bytes: int = DEFAULT_MAX_HEADER_BYTES) -> str | None:
    """The token of an ``Authorization: Bearer`` header; ``None`` when there is none.

    Another scheme counts as no token. The size is checked before anything is decoded.

    Raises:
        InvalidRequest: more than one ``Authorization`` header.
        InvalidToken: an oversized header or a token outside the b64token syntax.
    """
    presented = presented_token(scope, max_bytes=max_bytes)
    return presented[1] if presented is not None and presented[0] == "bearer" else None


def presented_token(
    scope: Scope, *, max_bytes: int = DEFAULT_MAX_HEADER_BYTES
) -> tuple[str, str] | None:
    """``(scheme, token)`` of an ``Authorization: Bearer`` or ``Authorization: DPoP`` header
    (the scheme in lower case); ``None`` when there is none. Another scheme counts as no token.

    Raises:
        InvalidRequest: more than one ``Authorization`` header.
        InvalidToken: an oversized header or a token outside the b64token syntax.
    """
    values = header_values(scope, b"authorization")
    if not values:
        return None
    if len(values) > 1:
        raise InvalidRequest("More than one Authorization header")
    raw = values[0]
    # docs/security.md T16: refuse oversized credentials before any decoding.
    if len(raw) > max_bytes:
        raise InvalidToken("The access token is too large")
    scheme, _, credentials = raw.decode("latin-1").strip().partition(" ")
    scheme = scheme.lower()
    if scheme not in ("bearer", "dpop"):
        return None
    token = credentials.strip(" ")
    if not _B64TOKEN.fullmatch(token):
        raise InvalidToken("The access token is malformed")
    return scheme, token
