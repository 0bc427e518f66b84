"""A TLS-intercepting forward proxy on 127.0.0.1, as the egress proxy of an organisation that
inspects TLS: it answers ``CONNECT host:443``, then terminates TLS itself with a certificate for
that host signed by a CA made for the test, and serves documents from a table by URL. The
server under test reaches "claude.ai" or "chatgpt.com" only through it (``outbound_proxy``),
trusting its CA (``outbound_ca_file``), so no real host is contacted.

It runs its own event loop in a thread, so it serves whatever thread or loop the server's
fetch runs on."""

from __future__ import annotations

import asyncio
import json
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .test_cimd_https import make_certificates

MAX_HEAD = 16 * 1024


@dataclass
class ForwardProxy:
    port: int
    ca_file: Path
    documents: dict[str, Any]
    """URL → the JSON it serves (a document, a JWKS, a discovery document)."""
    tunnels: list[str] = field(default_factory=list)
    """``host:port`` of every CONNECT, in order (refused ones too)."""
    served: list[str] = field(default_factory=list)
    """Every URL asked for inside a tunnel."""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def clear(self) -> None:
        self.tunnels.clear()
        self.served.clear()


async def _head(reader: asyncio.StreamReader) -> list[str]:
    """A request line and its header lines, up to the blank line."""
    raw = await reader.readuntil(b"\r\n\r\n")
    if len(raw) > MAX_HEAD:
        raise ValueError("request head too large")
    return raw.decode("latin-1").split("\r\n")[:-2]


def _response(status: str, body: bytes = b"", media_type: str = "application/json") -> bytes:
    head = f"HTTP/1.1 {status}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n"
    if body:
        head += f"Content-Type: {media_type}\r\n"
    return head.encode() + b"\r\n" + body


class _Handler:
    def __init__(self, proxy: ForwardProxy, hosts: set[str], tls: ssl.SSLContext) -> None:
        self.proxy = proxy
        self.hosts = hosts
        self.tls = tls

    async def __call__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await self._tunnel(reader, writer)
        except (OSError, ValueError, asyncio.IncompleteReadError, ssl.SSLError):
            pass  # the client gave up (a refused certificate, a deadline): nothing to serve
        finally:
            writer.transport.abort()

    async def _tunnel(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        method, target, _ = (await _head(reader))[0].split(" ", 2)
        if method != "CONNECT":
            writer.write(_response("405 Method Not Allowed"))
            return
        self.proxy.tunnels.append(target)
        host, _, port = target.rpartition(":")
        if host.strip("[]") not in self.hosts:
            writer.write(_response("403 Forbidden"))
            await writer.drain()
            return
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await writer.drain()
        await writer.start_tls(self.tls)  # the server side: the stream came from start_server
        path = (await _head(reader))[0].split(" ")[1]
        url = f"https://{host}{'' if port == '443' else ':' + port}{path}"
        self.proxy.served.append(url)
        document = self.proxy.documents.get(url)
        if document is None:
            writer.write(_response("404 Not Found"))
        else:
            writer.write(_response("200 OK", json.dumps(document).encode()))
        await writer.drain()


@contextmanager
def forward_proxy(directory: Path, hosts: list[str]) -> Iterator[ForwardProxy]:
    """A proxy that intercepts TLS for ``hosts`` (refusing CONNECT to any other host) and
    serves ``proxy.documents``; its CA is ``proxy.ca_file``."""
    ca_file, cert_file, key_file = make_certificates(directory, hosts)
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(cert_file, key_file)
    started = threading.Event()
    state: dict[str, Any] = {}

    async def serve() -> None:
        proxy = ForwardProxy(0, ca_file, {})
        server = await asyncio.start_server(_Handler(proxy, set(hosts), tls), "127.0.0.1", 0)
        proxy.port = server.sockets[0].getsockname()[1]
        stop = asyncio.Event()
        state.update(proxy=proxy, loop=asyncio.get_running_loop(), stop=stop)
        started.set()
        async with server:
            await stop.wait()

    thread = threading.Thread(target=asyncio.run, args=(serve(),), name="forward-proxy")
    thread.start()
    if not started.wait(10):
        raise RuntimeError("the forward proxy did not start within 10 s")
    try:
        yield state["proxy"]
    finally:
        with suppress(RuntimeError):  # the loop already ended
            state["loop"].call_soon_threadsafe(state["stop"].set)
        thread.join(timeout=10)


def host_of(url: str) -> str:
    return urlsplit(url).hostname or ""
