"""The keys of a trusted assertion issuer on a host that stalls must not take the server down: a
real server process (uvicorn running ``create_app``) has a workload rule whose JWKS URL points at
a TCP listener on 127.0.0.1 that accepts connections and never says a word. 50 anonymous
jwt-bearer requests with tokens naming that issuer wait for its keys; meanwhile readiness and a
dynamic registration still answer at once. The 50 share one fetch, each gets a 503
``temporarily_unavailable`` when it fails, and the failure is remembered: a request during the
back-off is answered from memory without a new connection."""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx2
import jwt as pyjwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from mcpauth.oauth import JWT_BEARER
from mcpauth.server import Settings, admin

from ..support import free_port, running

pytestmark = pytest.mark.e2e

RACERS = 50
FAST = 0.5  # what the rest of the server may take while the racers stall
MEASURE_TIMEOUT = 10.0  # a measured request unanswered by then counts as infinitely slow
RESOURCE = "http://127.0.0.1:8000/mcp"
PLATFORM = "https://platform.example"
SUBJECT = "system:serviceaccount:ci:builder"
KEY = ec.generate_private_key(ec.SECP256R1())

SERVE = """
import json, sys
import uvicorn
from mcpauth.server import Settings, create_app

settings = Settings(**json.loads(open(sys.argv[1]).read()))
uvicorn.run(create_app(settings), host="127.0.0.1", port=int(sys.argv[2]), log_level="warning")
"""


class SilentServer:
    """Accepts TCP connections on 127.0.0.1 and never sends a byte (not even a TLS handshake)
    until closed; counts the connections."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=128)
        self._listener.settimeout(0.05)
        self.port = self._listener.getsockname()[1]
        self.connections: list[socket.socket] = []
        self._changed = threading.Condition()
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="silent-accept", daemon=True)
        self._thread.start()

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
            with self._changed:
                self.connections.append(connection)
                self._changed.notify_all()

    def count(self) -> int:
        with self._changed:
            return len(self.connections)

    def wait_for_connections(self, count: int, timeout: float = 10.0) -> None:
        with self._changed:
            if not self._changed.wait_for(lambda: len(self.connections) >= count, timeout):
                raise TimeoutError(f"{len(self.connections)} of {count} within {timeout} s")

    def close(self) -> None:
        self._closing.set()
        self._listener.close()
        self._thread.join(timeout=5)
        for connection in self.connections:
            connection.close()


@dataclass
class AuthServer:
    issuer: str
    silent: SilentServer


@pytest.fixture(scope="module")
def auth(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuthServer]:
    tmp = tmp_path_factory.mktemp("key-stall")
    silent = SilentServer()
    port = free_port()
    values: dict[str, Any] = {
        "issuer": f"http://127.0.0.1:{port}",
        "database_url": f"sqlite:///{tmp / 'mcpauth.db'}",
        "secret_key": "key-stall-test-secret-0123456789abcdef",
        "log_level": "warning",
    }
    ctx = admin.open_context(Settings(**values))
    admin.add_resource(
        ctx, RESOURCE, scopes=["mcp:tools"], default_scopes=["mcp:tools"], is_default=True
    )
    builder = admin.add_client(
        ctx, name="ci builder", grant_types=[JWT_BEARER], auth_method="none", scopes=["mcp:tools"]
    )
    rule = {"issuer": PLATFORM, "jwks": silent.url("/jwks"), "subject": SUBJECT}
    values["workloads"] = [{**rule, "client_id": builder["client_id"]}]
    (tmp / "settings.json").write_text(json.dumps(values))
    (tmp / "serve.py").write_text(SERVE)
    args = [sys.executable, str(tmp / "serve.py"), str(tmp / "settings.json"), str(port)]
    try:
        with running(args, ready_url=f"{values['issuer']}/health", cwd=tmp):
            yield AuthServer(values["issuer"], silent)
    finally:
        silent.close()


def _platform_token(issuer: str) -> str:
    now = int(time.time())
    claims = {"iss": PLATFORM, "sub": SUBJECT, "aud": issuer, "iat": now, "exp": now + 600}
    return pyjwt.encode(claims, KEY, algorithm="ES256", headers={"kid": "k1"})


def _workload_token(http: httpx2.AsyncClient, issuer: str) -> Any:
    form = {"grant_type": JWT_BEARER, "assertion": _platform_token(issuer)}
    return http.post(f"{issuer}/token", data=form)  # anonymous: the token is the credential


def _ready(http: httpx2.AsyncClient, issuer: str) -> Any:
    return http.get(f"{issuer}/health/ready", timeout=MEASURE_TIMEOUT)


def _register(http: httpx2.AsyncClient, issuer: str, n: int) -> Any:
    document = {"client_name": f"app {n}", "redirect_uris": ["http://127.0.0.1/callback"]}
    return http.post(f"{issuer}/register", json=document, timeout=MEASURE_TIMEOUT)


async def _timed(
    name: str, timings: dict[str, list[float]], request: Any
) -> httpx2.Response | None:
    """``request``'s response, its time recorded; None (and infinity) past its timeout."""
    started = time.monotonic()
    try:
        response: httpx2.Response = await request
    except httpx2.TimeoutException:
        timings.setdefault(name, []).append(float("inf"))
        return None
    timings.setdefault(name, []).append(time.monotonic() - started)
    return response


async def _while_stalled(auth: AuthServer) -> tuple[list[httpx2.Response], dict[str, list[float]]]:
    """Fire the racers; once the silent host has a connection, time readiness and a
    registration three times while the racers are still waiting."""
    limits = httpx2.Limits(max_connections=RACERS + 10, max_keepalive_connections=RACERS + 10)
    timings: dict[str, list[float]] = {}
    async with httpx2.AsyncClient(timeout=60, limits=limits) as http:
        racers = [asyncio.ensure_future(_workload_token(http, auth.issuer)) for _ in range(RACERS)]
        await asyncio.to_thread(auth.silent.wait_for_connections, 1)
        for n in range(3):
            ready, registered = await asyncio.gather(
                _timed("ready", timings, _ready(http, auth.issuer)),
                _timed("register", timings, _register(http, auth.issuer, n)),
            )
            if ready is not None and registered is not None:  # None: timed out (timings say)
                assert ready.status_code == 200, ready.text
                assert registered.status_code == 201, registered.text
        waiting = sum(not racer.done() for racer in racers)
        print(f"\n{RACERS} racers, {waiting} still waiting after the measurements:")
        for name, values in timings.items():
            print(f"  {name}: " + ", ".join(f"{v * 1000:.1f} ms" for v in values))
        assert max(timings["ready"]) < FAST, timings
        assert max(timings["register"]) < FAST, timings
        assert waiting > 0, "the measurements must happen while requests are stalled"
        responses = list(await asyncio.gather(*racers))
    return responses, timings


def _assert_unavailable(response: httpx2.Response) -> None:
    assert response.status_code == 503, response.text
    body = response.json()
    assert body["error"] == "temporarily_unavailable"
    assert "keys" in body["error_description"]
    assert int(response.headers["retry-after"]) >= 1
    assert "127.0.0.1" not in response.text  # where and how the fetch failed stays in the log


def test_fifty_assertions_naming_a_stalling_issuer_leave_the_rest_of_the_server_answering(
    auth: AuthServer,
) -> None:
    responses, _ = asyncio.run(_while_stalled(auth))
    for response in responses:
        _assert_unavailable(response)
    assert auth.silent.count() == 1  # one fetch, awaited by all fifty
    # the failure is remembered: asking again during the back-off is answered from memory
    started = time.monotonic()
    again = httpx2.post(
        f"{auth.issuer}/token",
        data={"grant_type": JWT_BEARER, "assertion": _platform_token(auth.issuer)},
        timeout=FAST,
    )
    assert time.monotonic() - started < FAST
    _assert_unavailable(again)
    assert auth.silent.count() == 1
