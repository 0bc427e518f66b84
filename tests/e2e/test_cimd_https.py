"""Client ID Metadata Documents end to end: uvicorn serves documents over HTTPS on 127.0.0.1
with a certificate from a CA made here; the fetcher trusts that CA through its ssl hook and is
allowed to reach loopback only where the allow list says so (AS-06..AS-18, docs/security.md T21)."""

from __future__ import annotations

import datetime
import ipaddress
import re
import socket
import ssl
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
import uvicorn
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from mcpauth.server.clients import ssrf
from mcpauth.server.clients.metadata_documents import (
    CIMDError,
    MetadataCache,
    fetcher_for,
    resolve_client_metadata_document,
)
from mcpauth.server.clients.ssrf import FetchError, SafeFetcher
from mcpauth.server.config import Settings

from ..support import free_port

pytestmark = pytest.mark.e2e

TEN_MB = 10 * 1024 * 1024


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _subject_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def make_certificates(
    directory: Path, hosts: Sequence[str] = ("localhost", "127.0.0.1")
) -> tuple[Path, Path, Path]:
    """A test CA and a leaf for ``hosts`` (names or addresses; by default ``localhost`` and
    127.0.0.1): (ca.pem, leaf.pem, leaf.key)."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("mcpauth test CA"))
        .issuer_name(_name("mcpauth test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    leaf_key = ec.generate_private_key(ec.SECP256R1())
    names = [_subject_name(host) for host in hosts]
    leaf = (
        x509.CertificateBuilder()
        .subject_name(_name(hosts[0]))
        .issuer_name(ca.subject)
        .public_key(leaf_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    paths = directory / "ca.pem", directory / "leaf.pem", directory / "leaf.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        leaf_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return paths


def _document(request: Request, **changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "client_id": str(request.url),
        "client_name": "End-to-end App",
        "redirect_uris": ["http://127.0.0.1/callback"],
    }
    doc.update(changes)
    return doc


async def app_json(request: Request) -> Response:
    return JSONResponse(_document(request), headers={"Cache-Control": "max-age=600"})


async def no_store(request: Request) -> Response:
    return JSONResponse(_document(request), headers={"Cache-Control": "no-store"})


async def mismatch(request: Request) -> Response:
    return JSONResponse(_document(request, client_id=str(request.url) + "/"))


async def html(request: Request) -> Response:
    return Response("<html>a client</html>", media_type="text/html")


async def to_internal(request: Request) -> Response:
    return RedirectResponse("https://10.0.0.1/latest/meta-data/", status_code=302)


async def to_valid(request: Request) -> Response:
    return RedirectResponse(str(request.url_for("app_json")), status_code=301)


async def slow(request: Request) -> Response:
    await anyio.sleep(5)
    return JSONResponse(_document(request))


async def drip(request: Request) -> Response:
    async def body() -> AsyncIterator[bytes]:
        for _ in range(50):  # one byte every 0.1 s: each read is quick, the whole is not
            yield b" "
            await anyio.sleep(0.1)

    return StreamingResponse(body(), media_type="application/json")


async def big(request: Request) -> Response:
    return Response(b" " * TEN_MB, media_type="application/json")


async def big_chunked(request: Request) -> Response:
    async def body() -> AsyncIterator[bytes]:
        chunk = b" " * 65536
        for _ in range(TEN_MB // len(chunk)):
            yield chunk

    return StreamingResponse(body(), media_type="application/json")


ROUTES = [
    Route("/clients/app.json", app_json, name="app_json"),
    Route("/clients/no-store.json", no_store),
    Route("/clients/mismatch.json", mismatch),
    Route("/clients/page.html", html),
    Route("/clients/to-internal.json", to_internal),
    Route("/clients/to-valid.json", to_valid),
    Route("/clients/slow.json", slow),
    Route("/clients/drip.json", drip),
    Route("/clients/big.json", big),
    Route("/clients/big-chunked.json", big_chunked),
]


@dataclass
class DocumentServer:
    port: int
    ca_file: Path
    requests: list[str]

    def url(self, path: str, host: str = "localhost") -> str:
        return f"https://{host}:{self.port}{path}"

    def ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_file))


def _recording(app: ASGIApp, requests: list[str]) -> ASGIApp:
    async def recorder(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            requests.append(scope["path"])
        await app(scope, receive, send)

    return recorder


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DocumentServer]:
    ca_file, cert_file, key_file = make_certificates(tmp_path_factory.mktemp("tls"))
    requests: list[str] = []
    config = uvicorn.Config(
        _recording(Starlette(routes=ROUTES), requests),
        host="127.0.0.1",
        port=free_port(),
        ssl_certfile=str(cert_file),
        ssl_keyfile=str(key_file),
        log_level="warning",
        lifespan="off",
        timeout_graceful_shutdown=2,
    )
    uvicorn_server = uvicorn.Server(config)
    thread = threading.Thread(target=uvicorn_server.run, name="cimd-documents", daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not uvicorn_server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the HTTPS document server did not start within 10 s")
        time.sleep(0.02)
    try:
        yield DocumentServer(config.port, ca_file, requests)
    finally:
        uvicorn_server.should_exit = True
        thread.join(timeout=15)


@pytest.fixture
def docs(server: DocumentServer) -> DocumentServer:
    server.requests.clear()
    return server


@pytest.fixture
def cimd_settings(make_settings: Callable[..., Settings]) -> Settings:
    return make_settings(cimd_allow_hosts=("localhost", "127.0.0.1"), cimd_timeout=1.0)


def resolve(settings: Settings, server: DocumentServer, url: str, **kwargs: Any) -> Any:
    fetcher = fetcher_for(settings, ssl_context=server.ssl_context())
    return resolve_client_metadata_document(settings, url, fetcher=fetcher, **kwargs)


def fetch_failure(settings: Settings, server: DocumentServer, url: str) -> str:
    """Why resolving ``url`` failed, as logged: the requester is told only that the document
    could not be fetched (no addresses, no connection errors)."""
    with pytest.raises(CIMDError) as caught:
        resolve(settings, server, url)
    assert caught.value.description == "the client metadata document could not be fetched"
    assert isinstance(caught.value.__cause__, FetchError)
    return caught.value.__cause__.message


@pytest.fixture
def connections(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Every TCP connection the fetcher opens, in order (they still go through)."""
    seen: list[tuple[str, int]] = []
    real = socket.socket.connect

    def recording(sock: socket.socket, address: Any) -> None:
        seen.append((str(address[0]), int(address[1])))
        real(sock, address)

    monkeypatch.setattr(socket.socket, "connect", recording)
    return seen


@pytest.fixture
def bytes_read(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The size of every read the fetcher makes from the network."""
    sizes: list[int] = []
    real = ssrf._Stream.read

    async def counting(self: Any, max_bytes: int, **kwargs: Any) -> bytes:
        data = await real(self, max_bytes, **kwargs)
        sizes.append(len(data))
        return data

    monkeypatch.setattr(ssrf._Stream, "read", counting)
    return sizes


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1"])
def test_as08_a_metadata_document_resolves_over_https_on_an_allow_listed_loopback_host(
    docs: DocumentServer, cimd_settings: Settings, host: str
) -> None:
    url = docs.url("/clients/app.json", host)
    cache = MetadataCache()
    client = resolve(cimd_settings, docs, url, cache=cache)
    again = resolve(cimd_settings, docs, url, cache=cache)
    assert client.client_id == again.client_id == url
    assert client.source == "cimd"
    assert client.client_name == "End-to-end App"
    assert client.application_type == "native"
    assert docs.requests == ["/clients/app.json"]  # AS-10: the second came from the cache


def test_as10_a_no_store_document_is_fetched_on_every_resolution(
    docs: DocumentServer, cimd_settings: Settings
) -> None:
    cache = MetadataCache()
    for _ in range(2):
        resolve(cimd_settings, docs, docs.url("/clients/no-store.json"), cache=cache)
    assert docs.requests == ["/clients/no-store.json"] * 2
    assert len(cache) == 0


def test_t21_the_same_server_is_refused_without_the_allow_list(
    docs: DocumentServer, make_settings: Callable[..., Settings], connections: list[Any]
) -> None:
    for host in ("localhost", "127.0.0.1"):
        reason = fetch_failure(make_settings(), docs, docs.url("/clients/app.json", host))
        assert "special-use address (loopback)" in reason
    assert connections == []
    assert docs.requests == []


def test_as18_the_deny_list_beats_the_allow_list_against_the_real_server(
    docs: DocumentServer, make_settings: Callable[..., Settings], connections: list[Any]
) -> None:
    settings = make_settings(cimd_allow_hosts=("localhost",), cimd_deny_hosts=("localhost",))
    with pytest.raises(CIMDError, match="not accepted here"):
        resolve(settings, docs, docs.url("/clients/app.json"))
    with pytest.raises(FetchError, match="deny list"):
        fetcher_for(settings).get(docs.url("/clients/app.json"))
    assert connections == []
    assert docs.requests == []


def test_t21_plain_http_is_refused_without_a_connection(
    docs: DocumentServer, cimd_settings: Settings, connections: list[Any]
) -> None:
    url = docs.url("/clients/app.json").replace("https://", "http://")
    with pytest.raises(CIMDError, match="must use the https scheme"):
        resolve(cimd_settings, docs, url)
    with pytest.raises(FetchError, match="only https URLs are fetched"):
        fetcher_for(cimd_settings).get(url)
    assert connections == []


@pytest.mark.parametrize("path", ["/clients/to-internal.json", "/clients/to-valid.json"])
def test_t21_redirects_are_refused_and_never_followed(
    docs: DocumentServer, cimd_settings: Settings, connections: list[Any], path: str
) -> None:
    reason = fetch_failure(cimd_settings, docs, docs.url(path))
    assert re.search(r"redirects to .* redirects are not followed", reason)
    assert docs.requests == [path]
    assert connections
    assert all(host in ("127.0.0.1", "::1") for host, _ in connections)
    assert ("10.0.0.1", 443) not in connections


def test_t21_a_slow_server_is_cut_off_at_the_total_timeout(
    docs: DocumentServer, cimd_settings: Settings
) -> None:
    started = time.monotonic()
    reason = fetch_failure(cimd_settings, docs, docs.url("/clients/slow.json"))
    assert "no complete response within 1 s" in reason
    assert 0.9 <= time.monotonic() - started < 3


def test_t21_a_trickling_server_is_cut_off_although_each_read_is_quick(
    docs: DocumentServer, cimd_settings: Settings
) -> None:
    started = time.monotonic()
    reason = fetch_failure(cimd_settings, docs, docs.url("/clients/drip.json"))
    assert "no complete response within 1 s" in reason
    assert 0.9 <= time.monotonic() - started < 3


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/clients/big.json", "the response is 10485760 bytes; the limit is 5120"),
        ("/clients/big-chunked.json", "the response is larger than 5120 bytes"),
    ],
)
def test_t21_a_10_mb_body_is_refused_without_reading_it(
    docs: DocumentServer, cimd_settings: Settings, bytes_read: list[int], path: str, message: str
) -> None:
    assert message in fetch_failure(cimd_settings, docs, docs.url(path))
    assert sum(bytes_read) < 256 * 1024  # a few reads of at most 64 KiB, not 10 MB


def test_as09_a_document_naming_another_client_id_is_refused(
    docs: DocumentServer, cimd_settings: Settings
) -> None:
    cache = MetadataCache()
    for _ in range(2):
        with pytest.raises(CIMDError, match="is not its URL"):
            resolve(cimd_settings, docs, docs.url("/clients/mismatch.json"), cache=cache)
    assert docs.requests == ["/clients/mismatch.json"] * 2  # AS-10: never cached


def test_as12_a_document_that_is_not_json_is_refused(
    docs: DocumentServer, cimd_settings: Settings
) -> None:
    with pytest.raises(CIMDError, match="must be served as application/json, not text/html"):
        resolve(cimd_settings, docs, docs.url("/clients/page.html"))


def test_t21_the_certificate_is_verified_against_the_host_name(
    docs: DocumentServer, cimd_settings: Settings
) -> None:
    untrusting = SafeFetcher(allow_hosts=["localhost"], timeout=1.0)
    with pytest.raises(FetchError, match="CERTIFICATE_VERIFY_FAILED"):
        untrusting.get(docs.url("/clients/app.json"))
    assert docs.requests == []
