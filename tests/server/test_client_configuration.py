"""RFC 7592 client configuration: read, update and delete with the registration access token."""

from __future__ import annotations

from typing import Any

import httpx2
import pytest

from ..oauth import register_public_client

pytestmark = pytest.mark.anyio


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
async def registered(http: httpx2.AsyncClient, seeded: Any) -> dict[str, Any]:
    return await register_public_client(http)


async def test_registration_returns_the_configuration_uri(registered: dict[str, Any]) -> None:
    assert registered["registration_client_uri"].endswith(f"/register/{registered['client_id']}")


async def test_read_returns_the_client_and_rotates_the_token(
    http: httpx2.AsyncClient, registered: dict[str, Any]
) -> None:
    uri = registered["registration_client_uri"]
    response = await http.get(uri, headers=bearer(registered["registration_access_token"]))
    assert response.status_code == 200
    assert response.headers["cache-control"] == "no-store"
    info = response.json()
    assert info["client_id"] == registered["client_id"]
    assert info["redirect_uris"] == registered["redirect_uris"]
    assert info["registration_access_token"] != registered["registration_access_token"]
    stale = await http.get(uri, headers=bearer(registered["registration_access_token"]))
    assert stale.status_code == 401
    fresh = await http.get(uri, headers=bearer(info["registration_access_token"]))
    assert fresh.status_code == 200


async def test_update_replaces_the_metadata(
    http: httpx2.AsyncClient, registered: dict[str, Any]
) -> None:
    body = {
        "client_id": registered["client_id"],
        "client_name": "Renamed",
        "redirect_uris": ["http://127.0.0.1/other"],
        "token_endpoint_auth_method": "none",
        "grant_types": ["authorization_code"],
    }
    response = await http.put(
        registered["registration_client_uri"],
        json=body,
        headers=bearer(registered["registration_access_token"]),
    )
    assert response.status_code == 200, response.text
    assert response.json()["client_name"] == "Renamed"
    assert response.json()["redirect_uris"] == ["http://127.0.0.1/other"]


@pytest.mark.parametrize(
    ("changes", "error"),
    [
        ({"client_id": "someone-else"}, "invalid_client_metadata"),
        ({"redirect_uris": ["http://evil.example/cb"]}, "invalid_redirect_uri"),
        ({"token_endpoint_auth_method": "client_secret_basic"}, "invalid_client_metadata"),
    ],
)
async def test_invalid_updates_are_refused_and_change_nothing(
    http: httpx2.AsyncClient, registered: dict[str, Any], changes: dict[str, Any], error: str
) -> None:
    body = {
        "client_id": registered["client_id"],
        "redirect_uris": registered["redirect_uris"],
        "token_endpoint_auth_method": "none",
        **changes,
    }
    token = registered["registration_access_token"]
    response = await http.put(
        registered["registration_client_uri"], json=body, headers=bearer(token)
    )
    assert response.status_code == 400
    assert response.json()["error"] == error
    after = await http.get(registered["registration_client_uri"], headers=bearer(token))
    assert after.json()["client_name"] == "Test client"


async def test_delete_removes_the_client(
    http: httpx2.AsyncClient, registered: dict[str, Any]
) -> None:
    uri, token = registered["registration_client_uri"], registered["registration_access_token"]
    assert (await http.delete(uri, headers=bearer(token))).status_code == 204
    assert (await http.get(uri, headers=bearer(token))).status_code == 401


@pytest.mark.parametrize(
    "headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic x"}]
)
async def test_a_missing_or_wrong_registration_token_is_401(
    http: httpx2.AsyncClient, registered: dict[str, Any], headers: dict[str, str]
) -> None:
    response = await http.get(registered["registration_client_uri"], headers=headers)
    assert response.status_code == 401
    assert response.json()["error"] == "invalid_token"


async def test_another_clients_token_does_not_open_this_client(
    http: httpx2.AsyncClient, registered: dict[str, Any]
) -> None:
    other = await register_public_client(http)
    response = await http.get(
        registered["registration_client_uri"], headers=bearer(other["registration_access_token"])
    )
    assert response.status_code == 401
