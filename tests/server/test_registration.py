"""RFC 7591 dynamic client registration: every invalid request gets its exact error code and
stores nothing; valid public and confidential registrations round-trip (AS-19, AS-21, AS-23)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx2
import pytest
from sqlmodel import select
from starlette.applications import Starlette

from mcpauth.server import Settings, create_app
from mcpauth.server.crypto import digest
from mcpauth.server.storage.models import Client

from ..conftest import ISSUER

pytestmark = pytest.mark.anyio

VALID: dict[str, Any] = {
    "client_name": "Test client",
    "redirect_uris": ["http://127.0.0.1:33418/callback"],
    "token_endpoint_auth_method": "none",
    "grant_types": ["authorization_code", "refresh_token"],
    "response_types": ["code"],
}
META = "invalid_client_metadata"
REDIRECT = "invalid_redirect_uri"


def with_(**changes: Any) -> dict[str, Any]:
    body = dict(VALID)
    for key, value in changes.items():
        if value is ...:
            body.pop(key, None)
        else:
            body[key] = value
    return body


INVALID: list[tuple[str, Any, str]] = [
    ("body is an array", [VALID], META),
    ("body is a string", "client", META),
    ("redirect_uris missing", with_(redirect_uris=...), META),
    ("redirect_uris empty", with_(redirect_uris=[]), META),
    ("redirect_uris not a list", with_(redirect_uris="https://a.example/cb"), META),
    ("redirect_uris with a number", with_(redirect_uris=[42]), META),
    ("http redirect on a public host", with_(redirect_uris=["http://a.example/cb"]), REDIRECT),
    ("fragment in redirect", with_(redirect_uris=["https://a.example/cb#x"]), REDIRECT),
    ("userinfo in redirect", with_(redirect_uris=["https://user@a.example/cb"]), REDIRECT),
    ("wildcard redirect", with_(redirect_uris=["https://*.a.example/cb"]), REDIRECT),
    ("relative redirect", with_(redirect_uris=["/callback"]), REDIRECT),
    ("javascript redirect", with_(redirect_uris=["javascript:alert(1)"]), REDIRECT),
    ("data redirect", with_(redirect_uris=["data:text/html,hi"]), REDIRECT),
    (
        "custom scheme for a confidential web app",
        with_(
            redirect_uris=["com.example.app:/cb"],
            application_type="web",
            token_endpoint_auth_method="client_secret_basic",
        ),
        REDIRECT,
    ),
    ("file redirect", with_(redirect_uris=["file:///etc/passwd"]), REDIRECT),
    ("vbscript redirect", with_(redirect_uris=["vbscript:msgbox(1)"]), REDIRECT),
    ("blob redirect", with_(redirect_uris=["blob:https://a.example/1"]), REDIRECT),
    ("scheme passing for https", with_(redirect_uris=["https-app://a.example/cb"]), REDIRECT),
    ("Windows drive letter", with_(redirect_uris=["c:/Users/cb"]), REDIRECT),
    ("backslash host trick", with_(redirect_uris=["https://a.example\\@b.example/"]), REDIRECT),
    ("bare custom scheme", with_(redirect_uris=["myapp:"]), REDIRECT),
    ("space in redirect", with_(redirect_uris=["https://a.example/c b"]), REDIRECT),
    ("unknown application_type", with_(application_type="desktop"), META),
    ("implicit grant", with_(grant_types=["implicit"]), META),
    ("password grant", with_(grant_types=["authorization_code", "password"]), META),
    ("client_credentials by DCR", with_(grant_types=["client_credentials"]), META),
    ("unknown grant", with_(grant_types=["urn:example:magic"]), META),
    ("token response type", with_(response_types=["token"]), META),
    ("grant and response types disagree", with_(response_types=[]), META),
    ("refresh_token without authorization_code", with_(grant_types=["refresh_token"]), META),
    ("unknown auth method", with_(token_endpoint_auth_method="client_secret_jwt"), META),
    ("auth method not a string", with_(token_endpoint_auth_method=["none"]), META),
    ("client_name too long", with_(client_name="x" * 201), META),
    ("client_name not a string", with_(client_name={"en": "x"}), META),
    ("client_name blank", with_(client_name="   "), META),
    ("logo_uri over http", with_(logo_uri="http://a.example/logo.png"), META),
    ("client_uri not a URL", with_(client_uri="a.example"), META),
    ("jwks and jwks_uri together", with_(jwks={"keys": []}, jwks_uri="https://a.example/j"), META),
    ("jwks with a private key", with_(jwks={"keys": [{"kty": "EC", "d": "secret"}]}), META),
    ("jwks without keys", with_(jwks={"k": 1}), META),
    ("malformed scope", with_(scope='files:read "quoted"'), META),
    ("contacts not strings", with_(contacts=[1, 2]), META),
    (
        "too many redirect URIs",
        with_(redirect_uris=[f"https://a.example/{i}" for i in range(21)]),
        META,
    ),
]


async def _count_clients(app: Starlette) -> int:
    with app.state.mcpauth.db.read() as session:
        return len(list(session.exec(select(Client))))


@pytest.mark.parametrize(("case", "body", "error"), INVALID, ids=[c[0] for c in INVALID])
async def test_invalid_registration_is_refused_with_its_error_and_stores_nothing(
    http: httpx2.AsyncClient, app: Starlette, case: str, body: Any, error: str
) -> None:
    response = await http.post("/register", json=body)
    assert response.status_code == 400, response.text
    assert response.json()["error"] == error
    assert response.json()["error_description"]
    assert await _count_clients(app) == 0


async def test_malformed_json_is_invalid_client_metadata(http: httpx2.AsyncClient) -> None:
    response = await http.post(
        "/register", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert response.status_code == 400
    assert response.json()["error"] == META


async def test_deeply_nested_json_is_refused_without_a_server_error(
    http: httpx2.AsyncClient,
) -> None:
    body = "[" * 20000 + "]" * 20000
    response = await http.post(
        "/register", content=body.encode(), headers={"content-type": "application/json"}
    )
    assert response.status_code in (400, 413)


async def test_form_encoded_registration_is_refused(http: httpx2.AsyncClient) -> None:
    response = await http.post("/register", data={"client_name": "x"})
    assert response.status_code == 400
    assert response.json()["error"] == META


async def test_oversized_registration_body_is_refused(http: httpx2.AsyncClient) -> None:
    body = with_(client_name="x", software_id="y" * 100_000)
    response = await http.post("/register", json=body)
    assert response.status_code == 413
    assert response.json()["error"] == "invalid_client_metadata"  # RFC 7591 §3.2.2


async def test_public_registration_round_trips_without_a_secret(
    http: httpx2.AsyncClient, app: Starlette
) -> None:
    response = await http.post("/register", json=VALID)
    assert response.status_code == 201
    assert response.headers["cache-control"] == "no-store"
    info = response.json()
    assert "client_secret" not in info
    for key in ("client_name", "redirect_uris", "grant_types", "response_types"):
        assert info[key] == VALID[key]
    assert info["token_endpoint_auth_method"] == "none"
    assert info["application_type"] == "native"  # loopback-only redirects imply a native app
    assert not info["client_id"].startswith("https://")  # AS-32
    with app.state.mcpauth.db.read() as session:
        row = session.get(Client, info["client_id"])
    assert row is not None
    assert row.secret_digest is None
    assert row.registration_token_digest == digest(info["registration_access_token"])


async def test_confidential_registration_returns_a_secret_stored_only_as_a_digest(
    http: httpx2.AsyncClient, app: Starlette
) -> None:
    body = with_(
        redirect_uris=["https://app.example/cb"],
        token_endpoint_auth_method="client_secret_basic",
        application_type="web",
        logo_uri="https://app.example/logo.png",
        contacts=["ops@app.example"],
    )
    response = await http.post("/register", json=body)
    assert response.status_code == 201
    info = response.json()
    secret = info["client_secret"]
    assert len(secret) >= 43  # 256 random bits, base64url (docs/security.md T18)
    # not 0 ("never"): unused, the pruner deletes it after a day (test_prune.py has the rest)
    assert info["client_secret_expires_at"] == info["client_id_issued_at"] + 86400
    assert info["logo_uri"] == "https://app.example/logo.png"
    with app.state.mcpauth.db.read() as session:
        row = session.get(Client, info["client_id"])
    assert row is not None
    assert row.secret_digest == digest(secret)
    assert secret not in json.dumps(row.model_dump())


async def test_auth_method_defaults_to_client_secret_basic(http: httpx2.AsyncClient) -> None:
    response = await http.post("/register", json=with_(token_endpoint_auth_method=...))
    assert response.status_code == 201
    assert response.json()["token_endpoint_auth_method"] == "client_secret_basic"
    assert "client_secret" in response.json()


async def test_client_chosen_client_id_is_ignored(http: httpx2.AsyncClient) -> None:
    response = await http.post("/register", json=with_(client_id="alice", client_secret="x"))
    assert response.status_code == 201
    assert response.json()["client_id"] != "alice"
    assert "client_secret" not in response.json()


async def test_native_private_use_scheme_is_accepted(http: httpx2.AsyncClient) -> None:
    body = with_(redirect_uris=["com.example.app:/oauth/cb"], application_type="native")
    response = await http.post("/register", json=body)
    assert response.status_code == 201


async def test_unknown_members_are_ignored(http: httpx2.AsyncClient) -> None:
    response = await http.post("/register", json=with_(x_custom={"a": 1}))
    assert response.status_code == 201
    assert "x_custom" not in response.json()


async def test_closed_registration_has_no_endpoint_and_is_not_advertised(
    make_settings: Callable[..., Settings],
) -> None:
    app = create_app(make_settings(registration_policy="closed"))
    async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app), base_url=ISSUER) as http:
        assert (await http.post("/register", json=VALID)).status_code in (404, 405)
        meta = (await http.get("/.well-known/oauth-authorization-server")).json()
    assert "registration_endpoint" not in meta


async def test_token_policy_requires_the_initial_access_token(
    make_settings: Callable[..., Settings],
) -> None:
    app = create_app(
        make_settings(registration_policy="token", initial_access_token="iat-secret-1")
    )
    async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app), base_url=ISSUER) as http:
        missing = await http.post("/register", json=VALID)
        wrong = await http.post("/register", json=VALID, headers={"Authorization": "Bearer nope"})
        right = await http.post(
            "/register", json=VALID, headers={"Authorization": "Bearer iat-secret-1"}
        )
    assert missing.status_code == wrong.status_code == 401
    assert missing.json()["error"] == "invalid_token"
    assert right.status_code == 201


async def test_registration_allows_cors(http: httpx2.AsyncClient) -> None:
    preflight = await http.options(
        "/register",
        headers={"Origin": "https://app.example", "Access-Control-Request-Method": "POST"},
    )
    assert preflight.status_code == 204
    assert preflight.headers["access-control-allow-origin"] == "*"
