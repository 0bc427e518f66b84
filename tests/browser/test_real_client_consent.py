"""What a person sees when a real client's unusual registration reaches consent, in Chromium
against a real `mcpauth serve`: Cursor registers three redirect URIs of three kinds (loopback,
its own https site, `cursor://`) and the consent page names the private-use scheme plainly with
its warning; approving sends the browser to the `cursor://` URI with the code, state and iss."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx2
import pytest

from .conftest import Server
from .test_pages import sign_in

pytestmark = pytest.mark.e2e

CURSOR = "cursor://anysphere.cursor-mcp/oauth/callback"


def test_cursor_s_custom_scheme_is_named_on_consent_and_receives_the_code(
    server: Server, visit: Any
) -> None:
    registered = httpx2.post(
        f"{server.issuer}/register",
        json={
            "client_name": "Cursor",
            "redirect_uris": [
                "http://localhost:8787/callback",
                "https://www.cursor.com/agents/mcp/oauth/callback",
                CURSOR,
            ],
            "token_endpoint_auth_method": "none",
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "application_type": "web",
        },
    )
    assert registered.status_code == 201, registered.text
    client_id = registered.json()["client_id"]
    url, _, state = server.authorize_url(client_id)
    # the same request, redirecting to the private-use scheme
    params = dict(httpx2.URL(url).params) | {"redirect_uri": CURSOR}
    tab = visit()
    page = tab.page
    page.goto(f"{server.issuer}/authorize?{urlencode(params)}")
    sign_in(page, "ivan")  # a person no other browser test signs in as (carol is locked out)
    page.get_by_role("heading", name="Authorize Cursor?").wait_for()
    # the card names where this request's code goes, not the first URI Cursor registered
    assert page.locator(".client").get_by_text("the application that handles cursor:").is_visible()
    assert not page.get_by_text("localhost:8787").is_visible()
    assert page.locator("strong").filter(has_text="handles cursor: links").is_visible()
    assert page.get_by_text(
        "Any application installed on this device can ask to handle cursor: links."
    ).is_visible()
    tab.check("consent-custom-scheme")
    with page.expect_response(lambda r: r.request.method == "POST") as answer:
        page.get_by_role("button", name="Approve").click()
    location = answer.value.headers["location"]
    assert location.startswith(CURSOR + "?"), location
    response = {k: v[0] for k, v in parse_qs(urlsplit(location).query).items()}
    assert set(response) == {"code", "state", "iss"}
    assert response["state"] == state
    assert response["iss"] == server.issuer
