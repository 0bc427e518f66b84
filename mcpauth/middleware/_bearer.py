"""Reading the access token from a request: the ``Authorization`` header only (RFC 6750 §2.1,
RFC 9449 §7.1; never the query string or a form body, OAuth 2.1 "Bearer Token Requests",
docs/security.md T17), with the ``Bearer`` or the ``DPoP`` scheme."""

from __future__ import annotations

from collections.abc import Sequence

from mcpauth.errors import InvalidRequest, InvalidToken

# RFC 6750 §2.1 b64token: 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"="
_B64TOKEN_CHARS = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~+/"
DEFAULT_MAX_HEADER_BYTES = 8192


def presented_token(
    values: Sequence[bytes], *, max_bytes: int = DEFAULT_MAX_HEADER_BYTES
) -> tuple[str, str] | None:
    """``(scheme, token)`` of the request's ``Authorization`` header ``values``, with the
    ``Bearer`` or the ``DPoP`` scheme (in lower case); ``None`` when there is none. Another
    scheme counts as no token. The size is checked before anything is decoded; the token's
    syntax is :func:`require_b64token`'s, checked before it is verified (a token already
    verified passed it).

    Raises:
        InvalidRequest: more than one ``Authorization`` header.
        InvalidToken: an oversized header.
    """
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
    return scheme, credentials.strip(" ")


def require_b64token(token: str) -> None:
    """Refuse a token outside the b64token syntax (RFC 6750 §2.1).

    Raises:
        InvalidToken: it is not a b64token.
    """
    if not _is_b64token(token):
        raise InvalidToken("The access token is malformed")


def _is_b64token(token: str) -> bool:
    """Whether ``token`` is a b64token: what is left once every character of its alphabet is
    deleted (a C loop, not a regular expression: this runs on every request) is nothing."""
    head = token.rstrip("=")
    return (
        bool(head) and head.isascii() and not head.encode("ascii").translate(None, _B64TOKEN_CHARS)
    )
