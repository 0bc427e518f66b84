"""OAuth wire rules shared by the authorization server, the middleware and the client: each is
written once here and imported (the same rule in two places drifts).

- PKCE S256 (RFC 7636 §4.2), HTTP Basic client credentials both ways (RFC 6749 §2.3.1),
- the one scope parser and formatter (:func:`parse_scope`, :func:`format_scope`), the scope-token
  grammar (RFC 6749 §3.3) and the scopes of the authorization server itself,
- the names of client authentication methods, grant types and assertion types,
- the constant-time comparison of two secrets of any text.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from collections.abc import Iterable
from urllib.parse import quote, unquote_plus

__all__ = [
    "AUTH_METHODS",
    "CLIENT_ASSERTION_TYPE",
    "DEVICE_CODE",
    "IDENTITY_SCOPES",
    "JWT_BEARER",
    "OFFLINE_ACCESS",
    "OUTSIDE_ERROR_TEXT",
    "SCOPE_TOKEN",
    "SECRET_METHODS",
    "TOKEN_EXCHANGE",
    "MalformedScope",
    "basic_authorization",
    "format_scope",
    "parse_basic_authorization",
    "parse_scope",
    "s256",
    "same_secret",
]

# RFC 7591 §2 token_endpoint_auth_method values mcpauth speaks
SECRET_METHODS = ("client_secret_basic", "client_secret_post")
AUTH_METHODS = (*SECRET_METHODS, "private_key_jwt", "none")
JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"  # RFC 7523 §2.1
TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"  # RFC 8693 §2.1
DEVICE_CODE = "urn:ietf:params:oauth:grant-type:device_code"  # RFC 8628 §3.4
CLIENT_ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"  # RFC 7523 §2.2
SCOPE_TOKEN = re.compile(r"^[\x21\x23-\x5b\x5d-\x7e]+$")  # RFC 6749 §3.3
# RFC 6749 §3.3: scope tokens and the spaces between them, nothing else
_SCOPE_STRING = re.compile(r"[\x20\x21\x23-\x5b\x5d-\x7e]*")
OFFLINE_ACCESS = "offline_access"  # OpenID Connect Core §11: a refresh token
IDENTITY_SCOPES = ("openid", "profile", "email")  # OpenID Connect Core §5.4
# Characters outside what error, error_description and WWW-Authenticate quoted values may hold
# (RFC 6749 §5.2: %x20-21 / %x23-5B / %x5D-7E; no quote, no backslash).
OUTSIDE_ERROR_TEXT = re.compile(r"[^\x20\x21\x23-\x5b\x5d-\x7e]")


class MalformedScope(ValueError):
    """A scope string breaks the RFC 6749 §3.3 grammar; each caller maps it to its own error."""


def parse_scope(value: str | None, *, strict: bool = False) -> list[str]:
    """The scope tokens of a ``scope`` string, in order, each once; ``[]`` for None or blank.

    Lenient by default (any run of whitespace separates tokens: what a token's own ``scope``
    claim or a token response holds is read, never refused). ``strict`` is the grammar of a
    request (RFC 6749 §3.3: scope tokens separated by spaces), which the server enforces.

    Raises:
        MalformedScope: ``strict`` and the value holds a character that is neither a space nor
            part of a scope token.
    """
    if not value:
        return []
    if strict and not _SCOPE_STRING.fullmatch(value):
        raise MalformedScope("must be space-separated scope tokens")
    return list(dict.fromkeys(value.split()))


def format_scope(scopes: Iterable[str]) -> str:
    """The ``scope`` string of ``scopes`` (RFC 6749 §3.3): space-separated, in the order given,
    each once."""
    return " ".join(dict.fromkeys(scopes))


def s256(verifier: str) -> str:
    """``BASE64URL(SHA256(ASCII(code_verifier)))`` (RFC 7636 §4.2)."""
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def same_secret(expected: str, presented: str) -> bool:
    """Whether two secrets (CSRF tokens, digests, ``ath``, thumbprints, ``state``) are equal, in
    constant time. Compared as UTF-8 bytes: ``hmac.compare_digest`` refuses ``str`` holding anything
    but ASCII, so whatever text a caller sends (a lone surrogate included) is a plain mismatch,
    never an exception."""
    return hmac.compare_digest(
        expected.encode("utf-8", "surrogatepass"), presented.encode("utf-8", "surrogatepass")
    )


def basic_authorization(client_id: str, client_secret: str) -> str:
    """The ``Authorization: Basic`` value, each part form-urlencoded first (RFC 6749 §2.3.1)."""
    pair = f"{quote(client_id, safe='')}:{quote(client_secret, safe='')}"
    return "Basic " + base64.b64encode(pair.encode()).decode()


def parse_basic_authorization(header: str | None) -> tuple[str, str] | None:
    """``(client_id, client_secret)`` from an ``Authorization: Basic`` value, each part
    form-urldecoded (RFC 6749 §2.3.1); None when the header is not well-formed Basic (another
    scheme, not base64, not UTF-8, no colon, an empty client id)."""
    if not header:
        return None
    scheme, _, encoded = header.strip().partition(" ")
    if scheme.lower() != "basic" or not encoded:
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    client_id, colon, secret = decoded.partition(":")
    if not colon:
        return None
    client_id, secret = unquote_plus(client_id), unquote_plus(secret)
    return (client_id, secret) if client_id else None
