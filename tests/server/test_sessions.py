"""The sign-in session lives on the server: removing the user, signing out or the session's
lifetime ends it whatever copy of the cookie survives; issuers sharing a secret reject each
other's cookies; signing in rotates the session id (no fixation)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode, urljoin

import httpx2
import pytest
from freezegun import freeze_time
from starlette.applications import Starlette

from mcpauth.server import Settings, admin, create_app
from mcpauth.server.browser.sessions import cookie_name

from ..conftest import ISSUER
from ..oauth import authorization_params, follow, forms, pkce_pair, submit
from .conftest import PASSWORD, add_user
from .test_account import signed_in

pytestmark = pytest.mark.anyio


def authorize_url(client_id: str, **extra: str) -> str:
    return "/authorize?" + urlencode(authorization_params(client_id, pkce_pair()[1], **extra))


async def shows_login(http: httpx2.AsyncClient, client_id: str) -> bool:
    page = await follow(http, await http.get(authorize_url(client_id)))
    return page.status_code == 200 and "password" in forms(page.text)[0].fields


def cookie_of(http: httpx2.AsyncClient, app: Starlette) -> str:
    value = http.cookies.get(cookie_name(app.state.mcpauth.settings))
    assert value
    return value


async def test_removing_the_user_ends_her_live_session(
    http: httpx2.AsyncClient, public_client: dict[str, Any], seeded: Starlette
) -> None:
    await signed_in(http)
    assert not await shows_login(http, public_client["client_id"])
    admin.remove_user(seeded.state.mcpauth, "alice")
    assert await shows_login(http, public_client["client_id"])  # no code for a deleted user
    account = await http.get("/account")
    assert "password" in forms(account.text)[0].fields


async def test_a_cookie_copied_before_sign_out_is_not_signed_in_after_it(
    http: httpx2.AsyncClient, public_client: dict[str, Any], seeded: Starlette
) -> None:
    page = await signed_in(http)
    copied = cookie_of(http, seeded)
    logout = forms(page.text)[-1]
    await http.post(urljoin(str(page.request.url), logout.action), data=logout.fields)
    transport = httpx2.ASGITransport(app=seeded)
    async with httpx2.AsyncClient(transport=transport, base_url=ISSUER) as thief:
        thief.cookies.set(cookie_name(seeded.state.mcpauth.settings), copied)
        assert "password" in forms((await thief.get("/account")).text)[0].fields
        assert await shows_login(thief, public_client["client_id"])


async def test_issuers_sharing_a_secret_reject_each_others_cookies(
    make_settings: Callable[..., Settings],
    http: httpx2.AsyncClient,
    seeded: Starlette,
    password_hash: str,
) -> None:
    await signed_in(http)
    copied = cookie_of(http, seeded)
    # issuer B: the same secret and even the same database, another issuer
    other = create_app(make_settings(issuer="http://127.0.0.2:9000"))
    add_user(other, "mallory", password_hash)
    transport = httpx2.ASGITransport(app=other)
    async with httpx2.AsyncClient(transport=transport, base_url="http://127.0.0.2:9000") as b:
        b.cookies.set(cookie_name(other.state.mcpauth.settings), copied)
        page = await b.get("/account")
    assert "password" in forms(page.text)[0].fields
    assert "alice" not in page.text


async def test_signing_in_rotates_the_session_id(
    http: httpx2.AsyncClient, seeded: Starlette
) -> None:
    page = await http.get("/account")
    before = cookie_of(http, seeded)
    response = await submit(http, page, {"username": "alice", "password": PASSWORD})
    assert response.status_code == 303
    after = cookie_of(http, seeded)
    assert after != before
    transport = httpx2.ASGITransport(app=seeded)
    async with httpx2.AsyncClient(transport=transport, base_url=ISSUER) as fixer:
        fixer.cookies.set(
            cookie_name(seeded.state.mcpauth.settings), before
        )  # the pre-sign-in cookie
        assert "password" in forms((await fixer.get("/account")).text)[0].fields


async def test_a_session_past_its_lifetime_is_signed_out(
    http: httpx2.AsyncClient, public_client: dict[str, Any], seeded: Starlette
) -> None:
    with freeze_time("2027-03-01 00:00:00") as clock:
        await signed_in(http)
        assert not await shows_login(http, public_client["client_id"])
        clock.tick(seeded.state.mcpauth.settings.session_ttl + 1)
        assert await shows_login(http, public_client["client_id"])
