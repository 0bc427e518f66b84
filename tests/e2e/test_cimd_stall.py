"""Client metadata documents served by a host that stalls must not take the server down: a real
server process (uvicorn running ``create_app``) gets 50 concurrent /authorize and /token
requests whose client_id points at a TLS server that completes the handshake, reads the
request and never answers. While those requests wait, readiness and a confidential client's
client_credentials request still answer at once; afterwards every stalled request gets the
endpoint's error saying only that the document could not be fetched."""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import pytest

from mcpauth.server import Settings, admin

from ..support import free_port, running
from .test_cimd_https import make_certificates

pytestmark = pytest.mark.e2e

RACERS = 50
STALL_SECONDS = 3.0  # the server's fetch deadline: the racers wait this long, then fail
FAST = 0.5  # what the rest of the server may take while the racers stall
RESOURCE = "http://127.0.0.1:8000/mcp"
REDIRECT_URI = "http://127.0.0.1/callback"
CHALLENGE = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
NOT_FETCHED = "the client metadata document could not be fetched"

SERVE = """
import json, ssl, sys
import uvicorn
from mcpauth.server import Settings, create_app

settings = Settings(**json.loads(open(sys.argv[1]).read()))
context = ssl.create_default_context(cafile=sys.argv[2])
app = create_app(settings, outbound_ssl_context=context)
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[3]), log_level="warning")
"""


class StallingServer:
    """Accepts TLS connections on 127.0.0.1, reads each request, never answers (until closed)."""

    def __init__(self, cert_file: Path, key_file: Path) -> None:
        self._tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._tls.load_cert_chain(cert_file, key_file)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.05)
        self.port = self._listener.getsockname()[1]
        self.requests: list[bytes] = []
        self._changed = threading.Condition()
        self._closing = threading.Event()
        self._threads = [threading.Thread(target=self._accept, name="stall-accept", daemon=True)]
        self._threads[0].start()

    def url(self, path: str) -> str:
        return f"https://127.0.0.1:{self.port}{path}"

    def _accept(self) -> None:
        while not self._closing.is_set():
            try:
                connection, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            thread = threading.Thread(target=self._stall, args=(connection,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _stall(self, connection: socket.socket) -> None:
        connection.settimeout(10)
        try:
            with self._tls.wrap_socket(connection, server_side=True) as tls:
                request = tls.recv(65536)
                with self._changed:
                    self.requests.append(request)
                    self._changed.notify_all()
                self._closing.wait(30)  # the answer that never comes
        except OSError:
            connection.close()

    def wait_for_requests(self, count: int, timeout: float = 10.0) -> None:
        with self._changed:
            if not self._changed.wait_for(lambda: len(self.requests) >= count, timeout):
                raise TimeoutError(f"{len(self.requests)} of {count} requests within {timeout} s")

    def close(self) -> None:
        self._closing.set()
        self._listener.close()
        for thread in self._threads:
            thread.join(timeout=5)


@dataclass
class AuthServer:
    issuer: str
    client_id: str
    client_secret: str
    timings: dict[str, list[float]] = field(default_factory=dict)


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    return make_certificates(tmp_path_factory.mktemp("stall-tls"))


@pytest.fixture
def stalling(tls_files: tuple[Path, Path, Path]) -> Iterator[StallingServer]:
    server = StallingServer(tls_files[1], tls_files[2])
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def auth(
    tmp_path_factory: pytest.TempPathFactory, tls_files: tuple[Path, Path, Path]
) -> Iterator[AuthServer]:
    tmp = tmp_path_factory.mktemp("stall-server")
    port = free_port()
    values: dict[str, Any] = {
        "issuer": f"http://127.0.0.1:{port}",
        "database_url": f"sqlite:///{tmp / 'mcpauth.db'}",
        "secret_key": "stall-test-secret-0123456789abcdef",
        "cimd_allow_hosts": ["127.0.0.1"],
        "cimd_timeout": STALL_SECONDS,
        "log_level": "warning",
    }
    ctx = admin.open_context(Settings(**values))
    admin.add_resource(
        ctx, RESOURCE, scopes=["mcp:tools"], default_scopes=["mcp:tools"], is_default=True
    )
    bot = admin.add_client(
        ctx, name="bot", grant_types=["client_credentials"], auth_method="client_secret_basic"
    )
    (tmp / "settings.json").write_text(json.dumps(values))
    (tmp / "serve.py").write_text(SERVE)
    args = [sys.executable, str(tmp / "serve.py"), str(tmp / "settings.json")]
    args += [str(tls_files[0]), str(port)]
    with running(args, ready_url=f"{values['issuer']}/health", cwd=tmp):
        yield AuthServer(values["issuer"], bot["client_id"], bot["client_secret"])


def _authorize(http: httpx2.AsyncClient, auth: AuthServer, client_id: str) -> Any:
    params = {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": REDIRECT_URI,
        "code_challenge": CHALLENGE,
        "code_challenge_method": "S256",
        "state": "s",
    }
    return http.get(f"{auth.issuer}/authorize", params=params)


def _redeem(http: httpx2.AsyncClient, auth: AuthServer, client_id: str) -> Any:
    form = {
        "grant_type": "authorization_code",
        "code": "never-issued",
        "code_verifier": "v" * 43,
        "redirect_uri": REDIRECT_URI,
        "client_id": client_id,
    }
    return http.post(f"{auth.issuer}/token", data=form)


async def _timed(name: str, timings: dict[str, list[float]], request: Any) -> httpx2.Response:
    started = time.monotonic()
    response: httpx2.Response = await request
    timings.setdefault(name, []).append(time.monotonic() - started)
    return response


async def _while_stalled(
    auth: AuthServer, stalling: StallingServer, client_ids: list[str], fetches: int
) -> tuple[list[httpx2.Response], dict[str, list[float]]]:
    """Fire the racers; once the stalling host has ``fetches`` requests, time readiness and a
    client_credentials token three times while every racer is still waiting."""
    limits = httpx2.Limits(max_connections=RACERS + 10, max_keepalive_connections=RACERS + 10)
    timings: dict[str, list[float]] = {}
    async with httpx2.AsyncClient(timeout=30, limits=limits) as http:
        racers = [
            asyncio.ensure_future((_authorize if n % 2 else _redeem)(http, auth, client_id))
            for n, client_id in enumerate(client_ids)
        ]
        await asyncio.to_thread(stalling.wait_for_requests, fetches)
        for _ in range(3):
            ready, token = await asyncio.gather(
                _timed("ready", timings, http.get(f"{auth.issuer}/health/ready")),
                _timed(
                    "client_credentials",
                    timings,
                    http.post(
                        f"{auth.issuer}/token",
                        data={"grant_type": "client_credentials"},
                        auth=(auth.client_id, auth.client_secret),
                    ),
                ),
            )
            assert ready.status_code == 200, ready.text
            assert token.status_code == 200, token.text
        waiting = sum(not racer.done() for racer in racers)
        responses = list(await asyncio.gather(*racers))
    print(f"\n{len(client_ids)} racers, {waiting} still waiting after the measurements:")
    for name, values in timings.items():
        print(f"  {name}: " + ", ".join(f"{v * 1000:.1f} ms" for v in values))
    assert waiting > 0, "the measurements must happen while requests are stalled"
    return responses, timings


def _assert_error(response: httpx2.Response, description: str) -> None:
    if response.request.url.path.endswith("/token"):
        assert response.status_code == 401, response.text
        assert response.json() == {"error": "invalid_client", "error_description": description}
    else:
        assert response.status_code == 400, response.text
        assert "invalid_client" in response.text
        assert description in response.text
    # not an oracle: how the fetch failed stays in the server's log
    assert "within" not in response.text
    assert "timed out" not in response.text


def test_fifty_requests_for_a_stalling_document_leave_the_rest_of_the_server_answering(
    auth: AuthServer, stalling: StallingServer
) -> None:
    url = stalling.url("/clients/stalls.json")
    responses, timings = asyncio.run(_while_stalled(auth, stalling, [url] * RACERS, 1))
    assert max(timings["ready"]) < FAST
    assert max(timings["client_credentials"]) < FAST
    for response in responses:
        _assert_error(response, NOT_FETCHED)
    assert len(stalling.requests) == 1  # one fetch, awaited by all fifty
    # the failure is remembered: asking again is answered from memory, the host is not asked
    again = httpx2.post(
        f"{auth.issuer}/token",
        data={"grant_type": "refresh_token", "refresh_token": "r", "client_id": url},
        timeout=FAST,
    )
    _assert_error(again, NOT_FETCHED)
    assert len(stalling.requests) == 1


def test_fifty_distinct_stalling_documents_are_capped_and_the_rest_declined_at_once(
    auth: AuthServer, stalling: StallingServer
) -> None:
    urls = [stalling.url(f"/clients/{n}.json") for n in range(RACERS)]
    responses, timings = asyncio.run(_while_stalled(auth, stalling, urls, 1))
    assert max(timings["ready"]) < FAST
    assert max(timings["client_credentials"]) < FAST
    failed = [r for r in responses if NOT_FETCHED in r.text]
    declined = [r for r in responses if "right now" in r.text]
    assert 1 <= len(failed) <= 4  # at most four fetches at once from one host or address
    assert len(failed) + len(declined) == RACERS
    for response in declined:
        _assert_error(
            response, "too many client documents are being fetched right now; try again shortly"
        )
    for response in failed:
        _assert_error(response, NOT_FETCHED)
    assert 1 <= len(stalling.requests) <= len(failed)  # declined ones never reached it
