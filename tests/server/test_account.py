"""The account page: a signed-in user sees each connected application once and revokes it
after a confirmation; its refresh tokens die at once."""

from __future__ import annotations

import html
import re
from typing import Any
from urllib.parse import urljoin

import httpx2
import pytest

from ..oauth import Form, forms, submit
from .conftest import PASSWORD
from .test_token import refresh, tokens

pytestmark = pytest.mark.anyio


async def signed_in(http: httpx2.AsyncClient) -> httpx2.Response:
    page = await http.get("/account")
    if "password" in forms(page.text)[0].fields:
        response = await submit(http, page, {"username": "alice", "password": PASSWORD})
        assert response.status_code == 303
        page = await http.get("/account")
    return page


async def revoke_form(http: httpx2.AsyncClient, page: httpx2.Response) -> tuple[str, Form]:
    """Follow the first "Revoke access" link to its confirmation page; its form and URL."""
    link = re.search(r'href="([^"]*account/revoke\?client_id=[^"]*)"', page.text)
    assert link is not None
    confirm = await http.get(urljoin(str(page.request.url), html.unescape(link.group(1))))
    assert confirm.status_code == 200
    assert "Revoke access for" in confirm.text
    form = next(f for f in forms(confirm.text) if "/revoke" in f.action)
    return urljoin(str(confirm.request.url), form.action), form


async def test_the_account_page_lists_and_revokes_connected_clients(
    http: httpx2.AsyncClient, public_client: dict[str, Any]
) -> None:
    issued = await tokens(http, public_client)
    page = await signed_in(http)
    assert "Test client" in page.text
    assert "Use the tools" in page.text  # the scope's description
    action, revoke = await revoke_form(http, page)
    response = await http.post(action, data=revoke.fields)
    assert response.status_code == 303
    dead = await refresh(http, public_client["client_id"], issued["refresh_token"])
    assert dead.json()["error"] == "invalid_grant"
    after = await http.get(response.headers["location"])
    assert "Access for Test client was revoked." in after.text
    assert "Revoke access for" not in after.text


async def test_two_authorizations_of_one_client_are_one_application(
    http: httpx2.AsyncClient, public_client: dict[str, Any]
) -> None:
    first = await tokens(http, public_client)
    second = await tokens(http, public_client)
    page = await signed_in(http)
    assert page.text.count('aria-label="Revoke access for Test client') == 1
    action, revoke = await revoke_form(http, page)
    assert (await http.post(action, data=revoke.fields)).status_code == 303
    for issued in (first, second):
        dead = await refresh(http, public_client["client_id"], issued["refresh_token"])
        assert dead.json()["error"] == "invalid_grant"


async def test_revocation_needs_the_csrf_token(
    http: httpx2.AsyncClient, public_client: dict[str, Any]
) -> None:
    await tokens(http, public_client)
    page = await signed_in(http)
    action, revoke = await revoke_form(http, page)
    response = await http.post(action, data={**revoke.fields, "csrf_token": "x"})
    assert response.status_code == 403
    assert "Test client" in (await signed_in(http)).text


async def test_a_user_cannot_revoke_another_users_grant(
    app: Any, public_client: dict[str, Any]
) -> None:
    transport = httpx2.ASGITransport(app=app)
    async with httpx2.AsyncClient(transport=transport, base_url="http://127.0.0.1:9000") as alice:
        await tokens(alice, public_client)
        page = await signed_in(alice)
        action, revoke = await revoke_form(alice, page)
    async with httpx2.AsyncClient(transport=transport, base_url="http://127.0.0.1:9000") as bob:
        page = await bob.get("/account")
        await submit(bob, page, {"username": "bob", "password": PASSWORD})
        bob_page = await bob.get("/account")
        token = forms(bob_page.text)[-1].fields["csrf_token"]
        response = await bob.post(action, data={**revoke.fields, "csrf_token": token})
    assert response.status_code == 404
    async with httpx2.AsyncClient(transport=transport, base_url="http://127.0.0.1:9000") as alice:
        assert "Test client" in (await signed_in(alice)).text


async def test_sign_out_ends_the_session(
    http: httpx2.AsyncClient, public_client: dict[str, Any]
) -> None:
    page = await signed_in(http)
    logout = forms(page.text)[-1]
    done = await http.post(urljoin(str(page.request.url), logout.action), data=logout.fields)
    after = await http.get(done.headers["location"])
    assert "You have signed out." in after.text
    assert "password" in forms(after.text)[0].fields
