"""Trusted issuers' keys at https URLs, fetched for real: a TLS server on 127.0.0.1 (a
certificate from a CA made here, trusted through ``outbound_ssl_context``) serves a workload
platform's JWKS and an identity provider's. Tokens signed with those keys are accepted, however
many requests arrive at once the keys are fetched once, and an issuer whose JWKS URL fails is
answered ``temporarily_unavailable`` (workload tokens and ID-JAGs alike) and not asked again
during its back-off."""

from __future__ import annotations

import asyncio
import json
import secrets
import ssl
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx2
import pytest
from starlette.applications import Starlette

from mcpauth import jwt
from mcpauth.oauth import JWT_BEARER
from mcpauth.server import Settings, admin, create_app

from ..conftest import ISSUER
from .test_cimd_https import make_certificates

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

RESOURCE = "http://127.0.0.1:8000/mcp"
PLATFORM = "https://platform.example"
BROKEN = "https://broken-platform.example"
IDP = "https://idp.example"
BROKEN_IDP = "https://broken-idp.example"
SUBJECT = "system:serviceaccount:ci:builder"
PLATFORM_KEY = jwt.generate_private_key("ES256")
IDP_KEY = jwt.generate_private_key("ES256")
DOCUMENTS = {
    "/platform/keys": {"keys": [jwt.public_jwk(PLATFORM_KEY.public_key(), kid="p1", alg="ES256")]},
    "/idp/jwks": {"keys": [jwt.public_jwk(IDP_KEY.public_key(), kid="i1", alg="ES256")]},
}


class KeyServer:
    """Serves ``DOCUMENTS`` over TLS (anything else: 500) and counts the requests per path."""

    def __init__(self, cert: Path, key: Path) -> None:
        self.requests: Counter[str] = Counter()
        served = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                served.requests[self.path] += 1
                document = DOCUMENTS.get(self.path)
                body = json.dumps(document or {"error": "down"}).encode()
                self.send_response(200 if document else 500)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(cert, key)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.socket = tls.wrap_socket(self._server.socket, server_side=True)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def url(self, path: str) -> str:
        return f"https://127.0.0.1:{self.port}{path}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


@dataclass
class Deployment:
    app: Starlette
    keys: KeyServer
    builder: str
    agent: dict[str, Any]

    async def token(self, form: dict[str, str], auth: tuple[str, str] | None = None) -> Any:
        transport = httpx2.ASGITransport(app=self.app)
        async with httpx2.AsyncClient(transport=transport, base_url=ISSUER) as http:
            return await http.post("/token", data={"grant_type": JWT_BEARER, **form}, auth=auth)


@pytest.fixture
def deployment(tmp_path: Path, make_settings: Callable[..., Settings]) -> Iterator[Deployment]:
    ca, cert, key = make_certificates(tmp_path)
    keys = KeyServer(cert, key)
    first = create_app(make_settings())
    ctx = first.state.mcpauth
    admin.add_resource(ctx, RESOURCE, scopes=["mcp:tools"], is_default=True)
    builder = admin.add_client(
        ctx, name="ci builder", grant_types=[JWT_BEARER], auth_method="none", scopes=["mcp:tools"]
    )["client_id"]
    agent = admin.add_client(ctx, name="Enterprise agent", grant_types=[JWT_BEARER])
    rules = [
        {"issuer": PLATFORM, "jwks": keys.url("/platform/keys"), "subject": SUBJECT,
         "client_id": builder},
        {"issuer": BROKEN, "jwks": keys.url("/broken/keys"), "subject": SUBJECT,
         "client_id": builder},
    ]  # fmt: skip
    idps = {IDP: keys.url("/idp/jwks"), BROKEN_IDP: keys.url("/broken/jwks")}
    settings = make_settings(workloads=rules, trusted_idps=idps)
    outbound = ssl.create_default_context(cafile=str(ca))
    try:
        yield Deployment(create_app(settings, outbound_ssl_context=outbound), keys, builder, agent)
    finally:
        keys.close()


def platform_token(issuer: str = PLATFORM) -> str:
    now = int(time.time())
    claims = {"iss": issuer, "sub": SUBJECT, "aud": ISSUER, "iat": now, "exp": now + 600}
    return jwt.encode(claims, PLATFORM_KEY, alg="ES256", kid="p1", typ="JWT")


def id_jag(client_id: str, issuer: str = IDP) -> str:
    now = int(time.time())
    claims = {
        "iss": issuer, "sub": "employee-42", "aud": ISSUER, "client_id": client_id,
        "resource": RESOURCE, "jti": secrets.token_urlsafe(12), "iat": now, "exp": now + 300,
    }  # fmt: skip
    return jwt.encode(claims, IDP_KEY, alg="ES256", kid="i1", typ="oauth-id-jag+jwt")


async def test_keys_at_https_urls_verify_tokens_and_concurrent_requests_fetch_them_once(
    deployment: Deployment,
) -> None:
    responses = await asyncio.gather(
        *(deployment.token({"assertion": platform_token()}) for _ in range(20))
    )
    for response in responses:
        assert response.status_code == 200, response.text
    assert deployment.keys.requests["/platform/keys"] == 1
    agent = deployment.agent
    for _ in range(3):
        response = await deployment.token(
            {"assertion": id_jag(agent["client_id"])},
            auth=(agent["client_id"], agent["client_secret"]),
        )
        assert response.status_code == 200, response.text
    assert deployment.keys.requests["/idp/jwks"] == 1


async def test_an_issuer_whose_keys_fail_is_unavailable_and_not_asked_again_at_once(
    deployment: Deployment,
) -> None:
    for _ in range(5):
        response = await deployment.token({"assertion": platform_token(BROKEN)})
        assert response.status_code == 503, response.text
        assert response.json()["error"] == "temporarily_unavailable"
        assert response.headers["retry-after"] in {"4", "5"}
        assert "127.0.0.1" not in response.text  # how the fetch failed stays in the log
        assert "500" not in response.text
    assert deployment.keys.requests["/broken/keys"] == 1
    agent = deployment.agent
    for _ in range(3):  # an ID-JAG from an identity provider whose keys fail: the same
        response = await deployment.token(
            {"assertion": id_jag(agent["client_id"], BROKEN_IDP)},
            auth=(agent["client_id"], agent["client_secret"]),
        )
        assert response.status_code == 503, response.text
        assert response.json()["error"] == "temporarily_unavailable"
    assert deployment.keys.requests["/broken/jwks"] == 1
    # the other issuer is unaffected
    assert (await deployment.token({"assertion": platform_token()})).status_code == 200
