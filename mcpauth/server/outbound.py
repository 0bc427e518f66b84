"""How the server reaches other hosts: the operator's outbound proxy (``outbound_proxy``) and
the certificates it trusts (the system's plus ``outbound_ca_file``), one route for every fetch
it makes (metadata documents and ``jwks_uri``s through :mod:`.clients.ssrf`, trusted issuers'
keys, upstream providers through Authlib). Environment proxy variables are never read: the
settings say where traffic goes."""

from __future__ import annotations

import ssl
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import quote, unquote, urlsplit

import httpx2

from mcpauth.errors import ConfigurationError

if TYPE_CHECKING:  # config checks the proxy URL with parse_proxy
    from mcpauth.server.config import Settings

__all__ = ["Outbound", "ProxyRoute", "TrustStore", "outbound_for", "parse_proxy", "trust_store"]


@dataclass(frozen=True)
class ProxyRoute:
    """An HTTP proxy that opens HTTPS tunnels (``CONNECT``) to the hosts fetched from."""

    host: str
    port: int
    username: str | None = field(default=None, repr=False)
    password: str | None = field(default=None, repr=False)  # never in a log line

    @property
    def url(self) -> str:
        """``http://host:port``, never the credentials (safe for logs and errors)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def auth(self) -> tuple[str, str] | None:
        return None if self.username is None else (self.username, self.password or "")


def parse_proxy(value: str) -> ProxyRoute:
    """``http://[user:password@]host[:port]`` as a route (port 80 when none is given).

    Raises:
        ValueError: another scheme, no host, a path, query or fragment, or a bad port.
    """
    parts = urlsplit(value.strip())
    if parts.scheme.lower() != "http":
        raise ValueError("must be an http:// URL (the proxy tunnels HTTPS with CONNECT)")
    if not parts.hostname:
        raise ValueError("must name the proxy's host")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError("must be http://host:port, without a path, query or fragment")
    try:
        port = parts.port or 80
    except ValueError as exc:
        raise ValueError("has an invalid port") from exc
    username = unquote(parts.username) if parts.username is not None else None
    password = unquote(parts.password) if parts.password is not None else None
    return ProxyRoute(parts.hostname, port, username, password)


def trust_store(ca_file: str | None) -> ssl.SSLContext:
    """The certificates outbound TLS trusts: the default bundle, plus ``ca_file`` if given.

    Raises:
        ConfigurationError: ``ca_file`` cannot be read or holds no certificate.
    """
    context = httpx2.create_ssl_context(trust_env=False)
    if ca_file:
        try:
            context.load_verify_locations(cafile=ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigurationError(f"outbound_ca_file: cannot load {ca_file}: {exc}") from exc
    return context


class TrustStore:
    """The one SSL context of outbound TLS, made when a first connection needs it: loading the
    default bundle (and importing httpx2's TLS support) costs tens of milliseconds, which a
    process that never fetches (an admin command, a server whose clients are all registered)
    should not pay at start. A ``ca_file`` is loaded at once, so a bad one still stops
    start-up; ``context`` is used as it is (tests trust their own CA). Calling the store
    returns the context, the same one every time.

    Raises:
        ConfigurationError: ``ca_file`` cannot be read or holds no certificate.
    """

    def __init__(
        self, ca_file: str | None = None, *, context: ssl.SSLContext | None = None
    ) -> None:
        self._context = context or (trust_store(ca_file) if ca_file else None)
        self._lock = threading.Lock()

    def __call__(self) -> ssl.SSLContext:
        context = self._context
        if context is None:
            with self._lock:  # threads (blocking fetches) and the event loop share it
                if self._context is None:
                    self._context = trust_store(None)
                context = self._context
        return context


@dataclass(frozen=True)
class Outbound:
    """The route of every outbound fetch: the trust store, and the proxy if there is one."""

    trust: TrustStore
    proxy: ProxyRoute | None = None

    @property
    def ssl_context(self) -> ssl.SSLContext:
        return self.trust()

    def httpx2_transport(self) -> httpx2.AsyncHTTPTransport:
        """An ``httpx2`` transport (Authlib's client) on this route, with no retries."""
        return httpx2.AsyncHTTPTransport(
            retries=0, verify=self.ssl_context, trust_env=False, proxy=self._proxy_url()
        )

    def _proxy_url(self) -> str | None:
        if self.proxy is None:
            return None
        if self.proxy.auth is None:
            return self.proxy.url
        user, password = (quote(part, safe="") for part in self.proxy.auth)
        return self.proxy.url.replace("http://", f"http://{user}:{password}@", 1)


def outbound_for(settings: Settings, *, ssl_context: ssl.SSLContext | None = None) -> Outbound:
    """The route ``settings`` describe; ``ssl_context`` replaces the trust store (tests).

    Raises:
        ConfigurationError: ``outbound_ca_file`` cannot be loaded.
    """
    proxy = parse_proxy(settings.outbound_proxy) if settings.outbound_proxy else None
    return Outbound(TrustStore(settings.outbound_ca_file, context=ssl_context), proxy)
