"""HTTP freshness (RFC 9111 §4.2.1) for the documents mcpauth fetches and keeps for a while:
client metadata documents on the server, the authorization server's JWKS in the middleware.
Each caller applies its own default and bounds to what the response says."""

from __future__ import annotations

from collections.abc import Mapping
from email.utils import parsedate_to_datetime


def cache_directives(header: str) -> dict[str, str]:
    """``Cache-Control`` directives by lowercase name (the first of a repeated one wins)."""
    found: dict[str, str] = {}
    for part in header.split(","):
        name, _, value = part.strip().partition("=")
        if name:
            found.setdefault(name.lower(), value.strip().strip('"'))
    return found


def _http_date(value: str | None) -> float | None:
    try:
        return parsedate_to_datetime(value).timestamp() if value else None
    except (TypeError, ValueError):
        return None


def freshness_lifetime(headers: Mapping[str, str], now: float) -> float | None:
    """Seconds a response may be reused according to its own headers: 0 for ``no-store`` or
    ``no-cache``, else ``s-maxage`` (these caches serve many users), ``max-age``, or
    ``Expires`` less ``Date``; an invalid value counts as already expired (§5.3). None when
    the response says nothing, so the caller's default applies."""
    directives = cache_directives(headers.get("cache-control", ""))
    if "no-store" in directives or "no-cache" in directives:
        return 0.0
    for name in ("s-maxage", "max-age"):
        if name in directives:
            value = directives[name]
            return float(value) if value.isascii() and value.isdigit() else 0.0
    if "expires" not in headers:
        return None
    expires = _http_date(headers.get("expires"))
    if expires is None:
        return 0.0
    return expires - (_http_date(headers.get("date")) or now)
