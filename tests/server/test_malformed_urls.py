"""Malformed URLs (a broken IPv6 literal, an invalid IDNA host, a bad port) anywhere a client
can send one are refused with the endpoint's own OAuth error, never a 500 (RFC 6749 §5.2,
RFC 7591 §3.2.2); the authorization endpoint shows a page and never redirects."""

from __future__ import annotations

import secrets
import time
from typing import Any

import httpx2
import pytest
from starlette.applications import Starlette

from mcpauth import jwt
from mcpauth.server import admin

from ..conftest import ISSUER
from .conftest import RESOURCE

pytestmark = pytest.mark.anyio
ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
BAD_CLIENT_IDS = ["https://[::1", "https://xn--zz.example/x", "https://[x/y", "https://a:99999/x"]


def _signed(key: jwt.PrivateKey, **claims: Any) -> str:
    now = int(time.time())
    body = {"iat": now, "exp": now + 60, "jti": secrets.token_urlsafe(16), **claims}
    return jwt.encode(body, key, alg="ES256", kid="k1", typ="JWT")


@pytest.mark.parametrize("uri", ["http://[::1/cb", "https://[x/cb", "http://127.0.0.1:70000/cb"])
async def test_a_malformed_redirect_uri_is_invalid_redirect_uri_at_registration(
    http: httpx2.AsyncClient, uri: str
) -> None:
    response = await http.post("/register", json={"redirect_uris": [uri]})
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_redirect_uri"
    assert "malformed URL" in response.json()["error_description"]


@pytest.mark.parametrize("name", ["client_uri", "logo_uri", "jwks_uri"])
async def test_a_malformed_metadata_url_is_invalid_client_metadata(
    http: httpx2.AsyncClient, name: str
) -> None:
    body = {"redirect_uris": ["http://127.0.0.1/cb"], name: "https://[::1"}
    response = await http.post("/register", json=body)
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_client_metadata"


@pytest.mark.parametrize("client_id", BAD_CLIENT_IDS)
async def test_a_malformed_client_id_url_at_authorize_shows_a_page_and_never_redirects(
    seeded: Starlette, http: httpx2.AsyncClient, client_id: str
) -> None:
    params = {
        "client_id": client_id,
        "redirect_uri": "http://127.0.0.1/cb",
        "response_type": "code",
        "state": "s",
    }
    response = await http.get("/authorize", params=params)
    assert response.status_code == 400
    assert "location" not in response.headers
    assert "invalid_client" in response.text


async def test_a_malformed_redirect_uri_at_authorize_shows_a_page_and_never_redirects(
    public_client: dict[str, Any], http: httpx2.AsyncClient
) -> None:
    params = {
        "client_id": public_client["client_id"],
        "redirect_uri": "http://127.0.0.1:99999/callback",
        "response_type": "code",
    }
    response = await http.get("/authorize", params=params)
    assert response.status_code == 400
    assert "location" not in response.headers
    assert "invalid_request" in response.text


@pytest.mark.parametrize("client_id", BAD_CLIENT_IDS)
@pytest.mark.parametrize(
    ("path", "form"),
    [
        ("/token", {"grant_type": "refresh_token", "refresh_token": "x"}),
        ("/revoke", {"token": "x"}),
        ("/introspect", {"token": "x"}),
    ],
)
async def test_a_malformed_client_id_url_is_invalid_client_at_the_back_channel(
    seeded: Starlette, http: httpx2.AsyncClient, client_id: str, path: str, form: dict[str, str]
) -> None:
    response = await http.post(path, data={**form, "client_id": client_id})
    assert response.status_code == 401
    assert response.json()["error"] == "invalid_client"


@pytest.mark.parametrize("issuer", BAD_CLIENT_IDS)
async def test_a_client_assertion_issued_by_a_malformed_url_is_invalid_client(
    seeded: Starlette, http: httpx2.AsyncClient, issuer: str
) -> None:
    key = jwt.generate_private_key("ES256")
    signed = _signed(key, iss=issuer, sub=issuer, aud=ISSUER)
    form = {
        "grant_type": "client_credentials",
        "client_assertion_type": ASSERTION_TYPE,
        "client_assertion": signed,
    }
    response = await http.post("/token", data=form)
    assert response.status_code == 401
    assert response.json()["error"] == "invalid_client"


@pytest.mark.parametrize("aud", [[[ISSUER]], [{"a": 1}], 7, {"aud": ISSUER}])
async def test_a_client_assertion_whose_aud_is_not_strings_is_invalid_client(
    seeded: Starlette, http: httpx2.AsyncClient, aud: Any
) -> None:
    key = jwt.generate_private_key("ES256")
    jwks = {"keys": [jwt.public_jwk(key.public_key(), kid="k1", alg="ES256")]}
    client = admin.add_client(
        seeded.state.mcpauth,
        name="Agent",
        grant_types=["client_credentials"],
        auth_method="private_key_jwt",
        jwks=jwks,
        scopes=["mcp:tools"],
    )
    cid = client["client_id"]
    form = {
        "grant_type": "client_credentials",
        "resource": RESOURCE,
        "client_assertion_type": ASSERTION_TYPE,
        "client_assertion": _signed(key, iss=cid, sub=cid, aud=aud),
    }
    response = await http.post("/token", data=form)
    assert response.status_code == 401
    assert response.json()["error"] == "invalid_client"
