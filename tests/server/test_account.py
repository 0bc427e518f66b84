"""The account page: a signed-in user sees connected clients and revokes a grant, whose
refresh tokens die at once."""

from __future__ import annotations

from typing import Any
from urllib.parse import urljoin

import httpx
import pytest

from ..oauth import forms, submit
from .conftest import PASSWORD
from .test_token import refresh, tokens

pytestmark = pytest.mark.anyio


async def signed_in(http: httpx.AsyncClient) -> httpx.Response:
    page = await http.get("/account")
    if "password" in forms(page.text)[0].fields:
        response = await submit(http, page, {"username": "alice", "password": PASSWORD})
        assert response.status_code == 303
        page = await http.get("/account")
    return page


async def test_the_account_page_lists_and_revokes_connected_clients(
    http: httpx.AsyncClient, public_client: dict[str, Any]
) -> None:
    issued = await tokens(http, public_client)
    page = await signed_in(http)
    assert "Test client" in page.text
    assert "mcp:tools" in page.text
    revoke = next(f for f in forms(page.text) if "/revoke" in f.action)
    response = await http.post(urljoin(str(page.request.url), revoke.action), data=revoke.fields)
    assert response.status_code == 303
    dead = await refresh(http, public_client["client_id"], issued["refresh_token"])
    assert dead.json()["error"] == "invalid_grant"
    assert "Test client" not in (await http.get("/account")).text


async def test_revocation_needs_the_csrf_token(
    http: httpx.AsyncClient, public_client: dict[str, Any]
) -> None:
    await tokens(http, public_client)
    page = await signed_in(http)
    revoke = next(f for f in forms(page.text) if "/revoke" in f.action)
    response = await http.post(
        urljoin(str(page.request.url), revoke.action), data={"csrf_token": "x"}
    )
    assert response.status_code == 403


async def test_a_user_cannot_revoke_another_users_grant(
    app: Any, public_client: dict[str, Any]
) -> None:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:9000") as alice:
        await tokens(alice, public_client)
        page = await signed_in(alice)
        revoke = next(f for f in forms(page.text) if "/revoke" in f.action)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:9000") as bob:
        page = await bob.get("/account")
        await submit(bob, page, {"username": "bob", "password": PASSWORD})
        bob_page = await bob.get("/account")
        token = forms(bob_page.text)[-1].fields["csrf_token"]
        response = await bob.post(
            urljoin(str(page.request.url), revoke.action), data={"csrf_token": token}
        )
    assert response.status_code == 404


async def test_sign_out_ends_the_session(
    http: httpx.AsyncClient, public_client: dict[str, Any]
) -> None:
    page = await signed_in(http)
    logout = forms(page.text)[-1]
    await http.post(urljoin(str(page.request.url), logout.action), data=logout.fields)
    assert "password" in forms((await http.get("/account")).text)[0].fields
