"""SSRF-safe fetching of client-controlled URLs: Client ID Metadata Documents now, the
``jwks_uri`` of ``private_key_jwt`` clients later (docs/security.md T21, AS-14).

The guard lives in the httpcore network backend, so it runs at connect time for every
connection: the backend resolves the host once, refuses if *any* address is special-use, and
connects to the address it checked (no second DNS lookup, so no DNS rebinding between check and
connect). TLS still verifies the certificate against the URL's host name. Around that: https
only, no redirects, one total deadline for resolve + connect + TLS + write + every read, a body
cap enforced while streaming, no compression, no cookies, no proxies from the environment.

Through the operator's outbound proxy (``outbound_proxy``) the proxy resolves the name and
connects, so no address the name resolves to can be checked here: the URL's host is checked
instead before anything is sent (an address literal, in any notation, must be public; local
and single-label names are refused), the backend connects to the proxy only, and the proxy is
trusted to refuse private destinations itself (docs/security.md T21). TLS still runs end to end
through the tunnel and verifies the host's certificate.

Fetches run on the event loop (``SafeFetcher.aget``): a host that accepts the connection and
never answers holds a coroutine until the deadline, never one of the threads the database
work runs in. Only name lookups use threads, a few of their own."""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import socket
import ssl
import threading
from collections.abc import AsyncIterable, Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpcore2
import httpx2

from mcpauth.errors import FetchError as FetchError  # one FetchError; imported from here too
from mcpauth.server.outbound import ProxyRoute, TrustStore

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
DEFAULT_TIMEOUT = 2.5  # seconds, total (oidc-provider's value, docs/security.md T21)
DEFAULT_MAX_BYTES = 5 * 1024  # CIMD-00 §6.6: about 5 KB
USER_AGENT = "mcpauth (client metadata fetcher)"
RESOLVER_THREADS = 8  # name lookups at once; more wait their turn within their deadline
_RESOLVER: ThreadPoolExecutor | None = None
_RESOLVER_LOCK = threading.Lock()

_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")  # RFC 6052 well-known prefix
_IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")  # RFC 4291 §2.5.5.1, deprecated
_SPECIAL_NETWORKS: tuple[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, str], ...] = (
    (ipaddress.IPv4Network("100.64.0.0/10"), "shared (CGNAT, RFC 6598)"),
    (ipaddress.IPv4Network("192.0.0.0/24"), "IETF protocol assignment"),
    (ipaddress.IPv4Network("192.88.99.0/24"), "6to4 relay anycast"),
    (ipaddress.IPv4Network("198.18.0.0/15"), "benchmarking"),
    (ipaddress.IPv6Network("64:ff9b:1::/48"), "local-use NAT64"),
    (ipaddress.IPv6Network("2001::/32"), "Teredo"),
    (ipaddress.IPv6Network("2001:db8::/32"), "documentation"),
    (ipaddress.IPv6Network("fc00::/7"), "unique local (ULA)"),
    (ipaddress.IPv6Network("fec0::/10"), "site-local"),
)


@dataclass(frozen=True)
class FetchedResponse:
    """A ``200`` response whose body is at most the fetcher's cap."""

    url: str
    status_code: int
    headers: httpx2.Headers
    content: bytes


def _embedded_ipv4(address: ipaddress.IPv6Address) -> tuple[str, ipaddress.IPv4Address] | None:
    if address.ipv4_mapped is not None:
        return "IPv4-mapped", address.ipv4_mapped
    if address.sixtofour is not None:
        return "6to4", address.sixtofour
    if address in _NAT64:
        return "NAT64", ipaddress.IPv4Address(address.packed[-4:])
    return None


def forbidden_reason(address: IPAddress) -> str | None:
    """Why ``address`` must not be fetched from (None: a public unicast address).

    IPv4-mapped, 6to4 and NAT64 addresses are judged by the IPv4 address they carry.
    """
    if isinstance(address, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(address)
        if embedded is not None:
            kind, inner = embedded
            reason = forbidden_reason(inner)
            return f"{reason}, {kind}" if reason else None
        if address in _IPV4_COMPATIBLE and int(address) > 1:
            return "IPv4-compatible (deprecated)"
    for flag in ("loopback", "unspecified", "link_local", "multicast", "reserved", "site_local"):
        if getattr(address, f"is_{flag}", False):
            return flag.replace("_", "-")
    for network, name in _SPECIAL_NETWORKS:
        if address.version == network.version and address in network:
            return name
    if address.is_private:
        return "private"
    if not address.is_global:
        return "non-global"
    return None


# Names that lead inside wherever they are resolved: RFC 6761 §6.3 (localhost), RFC 6762
# (local, and the private top-level names of its appendix G), RFC 8375 (home.arpa), ICANN's
# private-use internal
_LOCAL_NAMES = (
    "localhost",
    "local",
    "internal",
    "home.arpa",
    "localdomain",
    "intranet",
    "lan",
    "home",
    "corp",
    "private",
)


def forbidden_name_reason(host: str) -> str | None:
    """Why a URL's host must not be fetched through a proxy, which resolves it where this
    server cannot look (None: a public-looking DNS name). An address literal is judged by
    :func:`forbidden_reason`."""
    name = _normal_host(host)
    try:
        address = ipaddress.ip_address(name.split("%")[0])
    except ValueError:
        pass
    else:
        reason = forbidden_reason(address)
        return f"{address} is a special-use address ({reason})" if reason else None
    for suffix in _LOCAL_NAMES:
        if name == suffix or name.endswith("." + suffix):
            return f"{name} is a local name ({suffix})"
    labels = name.split(".")
    if len(labels) < 2:
        return f"{name} is a single-label name (resolved by the proxy's local search rules)"
    if labels[-1].isdigit() or labels[-1].startswith("0x"):
        return f"{name} is an address in a numeric notation, not a DNS name"
    return None


def _normal_host(host: str) -> str:
    return host.strip("[]").rstrip(".").lower()


def _resolver() -> ThreadPoolExecutor:
    """The threads ``getaddrinfo`` runs in: its own few, never the database's (a name server
    that stalls must not hold a thread the rest of the server needs)."""
    global _RESOLVER
    with _RESOLVER_LOCK:
        if _RESOLVER is None:
            _RESOLVER = ThreadPoolExecutor(RESOLVER_THREADS, thread_name_prefix="mcpauth-resolve")
        return _RESOLVER


async def _resolve(host: str, port: int) -> list[tuple[IPAddress, str]]:
    """Resolve once: ``(address, what to connect to)`` pairs. The caller's deadline bounds the
    wait; a lookup still running then finishes in its resolver thread."""
    try:
        return [(ipaddress.ip_address(host), host)]
    except ValueError:
        pass  # a name, not an address literal
    lookup = functools.partial(socket.getaddrinfo, host, port, type=socket.SOCK_STREAM)
    try:
        infos = await asyncio.get_running_loop().run_in_executor(_resolver(), lookup)
    except (socket.gaierror, UnicodeError) as exc:
        raise FetchError(f"cannot resolve {host}: {exc}") from exc
    found: dict[str, IPAddress] = {}
    for _family, _type, _proto, _canon, sockaddr in infos:
        text = str(sockaddr[0])
        found.setdefault(text, ipaddress.ip_address(text.split("%")[0]))
    if not found:
        raise FetchError(f"cannot resolve {host}: no addresses")
    return [(address, text) for text, address in found.items()]


class _Stream(httpcore2.AsyncNetworkStream):
    """An asyncio connection for httpcore2. The ``timeout`` parameters (httpcore's interface)
    are ignored: the fetch's one total deadline cancels whatever runs when it expires."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109
        try:
            return await self._reader.read(max_bytes)
        except OSError as exc:
            raise httpcore2.ReadError(str(exc)) from exc

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109
        if not buffer:
            return
        try:
            self._writer.write(buffer)
            await self._writer.drain()
        except OSError as exc:
            raise httpcore2.WriteError(str(exc)) from exc

    async def aclose(self) -> None:
        # abort, not close: a graceful TLS close waits for the peer, which may never answer
        self._writer.transport.abort()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
    ) -> httpcore2.AsyncNetworkStream:
        try:
            await self._writer.start_tls(ssl_context, server_hostname=server_hostname)
        except ssl.SSLError as exc:  # the certificate checks, among others
            raise httpcore2.ConnectError(f"TLS with {server_hostname} failed: {exc}") from exc
        except OSError as exc:
            raise httpcore2.ConnectError(str(exc)) from exc
        return self

    def get_extra_info(self, info: str) -> Any:
        return self._writer.get_extra_info(info)


async def _connect_first(addresses: list[tuple[IPAddress, str]], port: int) -> _Stream:
    """A connection to the first of ``addresses`` that accepts one.

    Raises:
        OSError: none did (the last failure).
    """
    failure: OSError = OSError("no address to connect to")
    for address, target in addresses:
        try:
            return await _connect(address, target, port)
        except OSError as exc:
            failure = exc
    raise failure


async def _connect(address: IPAddress, target: str, port: int) -> _Stream:
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setblocking(False)
    try:
        # an address, not a name: asyncio connects without another lookup
        await asyncio.get_running_loop().sock_connect(sock, (target, port))
        reader, writer = await asyncio.open_connection(sock=sock)
    except BaseException:
        sock.close()
        raise
    return _Stream(reader, writer)


class _TCPOnly(httpcore2.AsyncNetworkBackend):
    """What both of the fetcher's network backends share: TCP only, never a unix socket."""

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
        socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        raise FetchError("unix sockets are never fetched from")

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class _GuardedBackend(_TCPOnly):
    """Resolve, check every address (T21: after DNS, at connect time), connect to it."""

    def __init__(self, allow: frozenset[str], deny: frozenset[str]) -> None:
        self._allow = allow
        self._deny = deny
        self.resolving: str | None = None  # the name being looked up, for the timeout message

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
        local_address: str | None = None,
        socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        name = _normal_host(host)
        if name in self._deny:
            raise FetchError(f"{name} is on the deny list")
        self.resolving = name
        addresses = await _resolve(name, port)
        self.resolving = None
        if name not in self._allow:
            for address, _ in addresses:
                # CIMD §6.5 / docs/security.md T21: no special-use address, whatever DNS says
                if (reason := forbidden_reason(address)) is not None:
                    raise FetchError(
                        f"refused {name}: {address} is a special-use address ({reason})"
                    )
        try:
            return await _connect_first(addresses, port)
        except OSError as exc:
            raise httpcore2.ConnectError(str(exc)) from exc


class _ProxyBackend(_TCPOnly):
    """Connects to the operator's proxy, whatever its address (the operator chose it), and to
    nothing else: the hosts fetched from are reached through its tunnels."""

    def __init__(self, proxy: ProxyRoute) -> None:
        self._proxy = proxy
        self.resolving: str | None = None

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
        local_address: str | None = None,
        socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        if (_normal_host(host), port) != (_normal_host(self._proxy.host), self._proxy.port):
            raise FetchError(f"refused {host}:{port}: only the outbound proxy is connected to")
        self.resolving = self._proxy.host
        addresses = await _resolve(_normal_host(host), port)
        self.resolving = None
        try:
            return await _connect_first(addresses, port)
        except OSError as exc:
            raise FetchError(
                f"cannot connect to the outbound proxy {self._proxy.url}: {exc}"
            ) from exc


@contextmanager
def _mapped(url: str, timeout: float) -> Iterator[None]:
    """Turn httpcore's transport errors into one precise ``FetchError``."""
    try:
        yield
    except httpcore2.TimeoutException as exc:
        raise FetchError(f"{url}: no complete response within {timeout:g} s") from exc
    except httpcore2.ProxyError as exc:  # the proxy answered CONNECT with an error status
        raise FetchError(f"{url}: the outbound proxy refused the tunnel: {exc}") from exc
    except (httpcore2.ConnectError, httpcore2.NetworkError) as exc:
        raise FetchError(f"{url}: cannot connect: {exc}") from exc
    except (httpcore2.ProtocolError, httpcore2.UnsupportedProtocol) as exc:
        raise FetchError(f"{url}: malformed HTTP response: {exc}") from exc


def _host_set(hosts: Iterable[str]) -> frozenset[str]:
    return frozenset(_normal_host(h) for h in hosts if h.strip())


async def _read_capped(
    chunks: AsyncIterable[bytes], headers: httpx2.Headers, url: str, max_bytes: int
) -> bytes:
    """The body, refused past ``max_bytes`` without reading the rest (CIMD-00 §6.6)."""
    declared = headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise FetchError(f"{url}: the response is {declared} bytes; the limit is {max_bytes}")
    body = bytearray()
    async for chunk in chunks:
        body += chunk
        if len(body) > max_bytes:
            raise FetchError(f"{url}: the response is larger than {max_bytes} bytes")
    return bytes(body)


def _check_response(status: int, headers: httpx2.Headers, url: str) -> None:
    if 300 <= status < 400:
        # CIMD-00 §4 and docs/security.md T21: redirects are never followed
        target = headers.get("location", "elsewhere")
        raise FetchError(
            f"{url}: redirects to {target} (HTTP {status}); redirects are not followed"
        )
    if status != 200:
        raise FetchError(f"{url}: HTTP {status}; expected 200")
    encoding = headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        raise FetchError(f"{url}: compressed responses ({encoding}) are refused")


class SafeFetcher:
    """GET client-controlled https URLs without reaching internal services.

    ``allow_hosts`` (exact host names) skip the address check, for tests and intranets;
    ``deny_hosts`` are never fetched and win over ``allow_hosts``. ``ssl_context`` replaces the
    default trust store (tests trust their own CA), or is a function that gives it when a
    first fetch needs it (the server's :class:`~mcpauth.server.outbound.TrustStore`). With
    ``proxy`` every fetch goes through that HTTP proxy's CONNECT tunnel, and the URL's host is
    judged by its name or literal (:func:`forbidden_name_reason`) since the proxy resolves it.
    Safe to share between threads and event loops: every fetch has its own connection pool.
    """

    def __init__(
        self,
        *,
        allow_hosts: Iterable[str] = (),
        deny_hosts: Iterable[str] = (),
        timeout: float = DEFAULT_TIMEOUT,
        max_bytes: int = DEFAULT_MAX_BYTES,
        ssl_context: ssl.SSLContext | Callable[[], ssl.SSLContext] | None = None,
        proxy: ProxyRoute | None = None,
    ) -> None:
        self.proxy = proxy
        self.deny_hosts = _host_set(deny_hosts)
        self.allow_hosts = _host_set(allow_hosts) - self.deny_hosts
        self.timeout = timeout
        self.max_bytes = max_bytes
        if isinstance(ssl_context, ssl.SSLContext):
            ssl_context = TrustStore(context=ssl_context)
        self._trust = ssl_context or TrustStore()

    @property
    def ssl_context(self) -> ssl.SSLContext:
        return self._trust()

    async def aget(self, url: str, *, accept: str = "application/json") -> FetchedResponse:
        """Fetch ``url`` once, within ``timeout`` seconds in total, on the running event loop
        (no thread is held while the host takes its time; names resolve in a few threads of
        their own).

        Raises:
            FetchError: the URL is not https or names a denied host; the host resolves to a
                special-use address (unless allow-listed), or, through a proxy, is an address
                literal of one or a local name; connecting (to the proxy too), the tunnel, TLS
                or reading failed or took too long; the answer is a redirect, not 200,
                compressed, or too large.
        """
        target = self._check_url(url)
        backend: _GuardedBackend | _ProxyBackend
        if self.proxy is not None:
            self._check_proxied_host(url, target.host)
            backend = _ProxyBackend(self.proxy)
        else:
            backend = _GuardedBackend(self.allow_hosts, self.deny_hosts)
        try:
            async with asyncio.timeout(self.timeout):
                return await self._exchange(url, target, accept, backend)
        except TimeoutError as exc:
            if backend.resolving is not None:
                raise FetchError(f"resolving {backend.resolving} timed out") from exc
            raise FetchError(f"{url}: no complete response within {self.timeout:g} s") from exc

    def get(self, url: str, *, accept: str = "application/json") -> FetchedResponse:
        """:meth:`aget` for blocking code (the command line, tests): runs its own event loop,
        so never call it from a thread that runs one."""
        return asyncio.run(self.aget(url, accept=accept))

    async def _exchange(
        self,
        url: str,
        target: httpx2.URL,
        accept: str,
        backend: _GuardedBackend | _ProxyBackend,
    ) -> FetchedResponse:
        request_url = httpcore2.URL(
            scheme=target.raw_scheme, host=target.raw_host, port=target.port, target=target.raw_path
        )
        headers = [("Accept", accept), ("Accept-Encoding", "identity"), ("User-Agent", USER_AGENT)]
        # httpcore directly: it never follows redirects, keeps no cookies and reads no proxy
        # settings from the environment; a fresh pool per fetch shares no connections.
        pool = self._pool(backend)
        async with pool:
            with _mapped(url, self.timeout):
                async with pool.stream("GET", request_url, headers=headers) as response:
                    received = httpx2.Headers(response.headers)
                    _check_response(response.status, received, url)
                    content = await _read_capped(
                        response.aiter_stream(), received, url, self.max_bytes
                    )
        return FetchedResponse(url, response.status, received, content)

    def _pool(
        self, backend: _GuardedBackend | _ProxyBackend
    ) -> httpcore2.AsyncConnectionPool | httpcore2.AsyncHTTPProxy:
        if self.proxy is None:
            return httpcore2.AsyncConnectionPool(
                ssl_context=self.ssl_context, network_backend=backend
            )
        # an https URL through an HTTP proxy: CONNECT, then TLS with the host inside the tunnel
        return httpcore2.AsyncHTTPProxy(
            proxy_url=self.proxy.url,
            proxy_auth=self.proxy.auth,
            ssl_context=self.ssl_context,
            network_backend=backend,
        )

    def _check_proxied_host(self, url: str, host: str) -> None:
        """T21 through a proxy: the host is judged by what it says, before anything is sent."""
        if _normal_host(host) in self.allow_hosts:
            return
        if (reason := forbidden_name_reason(host)) is not None:
            raise FetchError(f"{url}: refused: {reason}")

    __call__ = get

    def _check_url(self, url: str) -> httpx2.URL:
        try:
            target = httpx2.URL(url)
        except (httpx2.InvalidURL, TypeError) as exc:
            raise FetchError(f"{url!r} is not a valid URL: {exc}") from exc
        if target.scheme != "https":
            # AS-14 / T21: https only, refused before any connection
            raise FetchError(f"{url}: only https URLs are fetched, not {target.scheme or 'none'!r}")
        if not target.host:
            raise FetchError(f"{url}: the URL has no host")
        if _normal_host(target.host) in self.deny_hosts:
            raise FetchError(f"{url}: {target.host} is on the deny list")
        return target
