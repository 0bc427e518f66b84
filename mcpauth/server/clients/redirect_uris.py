"""Redirect URI rules: what may be registered (RFC 9700 §2.6, RFC 8252 §7) and how a requested
URI is matched against the registered ones (exact string, RFC 9700 §4.1.3; any port for
loopback, RFC 8252 §7.3)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import SplitResult

from mcpauth.errors import InvalidRedirectUri
from mcpauth.server.operations.size_limits import MAX_URI_LENGTH
from mcpauth.uris import MalformedURL, is_loopback_host, parse_url, secure_or_loopback

# Schemes a browser would run, read from disk or hand to another protocol, and names that
# imitate a web address; none is ever a client's callback.
_FORBIDDEN_SCHEMES = frozenset(
    {
        "javascript", "data", "file", "vbscript", "about", "blob", "filesystem", "view-source",
        "ftp", "ws", "wss", "jar", "intent", "mailto", "localhost",
    }
)  # fmt: skip
_CONTROL = re.compile(r"[\x00-\x20\x7f\\]")  # also a backslash, which browsers read as "/"


def check_redirect_uri(
    uri: object, *, application_type: str, public: bool, field: str = "redirect_uri"
) -> str:
    """Validate one redirect URI for registration and return it unchanged: https, http on a
    loopback host, or a private-use scheme for a native app or a public client.

    Raises:
        InvalidRedirectUri: with a description naming ``field`` and the broken rule.
    """
    if not isinstance(uri, str) or not uri:
        raise InvalidRedirectUri(f"{field}: must be a non-empty string")
    if len(uri) > MAX_URI_LENGTH:
        raise InvalidRedirectUri(f"{field}: longer than {MAX_URI_LENGTH} characters")
    if _CONTROL.search(uri):
        raise InvalidRedirectUri(
            f"{field}: must not contain spaces, backslashes or control characters"
        )
    if "#" in uri:
        raise InvalidRedirectUri(f"{field}: must not contain a fragment")
    if "*" in uri:
        raise InvalidRedirectUri(f"{field}: wildcards are not allowed")
    try:
        parts = parse_url(uri)
    except MalformedURL as exc:
        raise InvalidRedirectUri(f"{field}: {exc}") from exc
    scheme = parts.scheme.lower()
    if not scheme:
        raise InvalidRedirectUri(f"{field}: must be an absolute URI")
    if scheme in ("http", "https"):
        _check_web_uri(parts, field)
        return uri
    _check_private_use_uri(parts, field, application_type=application_type, public=public)
    return uri


def _check_web_uri(parts: SplitResult, field: str) -> None:
    if not parts.hostname:
        raise InvalidRedirectUri(f"{field}: must name a host")
    if "@" in parts.netloc:
        raise InvalidRedirectUri(f"{field}: must not contain userinfo")
    # RFC 9700 §2.6: plain http only for loopback (native apps, RFC 8252 §7.3)
    if not secure_or_loopback(parts):
        raise InvalidRedirectUri(f"{field}: http is allowed only for loopback hosts; use https")


def _check_private_use_uri(
    parts: SplitResult, field: str, *, application_type: str, public: bool
) -> None:
    """RFC 8252 §7.1 asks native apps for reverse-domain schemes; real clients register
    ``cursor://`` and ``vscode://`` and keep working only if those are accepted. The scheme is
    what the operating system hands the code to, and PKCE (always required) keeps a code caught
    by another app useless, so any scheme is accepted for a native app or a public client,
    except the dangerous ones and the ones that pass for a web address."""
    scheme = parts.scheme.lower()
    if scheme in _FORBIDDEN_SCHEMES:
        raise InvalidRedirectUri(f"{field}: the {scheme!r} scheme is not allowed")
    if scheme.startswith(("http", "https")) or len(scheme) == 1:
        # "https-app:", "httpx:" pass for a web address; "c:" is a Windows drive
        raise InvalidRedirectUri(f"{field}: the {scheme!r} scheme looks like another kind of URI")
    if application_type != "native" and not public:
        raise InvalidRedirectUri(
            f"{field}: a private-use scheme is for native apps and public clients "
            "(application_type 'native' or token_endpoint_auth_method 'none')"
        )
    if not (parts.netloc or parts.path.strip("/")):
        raise InvalidRedirectUri(f"{field}: a private-use URI needs a path after the scheme")


def _loopback_key(uri: str) -> tuple[str, str, str, str] | None:
    """``(scheme, host, path, query)`` of an http loopback URI, the port left out (RFC 8252
    §7.3); None for anything else, userinfo included."""
    if not uri.startswith("http://"):
        return None
    try:
        parts = parse_url(uri)
    except MalformedURL:
        return None
    host = parts.hostname
    if not is_loopback_host(host) or "@" in parts.netloc or host is None:
        return None
    return ("http", host, parts.path or "/", parts.query)  # RFC 3986 §6.2.3: "" is "/"


def redirect_uri_matches(requested: str, registered: Iterable[str]) -> bool:
    """Exact string match (RFC 9700 §4.1.3), except that the port of an http loopback URI
    may differ, also from a registered URI without a port (RFC 8252 §7.3). Host and path are
    never relaxed: ``localhost`` and ``127.0.0.1`` stay different hosts."""
    registered = list(registered)
    if requested in registered:
        return True
    key = _loopback_key(requested)
    if key is None:
        return False
    return any(_loopback_key(uri) == key for uri in registered)


def host_of(uri: str) -> str | None:
    """The host of ``uri``; None if it has none or cannot be parsed."""
    try:
        return parse_url(uri).hostname
    except MalformedURL:
        return None


def all_loopback(uris: Iterable[str]) -> bool:
    """True if every URI is an http(s) URI on a loopback host (the consent page warns)."""
    uris = list(uris)
    return bool(uris) and all(is_loopback_host(host_of(u)) for u in uris)
