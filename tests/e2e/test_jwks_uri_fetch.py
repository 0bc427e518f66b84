"""A ``private_key_jwt`` client's keys at its ``jwks_uri`` are fetched like metadata documents:
on the event loop through the fetch gate. Keys served over HTTPS verify the assertion; a
``jwks_uri`` whose host stalls fails with ``invalid_client`` saying only that the keys could
not be fetched, and the failure is remembered, so the host is asked once."""

from __future__ import annotations

import ssl
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import httpx2
import jwt as pyjwt
import pytest
import uvicorn
from cryptography.hazmat.primitives.asymmetric import ec
from jwt.algorithms import ECAlgorithm
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from mcpauth.server import Settings, admin, create_app

from ..conftest import ISSUER
from ..support import free_port
from .test_cimd_https import make_certificates
from .test_cimd_stall import StallingServer

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]
RESOURCE = "http://127.0.0.1:8000/mcp"
KEY = ec.generate_private_key(ec.SECP256R1())
KID = "k1"


async def jwks(request: Request) -> Response:
    public = ECAlgorithm.to_jwk(KEY.public_key(), as_dict=True)
    return JSONResponse({"keys": [{**public, "kid": KID, "use": "sig", "alg": "ES256"}]})


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    return make_certificates(tmp_path_factory.mktemp("jwks-tls"))


@pytest.fixture(scope="module")
def keys_server(tls: tuple[Path, Path, Path]) -> Iterator[str]:
    config = uvicorn.Config(
        Starlette(routes=[Route("/jwks.json", jwks)]),
        host="127.0.0.1",
        port=free_port(),
        ssl_certfile=str(tls[1]),
        ssl_keyfile=str(tls[2]),
        log_level="warning",
        lifespan="off",
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="jwks-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert thread.is_alive(), "the JWKS server stopped"
        assert time.monotonic() < deadline, "the JWKS server did not start within 10 s"
        time.sleep(0.02)
    try:
        yield f"https://127.0.0.1:{config.port}/jwks.json"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture
def stalling(tls: tuple[Path, Path, Path]) -> Iterator[StallingServer]:
    server = StallingServer(tls[1], tls[2])
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def app(make_settings: Callable[..., Settings], tls: tuple[Path, Path, Path]) -> Starlette:
    settings = make_settings(cimd_allow_hosts=("127.0.0.1",), cimd_timeout=0.5)
    app = create_app(settings, outbound_ssl_context=ssl.create_default_context(cafile=tls[0]))
    admin.add_resource(
        app.state.mcpauth, RESOURCE, scopes=["mcp:tools"], default_scopes=["mcp:tools"],
        is_default=True,
    )  # fmt: skip
    return app


@pytest.fixture
async def http(app: Starlette) -> AsyncIterator[httpx2.AsyncClient]:
    async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app), base_url=ISSUER) as client:
        yield client


def _register(app: Starlette, jwks_uri: str) -> str:
    info = admin.add_client(
        app.state.mcpauth,
        name="keys at a URL",
        grant_types=["client_credentials"],
        auth_method="private_key_jwt",
        jwks_uri=jwks_uri,
    )
    return str(info["client_id"])


def _assertion(client_id: str) -> str:
    now = int(time.time())
    claims = {
        "iss": client_id,
        "sub": client_id,
        "aud": f"{ISSUER}/token",
        "exp": now + 60,
        "iat": now,
        "jti": uuid.uuid4().hex,
    }
    return pyjwt.encode(claims, KEY, algorithm="ES256", headers={"kid": KID})


async def _token(http: httpx2.AsyncClient, client_id: str) -> httpx2.Response:
    return await http.post(
        "/token",
        data={
            "grant_type": "client_credentials",
            "client_assertion_type": "urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
            "client_assertion": _assertion(client_id),
        },
    )


async def test_keys_at_a_jwks_uri_verify_the_client_assertion(
    app: Starlette, http: httpx2.AsyncClient, keys_server: str
) -> None:
    response = await _token(http, _register(app, keys_server))
    assert response.status_code == 200, response.text
    assert response.json()["token_type"] == "Bearer"


async def test_a_stalling_jwks_uri_fails_once_and_the_failure_is_remembered(
    app: Starlette, http: httpx2.AsyncClient, stalling: StallingServer
) -> None:
    client_id = _register(app, stalling.url("/jwks.json"))
    description = "Client assertion rejected: The client's jwks_uri cannot be fetched"
    expected = {"error": "invalid_client", "error_description": description}
    for _ in range(2):
        response = await _token(http, client_id)
        assert response.status_code == 401, response.text
        assert response.json() == expected
    assert len(stalling.requests) == 1  # the second answer came from the remembered failure
