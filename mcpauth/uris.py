"""URI rules shared by every part: the one URL parser (:func:`parse_url`), canonical resource
URIs (RFC 8707), loopback hosts, endpoint and issuer checks (RFC 8414 §2) and well-known URL
building by path insertion (RFC 8414 §3.1, RFC 9728 §3.1).

Every URL that arrives from outside is split by :func:`parse_url`: ``urlsplit`` raises
``ValueError`` on a broken IPv6 literal, ``.port`` on a bad port and the IDNA codec a
``UnicodeError`` on a bad A-label, each of which would otherwise surface as a 500. The parser
turns all of them into one :class:`MalformedURL` that each endpoint maps to its error code."""

from __future__ import annotations

import functools
import ipaddress
from urllib.parse import SplitResult, urlsplit, urlunsplit

import idna

from mcpauth.errors import ConfigurationError

__all__ = [
    "MalformedURL",
    "URIError",
    "authorization_server_metadata_urls",
    "canonical_resource",
    "check_issuer",
    "is_loopback_host",
    "origin",
    "parse_url",
    "secure_or_loopback",
    "well_known_url",
]

_DEFAULT_PORTS = {"http": 80, "https": 443}


class URIError(ValueError):
    """A URI breaks one of the rules below; the message says which."""


class MalformedURL(URIError):
    """A URL cannot be parsed at all: a broken IPv6 literal, a bad port, an invalid IDNA host."""


def parse_url(url: str) -> SplitResult:
    """Split ``url`` (RFC 3986 §3) so that reading ``.hostname`` and ``.port`` of the result
    cannot raise, and an internationalised host is valid IDNA (RFC 5891), as the HTTP client
    that may later fetch it requires.

    Raises:
        MalformedURL: ``url`` is not a string, or any part of it cannot be parsed.
    """
    if not isinstance(url, str):
        raise MalformedURL("a URL must be a string")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a malformed or out-of-range port
        host = parts.hostname
        if host and ":" not in host and (not host.isascii() or "xn--" in host):
            idna.encode(host)  # UnicodeError subclass on an invalid U-label or A-label
    except (ValueError, UnicodeError, IndexError, TypeError) as exc:
        raise MalformedURL(f"malformed URL: {_reason(exc)}") from exc
    return parts


def _reason(exc: Exception) -> str:
    """A short, printable reason (no input echoed back)."""
    if isinstance(exc, UnicodeError):
        return "the host is not a valid internationalised domain name"
    if "port" in str(exc).lower():
        return "the port is not a number between 0 and 65535"
    if "ipv6" in str(exc).lower():
        return "the IPv6 address literal is not closed with ']'"
    return "it cannot be parsed"


def is_loopback_host(host: str | None) -> bool:
    """True for ``localhost``, 127.0.0.0/8 and ``::1`` (brackets allowed)."""
    if not host:
        return False
    host = host.strip("[]").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


_MEMO_MAX_LENGTH = 256  # longer resource URIs are canonicalised afresh each time


def canonical_resource(uri: str) -> str:
    """The canonical form of a resource indicator (RFC 8707 §2, MCP "Canonical Server URI").

    Lowercase scheme and host, default port dropped, no fragment; the path is kept exactly
    (a trailing slash only where it was given). Short URIs, the real ones that every token
    request repeats, are memoised; long ones (anybody can send 64 KiB) are not kept.

    Raises:
        URIError: not an absolute http(s) URI, or it has a fragment or userinfo.
    """
    if len(uri) <= _MEMO_MAX_LENGTH:
        return _canonical_memo(uri)
    return _canonical(uri)


def _canonical(uri: str) -> str:
    """:func:`canonical_resource` without the memo.

    Raises:
        URIError: not an absolute http(s) URI, or it has a fragment or userinfo.
    """
    try:
        parts = parse_url(uri)
    except MalformedURL as exc:
        raise URIError(f"resource is a {exc}") from exc
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname:
        raise URIError("resource must be an absolute http or https URI")
    if parts.fragment or "#" in uri:
        raise URIError("resource must not contain a fragment")
    if parts.username is not None or parts.password is not None:
        raise URIError("resource must not contain userinfo")
    port = parts.port
    host = parts.hostname.lower()
    if ":" in host:
        host = f"[{host}]"
    netloc = host if port is None or port == _DEFAULT_PORTS[scheme] else f"{host}:{port}"
    return urlunsplit((scheme, netloc, parts.path, parts.query, ""))


_canonical_memo = functools.lru_cache(maxsize=512)(_canonical)


def without_trailing_slash(canonical: str) -> str:
    """A canonical resource URI with its path's trailing slashes dropped: the form two
    spellings of one server share (``https://a`` and ``https://a/``; ``https://a/mcp/`` and
    ``https://a/mcp``), since clients add the slash (WHATWG ``href``) or strip it."""
    parts = urlsplit(canonical)
    return urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), parts.query, ""))


def check_endpoint(url: str, name: str) -> str:
    """Validate a URL mcpauth calls or sends browsers to (an endpoint, an issuer) and return it
    unchanged: https with a host, or plain http on a loopback host; no fragment, no userinfo.

    Raises:
        URIError: ``url`` breaks one of the rules; the message names ``name`` and the rule.
    """
    try:
        parts = parse_url(url)
    except MalformedURL as exc:
        raise URIError(f"{name} is a {exc}") from exc
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise URIError(f"{name} must be an absolute https URL, got {url!r}")
    if "#" in url:
        raise URIError(f"{name} must not have a fragment")
    if parts.username is not None or parts.password is not None:
        raise URIError(f"{name} must not contain userinfo")
    if not secure_or_loopback(parts):
        raise URIError(f"{name}: http is allowed only on a loopback host; use https")
    return url


def check_issuer(issuer: str) -> str:
    """Validate an issuer identifier (RFC 8414 §2) and return it unchanged, byte for byte.

    An endpoint (:func:`check_endpoint`: https with a host, plain http only for loopback
    hosts, no fragment, no userinfo) with no query.

    Raises:
        ConfigurationError: the issuer breaks one of the rules.
    """
    try:
        check_endpoint(issuer, "issuer")
    except URIError as exc:
        raise ConfigurationError(str(exc)) from exc
    if "?" in issuer:
        raise ConfigurationError("issuer must not have a query component (RFC 8414 §2)")
    return issuer


def well_known_url(identifier: str, suffix: str) -> str:
    """Insert ``/.well-known/<suffix>`` between the host and the path (RFC 8414 §3.1).

    ``https://a/tenant1`` + ``oauth-authorization-server`` →
    ``https://a/.well-known/oauth-authorization-server/tenant1``. A lone trailing slash is dropped.
    """
    parts = parse_url(identifier)
    path = parts.path.rstrip("/") if parts.path != "/" else ""
    return urlunsplit((parts.scheme, parts.netloc, f"/.well-known/{suffix}{path}", "", ""))


def authorization_server_metadata_urls(issuer: str) -> list[str]:
    """Where an authorization server's metadata may be, in the order MCP clients try them:
    RFC 8414 §3.1 and OpenID Connect Discovery by path insertion, then OIDC's path-appended
    form for an issuer with a path."""
    urls = [
        well_known_url(issuer, "oauth-authorization-server"),
        well_known_url(issuer, "openid-configuration"),
    ]
    if path_of(issuer):
        urls.append(issuer.rstrip("/") + "/.well-known/openid-configuration")
    return urls


def secure_or_loopback(url: str | SplitResult) -> bool:
    """True for an https URL with a host, or a plain http one on a loopback host (RFC 8252
    §7.3, RFC 9700 §2.6); False for anything else, malformed URLs included. The one home of
    the rule: every part asks here (``url`` may be a string or what :func:`parse_url` gave)."""
    if isinstance(url, SplitResult):
        parts = url
    else:
        try:
            parts = parse_url(url)
        except MalformedURL:
            return False
    scheme, host = parts.scheme.lower(), parts.hostname
    return (scheme == "https" and bool(host)) or (scheme == "http" and is_loopback_host(host))


def well_known_path(identifier: str, suffix: str) -> str:
    """The path part of :func:`well_known_url`."""
    return parse_url(well_known_url(identifier, suffix)).path


def origin(url: str) -> str:
    """``scheme://host[:port]`` of a URL."""
    parts = parse_url(url)
    return f"{parts.scheme}://{parts.netloc}"


def path_of(url: str) -> str:
    """The path of a URL with no trailing slash ("" for the root)."""
    path = parse_url(url).path
    return "" if path in ("", "/") else path.rstrip("/")
