# ruff: noqa: F811  (the document server fixture is imported from test_cimd_https)
"""A Client ID Metadata Document client through the whole authorization code flow: the
document is fetched over HTTPS from an allow-listed loopback host, the consent page names the
client's host and warns about loopback-only redirects, and the code is redeemed with the URL
as client_id (AS-06..AS-17)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from urllib.parse import urlencode

import httpx2
import pytest
from starlette.applications import Starlette

from mcpauth.server import Settings, admin, create_app

from ..conftest import ISSUER
from ..oauth import authorization_params, follow, pkce_pair, query, sign_in_and_approve
from .test_cimd_https import DocumentServer, server  # noqa: F401 - the HTTPS document server

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]
RESOURCE = "http://127.0.0.1:8000/mcp"


@pytest.fixture
def cimd_app(make_settings: Callable[..., Settings], server: DocumentServer) -> Starlette:
    settings = make_settings(cimd_allow_hosts=("localhost",), cimd_timeout=2.0)
    app = create_app(settings, outbound_ssl_context=server.ssl_context())
    ctx = app.state.mcpauth
    admin.add_user(ctx, "alice", "correct horse battery")
    admin.add_resource(
        ctx, RESOURCE, scopes=["mcp:tools"], default_scopes=["mcp:tools"], is_default=True
    )
    return app


@pytest.fixture
async def http(cimd_app: Starlette) -> AsyncIterator[httpx2.AsyncClient]:
    async with httpx2.AsyncClient(
        transport=httpx2.ASGITransport(cimd_app), base_url=ISSUER
    ) as client:
        yield client


async def test_as07_metadata_advertises_client_id_metadata_documents(
    http: httpx2.AsyncClient,
) -> None:
    meta = (await http.get("/.well-known/oauth-authorization-server")).json()
    assert meta["client_id_metadata_document_supported"] is True


async def test_as08_a_url_client_id_completes_the_flow(
    http: httpx2.AsyncClient,
    server: DocumentServer,
) -> None:
    client_id = server.url("/clients/app.json")
    verifier, challenge = pkce_pair()
    params = authorization_params(client_id, challenge, resource=RESOURCE)
    consent = await follow(http, await http.get("/authorize?" + urlencode(params)))
    assert consent.status_code == 200
    from ..oauth import submit

    consent = await follow(
        http,
        await submit(http, consent, {"username": "alice", "password": "correct horse battery"}),
    )
    assert f"localhost:{server.port}" in consent.text  # AS-17: the client_id host is shown
    assert "on this computer" in consent.text  # every redirect is loopback: a warning
    done = await follow(http, await submit(http, consent, {"action": "approve"}))
    assert done.status_code == 303
    code = query(done.headers["location"])["code"]
    token = await http.post(
        "/token",
        data={
            "grant_type": "authorization_code",
            "code": code,
            "code_verifier": verifier,
            "redirect_uri": params["redirect_uri"],
            "client_id": client_id,
            "resource": RESOURCE,
        },
    )
    assert token.status_code == 200, token.text


async def test_as11_a_redirect_uri_not_in_the_document_is_refused_without_redirect(
    http: httpx2.AsyncClient,
    server: DocumentServer,
) -> None:
    params = authorization_params(
        server.url("/clients/app.json"), pkce_pair()[1], redirect_uri="https://evil.example/cb"
    )
    response = await http.get("/authorize?" + urlencode(params))
    assert response.status_code == 400
    assert "location" not in response.headers


@pytest.mark.parametrize(
    "path", ["/clients/mismatch.json", "/clients/page.html", "/clients/to-internal.json"]
)
async def test_as09_as14_an_unusable_document_aborts_the_authorization_with_a_page(
    http: httpx2.AsyncClient,
    server: DocumentServer,
    path: str,
) -> None:
    params = authorization_params(server.url(path), pkce_pair()[1])
    response = await http.get("/authorize?" + urlencode(params))
    assert response.status_code == 400
    assert "location" not in response.headers
    assert "invalid_client" in response.text


async def test_t21_a_document_on_a_host_not_allowed_is_never_fetched(
    make_settings: Callable[..., Settings],
    server: DocumentServer,
) -> None:
    app = create_app(make_settings(), outbound_ssl_context=server.ssl_context())
    server.requests.clear()
    async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app), base_url=ISSUER) as http:
        params = authorization_params(server.url("/clients/app.json"), pkce_pair()[1])
        response = await http.get("/authorize?" + urlencode(params))
    assert response.status_code == 400
    assert server.requests == []


async def test_a_public_document_client_cannot_use_client_credentials(
    http: httpx2.AsyncClient,
    server: DocumentServer,
) -> None:
    response = await http.post(
        "/token",
        data={"grant_type": "client_credentials", "client_id": server.url("/clients/app.json")},
    )
    assert response.status_code == 400
    assert response.json()["error"] == "unauthorized_client"


async def test_sign_in_and_approve_helper_works_with_url_clients(
    http: httpx2.AsyncClient,
    server: DocumentServer,
) -> None:
    params = authorization_params(
        server.url("/clients/app.json"), pkce_pair()[1], resource=RESOURCE
    )
    response = await sign_in_and_approve(http, params)
    assert "code=" in response.headers["location"]
