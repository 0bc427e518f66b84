"""Redirect URI rules: what may be registered (RFC 9700 §2.6, RFC 8252 §7) and how a requested
URI is matched against the registered ones (exact string, RFC 9700 §4.1.3; any port for
loopback, RFC 8252 §7.3)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import SplitResult

from mcpauth.errors import InvalidRedirectUri
from mcpauth.server.operations.size_limits import MAX_URI_LENGTH
from mcpauth.uris import MalformedURL, is_loopback_host, parse_url

_FORBIDDEN_SCHEMES = frozenset(
    {"javascript", "data", "file", "vbscript", "about", "blob", "ftp", "ws", "wss", "filesystem"}
)
_CONTROL = re.compile(r"[\x00-\x20\x7f]")
_PORT = re.compile(r":\d{1,5}$")
_LOOPBACK_LITERALS = ("127.0.0.1", "[::1]", "localhost")


def check_redirect_uri(uri: object, *, application_type: str, field: str = "redirect_uri") -> str:
    """Validate one redirect URI for registration and return it unchanged.

    Raises:
        InvalidRedirectUri: with a description naming ``field`` and the broken rule.
    """
    if not isinstance(uri, str) or not uri:
        raise InvalidRedirectUri(f"{field}: must be a non-empty string")
    if len(uri) > MAX_URI_LENGTH:
        raise InvalidRedirectUri(f"{field}: longer than {MAX_URI_LENGTH} characters")
    if _CONTROL.search(uri):
        raise InvalidRedirectUri(f"{field}: must not contain spaces or control characters")
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
    if scheme in _FORBIDDEN_SCHEMES:
        raise InvalidRedirectUri(f"{field}: the {scheme!r} scheme is not allowed")
    if scheme in ("http", "https"):
        _check_web_uri(parts, field)
        return uri
    # RFC 8252 §7.1: private-use schemes are for native apps, in reverse domain name form
    if application_type != "native":
        raise InvalidRedirectUri(f"{field}: a custom scheme requires application_type 'native'")
    if "." not in scheme:
        raise InvalidRedirectUri(
            f"{field}: a private-use scheme must be a reverse domain name (RFC 8252 §7.1)"
        )
    return uri


def _check_web_uri(parts: SplitResult, field: str) -> None:
    if not parts.hostname:
        raise InvalidRedirectUri(f"{field}: must name a host")
    if "@" in parts.netloc:
        raise InvalidRedirectUri(f"{field}: must not contain userinfo")
    # RFC 9700 §2.6: plain http only for loopback (native apps, RFC 8252 §7.3)
    if parts.scheme.lower() == "http" and not is_loopback_host(parts.hostname):
        raise InvalidRedirectUri(f"{field}: http is allowed only for loopback hosts; use https")


def _without_loopback_port(uri: str) -> str | None:
    """``http://127.0.0.1:5000/cb`` → ``http://127.0.0.1/cb``; None if not http loopback."""
    if not uri.startswith("http://"):
        return None
    rest = uri[len("http://") :]
    end = len(rest)
    for stop in ("/", "?"):
        index = rest.find(stop)
        if index != -1:
            end = min(end, index)
    netloc, tail = rest[:end], rest[end:]
    host = _PORT.sub("", netloc)
    if host not in _LOOPBACK_LITERALS:
        return None
    return f"http://{host}{tail}"


def redirect_uri_matches(requested: str, registered: Iterable[str]) -> bool:
    """Exact string match, except that the port of an http loopback URI may differ."""
    registered = list(registered)
    if requested in registered:
        return True
    portless = _without_loopback_port(requested)
    if portless is None:
        return False
    return any(_without_loopback_port(uri) == portless for uri in registered)


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
