"""The form POST origin rule: what each browser sends for the server's own forms is accepted,
what another site can make a browser send is refused (see mcpauth.server.browser.csrf); and
the per-form token, good for one form of one session."""

from __future__ import annotations

from typing import Any
from urllib.parse import urljoin

import httpx2
import pytest

from mcpauth.server.browser.csrf import cross_site_reason, csrf_token, csrf_valid

from ..oauth import forms
from .test_interaction import consent_page

OWN = "http://127.0.0.1:9000"
anyio = pytest.mark.anyio


@pytest.mark.parametrize(
    ("headers", "accepted"),
    [
        # what Chromium, Firefox and Safari send for a form on the server's own page
        ({"origin": OWN, "sec-fetch-site": "same-origin"}, True),
        # Referrer-Policy: no-referrer makes browsers send Origin: null (the old bug)
        ({"origin": "null", "sec-fetch-site": "same-origin"}, True),
        # a browser without fetch metadata, or a script: the CSRF token decides
        ({}, True),
        ({"origin": OWN}, True),
        # another site
        ({"origin": "https://evil.example", "sec-fetch-site": "cross-site"}, False),
        ({"origin": "https://evil.example"}, False),
        ({"origin": "http://127.0.0.1:9001", "sec-fetch-site": "same-site"}, False),
        ({"origin": OWN, "sec-fetch-site": "cross-site"}, False),
        ({"sec-fetch-site": "cross-site"}, False),
        # a sandboxed frame or data: URL on another site sends Origin: null too
        ({"origin": "null", "sec-fetch-site": "cross-site"}, False),
        ({"origin": "null"}, False),
        ({"origin": "null", "sec-fetch-site": "none"}, False),
    ],
)
def test_form_origin_rule(headers: dict[str, str], accepted: bool) -> None:
    assert (cross_site_reason(headers, OWN) is None) is accepted


def test_a_form_token_is_good_for_its_own_session_and_form_only() -> None:
    secret = b"k" * 32
    token = csrf_token(secret, "sid-1", "consent:abc")
    assert csrf_valid(secret, "sid-1", "consent:abc", token)
    assert not csrf_valid(secret, "sid-2", "consent:abc", token)
    assert not csrf_valid(secret, "sid-1", "consent:xyz", token)
    assert not csrf_valid(b"o" * 32, "sid-1", "consent:abc", token)


@pytest.mark.parametrize("posted", [None, "", 7, b"bytes", ["a", "list"], object()])
def test_a_form_token_field_that_is_not_a_token_is_refused(posted: object) -> None:
    # a missing field, an empty one, or an upload in its place: never an error, never valid
    assert not csrf_valid(b"k" * 32, "sid-1", "consent:abc", posted)


@anyio
async def test_consent_posted_with_origin_null_from_the_same_origin_is_accepted(
    http: httpx2.AsyncClient, public_client: dict[str, Any]
) -> None:
    page = await consent_page(http, public_client["client_id"])
    form = forms(page.text)[0]
    response = await http.post(
        urljoin(str(page.request.url), form.action),
        data={**form.fields, "action": "approve"},
        headers={"Origin": "null", "Sec-Fetch-Site": "same-origin"},
    )
    assert response.status_code == 303
    assert "code=" in response.headers["location"]


@anyio
async def test_a_refused_form_is_logged_with_its_reason(
    http: httpx2.AsyncClient, public_client: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    page = await consent_page(http, public_client["client_id"])
    form = forms(page.text)[0]
    with caplog.at_level("WARNING", logger="mcpauth.csrf"):
        response = await http.post(
            urljoin(str(page.request.url), form.action),
            data={**form.fields, "action": "approve"},
            headers={"Origin": "null", "Sec-Fetch-Site": "cross-site"},
        )
    assert response.status_code == 403
    assert "another website" in response.text
    assert any("Sec-Fetch-Site is 'cross-site'" in r.getMessage() for r in caplog.records)


@anyio
async def test_interaction_pages_send_the_origin_on_same_origin_posts(
    http: httpx2.AsyncClient, public_client: dict[str, Any]
) -> None:
    page = await consent_page(http, public_client["client_id"])
    # under same-origin, browsers send the real Origin on the page's own form POSTs
    assert page.headers["referrer-policy"] == "same-origin"
