"""Request documents are parsed strictly and bounded: a registration body with a repeated
member or past its size limit is refused (RFC 7591 §3.2.2), an over-long ``state`` is shown on a
page and never echoed in a redirect, and every ``error_description`` stays inside the character
set of RFC 6749 §5.2."""

from __future__ import annotations

import re
from typing import Any

import httpx2
import pytest
from starlette.applications import Starlette

from mcpauth.errors import InvalidRequest, wire_description
from mcpauth.server.operations.size_limits import MAX_REGISTRATION_BYTES, MAX_STATE_LENGTH

from ..oauth import authorization_params, pkce_pair, register_public_client

pytestmark = pytest.mark.anyio
DESCRIPTION_SET = re.compile(r"^[\x20\x21\x23-\x5b\x5d-\x7e]*$")
BASE = '"redirect_uris": ["http://127.0.0.1/cb"], "token_endpoint_auth_method": "none"'
JSON = {"Content-Type": "application/json"}


def _client_count(app: Starlette) -> int:
    from sqlmodel import select

    from mcpauth.server.storage.models import Client

    with app.state.mcpauth.db.read() as session:
        return len(session.exec(select(Client)).all())


@pytest.mark.parametrize(
    "body",
    [
        "{" + BASE + ', "client_name": "a", "client_name": "b"}',
        "{" + BASE + ', "redirect_uris": ["https://evil.example/cb"]}',
        "{" + BASE + ', "jwks": {"keys": [], "keys": []}}',
        "{" + BASE + ', "client_name": NaN}',
    ],
)
async def test_a_registration_with_a_repeated_member_or_a_non_json_constant_is_refused(
    seeded: Starlette, http: httpx2.AsyncClient, body: str
) -> None:
    before = _client_count(seeded)
    response = await http.post("/register", content=body, headers=JSON)
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_client_metadata"
    assert _client_count(seeded) == before


async def test_a_registration_body_past_the_limit_is_413_invalid_client_metadata(
    seeded: Starlette, http: httpx2.AsyncClient
) -> None:
    padding = "x" * MAX_REGISTRATION_BYTES
    body = "{" + BASE + f', "software_id": "{padding}"}}'
    response = await http.post("/register", content=body, headers=JSON)
    assert response.status_code == 413
    assert response.json()["error"] == "invalid_client_metadata"


async def test_a_client_configuration_update_is_parsed_and_bounded_the_same_way(
    http: httpx2.AsyncClient, seeded: Starlette
) -> None:
    client = await register_public_client(http)
    uri = client["registration_client_uri"]
    headers = {**JSON, "Authorization": f"Bearer {client['registration_access_token']}"}
    repeated = "{" + BASE + f', "client_id": "{client["client_id"]}", "client_name": "a"'
    repeated += ', "client_name": "b"}'
    response = await http.put(uri, content=repeated, headers=headers)
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_client_metadata"
    huge = "{" + BASE + f', "software_id": "{"x" * MAX_REGISTRATION_BYTES}"}}'
    response = await http.put(uri, content=huge, headers=headers)
    assert response.status_code == 413
    assert response.json()["error"] == "invalid_client_metadata"


async def test_an_over_long_state_is_shown_on_a_page_and_never_redirected(
    public_client: dict[str, Any], http: httpx2.AsyncClient
) -> None:
    _, challenge = pkce_pair()
    params = authorization_params(
        public_client["client_id"],
        challenge,
        redirect_uri="http://127.0.0.1/callback",
        state="s" * (MAX_STATE_LENGTH + 1),
    )
    response = await http.get("/authorize", params=params)
    assert response.status_code == 400
    assert "location" not in response.headers
    assert "invalid_request" in response.text
    params["state"] = "s" * MAX_STATE_LENGTH
    accepted = await http.get("/authorize", params=params)
    assert accepted.status_code == 303
    assert "/interaction/" in accepted.headers["location"]


async def test_an_echoed_value_never_puts_forbidden_characters_in_error_description(
    seeded: Starlette, http: httpx2.AsyncClient
) -> None:
    body = {
        "redirect_uris": ["http://127.0.0.1/cb"],
        "grant_types": ['\u00e9vil"\\\u2028\n\x7f'],
    }
    response = await http.post("/register", json=body)
    assert response.json()["error"] == "invalid_client_metadata"
    description = response.json()["error_description"]
    assert DESCRIPTION_SET.match(description), description
    assert "vil" in description


@pytest.mark.parametrize(
    ("raw", "safe"),
    [
        ('say "hi"', "say 'hi'"),
        ("a\\b", "a/b"),
        ("RFC 7591 \u00a72", "RFC 7591 section 2"),
        ("line\nbreak\r\x00", "line?break??"),
        ("caf\u00e9 \u2192 \U0001f600", "caf? -> ?"),
    ],
)
def test_wire_description_keeps_only_the_rfc_6749_character_set(raw: str, safe: str) -> None:
    assert wire_description(raw) == safe
    assert InvalidRequest(raw).to_dict()["error_description"] == safe
