"""A remembered consent holds only for what the consent page showed (RFC 6749 §10.2, RFC 8252
§8.6): the client's name and redirect host, and for a client whose identity cannot be proven
(public, loopback or custom-scheme redirect) only the exact redirect URI within a short window.
The consent page shows clients, hosts and redirects the way a person can trust."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

import httpx2
import pytest
from freezegun import freeze_time
from starlette.applications import Starlette

from mcpauth.server import admin

from ..oauth import authorization_params, follow, pkce_pair, register_public_client
from ..oauth import sign_in_and_approve as approve
from .conftest import PASSWORD

pytestmark = pytest.mark.anyio
FIRST = "http://127.0.0.1:5555/callback"


def params(client_id: str, redirect_uri: str = FIRST, **extra: str) -> dict[str, str]:
    return authorization_params(client_id, pkce_pair()[1], redirect_uri=redirect_uri, **extra)


async def start(http: httpx2.AsyncClient, query_params: dict[str, str]) -> httpx2.Response:
    return await follow(http, await http.get("/authorize?" + urlencode(query_params)))


async def sign_in_and_approve(http: httpx2.AsyncClient, query_params: dict[str, str]) -> None:
    response = await approve(http, query_params, password=PASSWORD)
    assert response.status_code == 303
    assert "code=" in response.headers["location"]


async def test_another_loopback_port_does_not_get_a_silent_code(
    http: httpx2.AsyncClient, public_client: dict[str, Any]
) -> None:
    cid = public_client["client_id"]
    await sign_in_and_approve(http, params(cid))
    # any program on the machine can listen on another port and start a new request
    other = await start(http, params(cid, "http://127.0.0.1:6666/callback"))
    assert other.status_code == 200
    assert "Continue to Test client as alice?" in other.text
    assert "127.0.0.1:6666" in other.text


async def test_the_exact_loopback_redirect_is_remembered_only_for_a_short_while(
    http: httpx2.AsyncClient, public_client: dict[str, Any]
) -> None:
    cid = public_client["client_id"]
    with freeze_time("2026-11-22 10:00:00") as clock:
        await sign_in_and_approve(http, params(cid))
        again = await start(http, params(cid))
        assert again.status_code == 303
        assert "code=" in again.headers["location"]
        clock.tick(601)  # unproven_client_consent_window (600 s) has passed
        later = await start(http, params(cid))
        assert later.status_code == 200
        assert "Continue to Test client as alice?" in later.text


async def test_silent_codes_do_not_extend_the_window(
    http: httpx2.AsyncClient, public_client: dict[str, Any]
) -> None:
    cid = public_client["client_id"]
    with freeze_time("2026-11-22 10:00:00") as clock:
        await sign_in_and_approve(http, params(cid))
        clock.tick(500)
        assert (await start(http, params(cid))).status_code == 303
        clock.tick(200)  # 700 s after the approval, 200 s after the silent code
        assert (await start(http, params(cid))).status_code == 200


async def test_a_redirect_uri_added_later_does_not_inherit_the_consent(
    http: httpx2.AsyncClient, seeded: Starlette
) -> None:
    registered = await register_public_client(http, redirect_uri=FIRST)
    cid = registered["client_id"]
    await sign_in_and_approve(http, params(cid))
    third = "https://third.example/cb"
    update = await http.put(
        registered["registration_client_uri"],
        json={
            "client_id": cid,
            "client_name": "Test client",
            "redirect_uris": [FIRST, third],
            "token_endpoint_auth_method": "none",
            "grant_types": ["authorization_code", "refresh_token"],
        },
        headers={"Authorization": f"Bearer {registered['registration_access_token']}"},
    )
    assert update.status_code == 200, update.text
    silent = await start(http, params(cid, third, prompt="none"))
    # a self-registered client gets its error through a page the user leaves by a link
    assert silent.status_code == 400
    assert "consent_required" in silent.text
    assert "code=" not in silent.text


async def test_a_renamed_client_asks_again(http: httpx2.AsyncClient, seeded: Starlette) -> None:
    registered = await register_public_client(http, redirect_uri=FIRST)
    cid = registered["client_id"]
    await sign_in_and_approve(http, params(cid))
    update = await http.put(
        registered["registration_client_uri"],
        json={
            "client_id": cid,
            "client_name": "Your Bank",
            "redirect_uris": [FIRST],
            "token_endpoint_auth_method": "none",
            "grant_types": ["authorization_code", "refresh_token"],
        },
        headers={"Authorization": f"Bearer {registered['registration_access_token']}"},
    )
    assert update.status_code == 200, update.text
    page = await start(http, params(cid))
    assert page.status_code == 200
    assert "Your Bank" in page.text


async def consent_for(http: httpx2.AsyncClient, **registration: Any) -> str:
    registered = await register_public_client(http, **registration)
    redirect = registration.get("redirect_uri", FIRST)
    page = await follow(
        http,
        await approve(
            http, params(registered["client_id"], redirect), action=None, password=PASSWORD
        ),
    )
    return page.text


async def test_a_custom_scheme_redirect_is_shown_by_its_scheme(
    http: httpx2.AsyncClient, seeded: Starlette
) -> None:
    text = await consent_for(http, redirect_uri="com.example.app:/oauth/callback")
    assert "the application that handles com.example.app: links on this device" in text


async def test_an_international_host_is_shown_in_ascii_with_a_warning(
    http: httpx2.AsyncClient, seeded: Starlette
) -> None:
    cyrillic = "https://\u0430pple.example/cb"  # a Cyrillic a: looks like apple.example
    text = await consent_for(http, redirect_uri=cyrillic)
    assert "xn--pple-43d.example" in text
    assert "\u0430pple" not in text
    assert "characters outside plain ASCII" in text


async def test_invisible_and_bidi_characters_never_reach_the_consent_page(
    http: httpx2.AsyncClient, seeded: Starlette
) -> None:
    # registration refuses control characters; format characters (bidi, zero width) it keeps
    text = await consent_for(http, client_name="Good\u202eliaM\u200b App")
    assert "GoodliaM App" in text
    for hidden in ("\u202e", "\u200b"):
        assert hidden not in text


@pytest.mark.parametrize(
    "name",
    ["Acme Desktop", "acme  desktop", "ACME\u200b Desktop", "\uff21\uff43\uff4d\uff45 Desktop"],
)
async def test_a_self_registered_client_cannot_take_an_operator_clients_name(
    http: httpx2.AsyncClient, seeded: Starlette, name: str
) -> None:
    admin.add_client(
        seeded.state.mcpauth, name="Acme Desktop", redirect_uris=["https://acme.example/cb"]
    )
    response = await http.post(
        "/register",
        json={"client_name": name, "redirect_uris": [FIRST], "token_endpoint_auth_method": "none"},
    )
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_client_metadata"


async def test_a_self_registered_client_cannot_rename_itself_to_an_operator_clients_name(
    http: httpx2.AsyncClient, seeded: Starlette
) -> None:
    admin.add_client(
        seeded.state.mcpauth, name="Acme Desktop", redirect_uris=["https://acme.example/cb"]
    )
    registered = await register_public_client(http, redirect_uri=FIRST)
    update = await http.put(
        registered["registration_client_uri"],
        json={
            "client_id": registered["client_id"],
            "client_name": "Acme Desktop",
            "redirect_uris": [FIRST],
            "token_endpoint_auth_method": "none",
            "grant_types": ["authorization_code", "refresh_token"],
        },
        headers={"Authorization": f"Bearer {registered['registration_access_token']}"},
    )
    assert update.status_code == 400
    assert update.json()["error"] == "invalid_client_metadata"
