"""The one place Authlib is touched: its request grammar helpers, behind typed wrappers so
``Any`` from the untyped library stays here."""

from __future__ import annotations

from authlib.oauth2.rfc6749.util import extract_basic_authorization


def basic_credentials(authorization: str | None) -> tuple[str, str] | None:
    """``client_id`` and ``client_secret`` from an HTTP Basic header, form-urldecoded as
    RFC 6749 §2.3.1 requires; None if the header is not well-formed Basic."""
    if not authorization:
        return None
    try:
        client_id, secret = extract_basic_authorization({"Authorization": authorization})
    except ValueError:  # "Basic " with no credentials, bad base64, credentials not UTF-8
        return None
    if not isinstance(client_id, str) or not isinstance(secret, str) or not client_id:
        return None
    return client_id, secret
