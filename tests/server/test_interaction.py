"""Login and consent: CSRF bound to session and request, Origin checks, 303 after POST,
the request bound to the browser that started it, remembered consent, first-party clients,
throttled logins (docs/security.md T10, T11, T20, T26; AS-17, AS-31)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode, urljoin

import httpx2
import pytest
from starlette.applications import Starlette

from mcpauth.server import admin

from ..conftest import ISSUER
from ..oauth import (
    authorization_params,
    follow,
    forms,
    pkce_pair,
    query,
    sign_in_and_approve,
    submit,
)
from .conftest import PASSWORD

pytestmark = pytest.mark.anyio


def _params(client_id: str, **extra: str) -> dict[str, str]:
    return authorization_params(client_id, pkce_pair()[1], **extra)


async def login_page(http: httpx2.AsyncClient, client_id: str, **extra: str) -> httpx2.Response:
    page = await follow(
        http, await http.get("/authorize?" + urlencode(_params(client_id, **extra)))
    )
    assert page.status_code == 200
    return page


async def consent_page(http: httpx2.AsyncClient, client_id: str, **extra: str) -> httpx2.Response:
    page = await login_page(http, client_id, **extra)
    page = await follow(http, await submit(http, page, {"username": "alice", "password": PASSWORD}))
    assert "approve" in page.text
    return page


async def test_consent_shows_client_redirect_host_resource_and_scope_descriptions(
    http: httpx2.AsyncClient, public_client: dict[str, Any]
) -> None:
    page = await consent_page(http, public_client["client_id"])
    assert "Test client" in page.text
    # a self-registered client: its name is its own claim
    assert "Unverified" in page.text
    assert "registered itself, so its name has not been checked" in page.text
    assert "127.0.0.1:5555" in page.text  # AS-17: the redirect host is always shown
    assert "Demo MCP server" in page.text
    assert "Use the tools" in page.text
    assert "Any program on this computer" in page.text  # every redirect is loopback: a warning
    form = forms(page.text)[0]
    assert sorted(form.buttons["action"]) == ["approve", "deny"]


async def test_deny_redirects_access_denied_with_state_and_iss(
    http: httpx2.AsyncClient, public_client: dict[str, Any]
) -> None:
    response = await sign_in_and_approve(http, _params(public_client["client_id"]), action="deny")
    assert response.status_code == 303
    params = query(response.headers["location"])
    assert params["error"] == "access_denied"
    assert params["state"] == "state-123"
    assert params["iss"] == ISSUER


async def test_t11_every_post_answers_303(
    http: httpx2.AsyncClient, public_client: dict[str, Any]
) -> None:
    page = await login_page(http, public_client["client_id"])
    after_login = await submit(http, page, {"username": "alice", "password": PASSWORD})
    assert after_login.status_code == 303
    consent = await follow(http, after_login)
    after_consent = await submit(http, consent, {"action": "approve"})
    assert after_consent.status_code == 303


@pytest.mark.parametrize("token", [None, "", "0" * 64])
async def test_t10_consent_without_a_valid_csrf_token_is_refused(
    http: httpx2.AsyncClient, public_client: dict[str, Any], token: str | None
) -> None:
    page = await consent_page(http, public_client["client_id"])
    form = forms(page.text)[0]
    data = {"action": "approve"} if token is None else {"action": "approve", "csrf_token": token}
    response = await http.post(urljoin(str(page.request.url), form.action), data=data)
    assert response.status_code == 403
    assert "location" not in response.headers


async def test_t10_login_without_a_valid_csrf_token_is_refused(
    http: httpx2.AsyncClient, public_client: dict[str, Any]
) -> None:
    page = await login_page(http, public_client["client_id"])
    action = urljoin(str(page.request.url), forms(page.text)[0].action)
    response = await http.post(
        action, data={"username": "alice", "password": PASSWORD, "csrf_token": "x"}
    )
    assert response.status_code == 403


async def test_t10_a_token_from_one_session_is_useless_in_another(
    app: Starlette, public_client: dict[str, Any]
) -> None:
    transport = httpx2.ASGITransport(app=app)
    async with (
        httpx2.AsyncClient(transport=transport, base_url=ISSUER) as victim,
        httpx2.AsyncClient(transport=transport, base_url=ISSUER) as attacker,
    ):
        page = await consent_page(victim, public_client["client_id"])
        form = forms(page.text)[0]
        await consent_page(attacker, public_client["client_id"])
        response = await attacker.post(
            urljoin(str(page.request.url), form.action), data={**form.fields, "action": "approve"}
        )
    assert response.status_code == 403


async def test_t10_a_request_started_in_one_browser_cannot_be_finished_in_another(
    app: Starlette, public_client: dict[str, Any]
) -> None:
    transport = httpx2.ASGITransport(app=app)
    async with (
        httpx2.AsyncClient(transport=transport, base_url=ISSUER) as first,
        httpx2.AsyncClient(transport=transport, base_url=ISSUER) as second,
    ):
        started = await first.get("/authorize?" + urlencode(_params(public_client["client_id"])))
        hijacked = await second.get(started.headers["location"])
    assert hijacked.status_code == 403


async def test_t10_a_cross_site_consent_post_is_refused(
    http: httpx2.AsyncClient, public_client: dict[str, Any]
) -> None:
    page = await consent_page(http, public_client["client_id"])
    form = forms(page.text)[0]
    response = await http.post(
        urljoin(str(page.request.url), form.action),
        data={**form.fields, "action": "approve"},
        headers={"Origin": "https://evil.example"},
    )
    assert response.status_code == 403


async def test_t10_consent_is_bound_to_its_own_request(
    http: httpx2.AsyncClient, public_client: dict[str, Any], seeded: Starlette
) -> None:
    other = admin.add_client(
        seeded.state.mcpauth,
        name="Other",
        redirect_uris=["https://o.example/cb"],
        auth_method="none",
    )
    first = await consent_page(http, public_client["client_id"])
    second = await follow(
        http,
        await http.get(
            "/authorize?"
            + urlencode(_params(other["client_id"], redirect_uri="https://o.example/cb"))
        ),
    )
    token_for_first = forms(first.text)[0].fields["csrf_token"]
    response = await http.post(
        urljoin(str(second.request.url), forms(second.text)[0].action),
        data={"csrf_token": token_for_first, "action": "approve"},
    )
    assert response.status_code == 403


async def test_consent_is_remembered_for_the_same_scopes_and_asked_again_for_more(
    http: httpx2.AsyncClient, public_client: dict[str, Any]
) -> None:
    cid = public_client["client_id"]
    assert (await sign_in_and_approve(http, _params(cid))).status_code == 303
    again = await follow(http, await http.get("/authorize?" + urlencode(_params(cid))))
    assert again.status_code == 303
    assert "code=" in again.headers["location"]
    more = await follow(
        http, await http.get("/authorize?" + urlencode(_params(cid, scope="mcp:tools mcp:admin")))
    )
    assert more.status_code == 200
    assert "Administer" in more.text
    forced = await follow(
        http, await http.get("/authorize?" + urlencode(_params(cid, prompt="consent")))
    )
    assert forced.status_code == 200
    assert "approve" in forced.text


async def test_first_party_clients_skip_consent(
    http: httpx2.AsyncClient, seeded: Starlette
) -> None:
    client = admin.add_client(
        seeded.state.mcpauth,
        name="Ours",
        redirect_uris=["https://ours.example/cb"],
        auth_method="none",
        first_party=True,
    )
    params = _params(client["client_id"], redirect_uri="https://ours.example/cb")
    response = await sign_in_and_approve(http, params, action=None)
    assert response.status_code == 303
    assert "code=" in response.headers["location"]


async def test_prompt_login_asks_for_the_password_again(
    http: httpx2.AsyncClient, public_client: dict[str, Any]
) -> None:
    cid = public_client["client_id"]
    assert (await sign_in_and_approve(http, _params(cid))).status_code == 303
    page = await follow(
        http, await http.get("/authorize?" + urlencode(_params(cid, prompt="login")))
    )
    assert "password" in forms(page.text)[0].fields


async def test_t8_prompt_none_never_redirects_silently_to_an_untrusted_client(
    http: httpx2.AsyncClient, public_client: dict[str, Any]
) -> None:
    page = await follow(
        http,
        await http.get(
            "/authorize?" + urlencode(_params(public_client["client_id"], prompt="none"))
        ),
    )
    assert page.status_code == 400
    assert "login_required" in page.text
    assert "location" not in page.headers


async def test_prompt_none_redirects_login_required_to_a_trusted_client(
    http: httpx2.AsyncClient, seeded: Starlette
) -> None:
    client = admin.add_client(
        seeded.state.mcpauth,
        name="Ours",
        redirect_uris=["https://ours.example/cb"],
        auth_method="none",
    )
    params = _params(client["client_id"], redirect_uri="https://ours.example/cb", prompt="none")
    response = await follow(http, await http.get("/authorize?" + urlencode(params)))
    assert response.status_code == 303
    assert query(response.headers["location"])["error"] == "login_required"


async def test_a_wrong_password_shows_the_form_again(
    http: httpx2.AsyncClient, public_client: dict[str, Any]
) -> None:
    page = await login_page(http, public_client["client_id"])
    response = await submit(http, page, {"username": "alice", "password": "wrong password"})
    assert response.status_code == 200
    assert "Wrong username or password" in response.text
    assert "password" in forms(response.text)[0].fields


async def test_t20_repeated_failed_logins_lock_the_account_with_retry_after(
    http: httpx2.AsyncClient, public_client: dict[str, Any], settings: Any
) -> None:
    page = await login_page(http, public_client["client_id"])
    for _ in range(settings.login_max_failures):
        page = await submit(http, page, {"username": "alice", "password": "wrong password"})
    locked = await submit(http, page, {"username": "alice", "password": PASSWORD})
    assert locked.status_code == 429
    assert int(locked.headers["retry-after"]) > 0


async def test_t26_forwarded_for_from_an_untrusted_peer_does_not_reset_the_address_limit(
    app: Starlette, public_client: dict[str, Any], settings: Any
) -> None:
    # The address limit is four times the account limit; spread failures over accounts and
    # rotate X-Forwarded-For: the peer address still locks.
    transport = httpx2.ASGITransport(app=app, client=("198.51.100.9", 4000))
    async with httpx2.AsyncClient(transport=transport, base_url=ISSUER) as http:
        page = await login_page(http, public_client["client_id"])
        attempts = settings.login_max_failures * 4 + 1
        for i in range(attempts):
            headers = {"X-Forwarded-For": f"203.0.113.{i}"}
            form = forms(page.text)[0]
            action = urljoin(str(page.request.url), form.action)
            page = await http.post(
                action,
                data={**form.fields, "username": f"user{i}", "password": "x"},
                headers=headers,
            )
        assert page.status_code == 429
