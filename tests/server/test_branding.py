"""The service's name, logo and accent colour (settings) on every page; the issuer's host in the
footer; a favicon; invalid branding settings are refused with the setting's name."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx2
import pytest

from mcpauth.errors import ConfigurationError
from mcpauth.server import Settings, create_app
from mcpauth.server.config import load_settings

pytestmark = pytest.mark.anyio


async def test_pages_carry_the_configured_brand(make_settings: Callable[..., Settings]) -> None:
    app = create_app(
        make_settings(
            service_name="Acme sign-in",
            logo_url="https://cdn.acme.example/logo.svg",
            accent_color="#FFCC00",
        )
    )
    transport = httpx2.ASGITransport(app=app)
    async with httpx2.AsyncClient(transport=transport, base_url="http://127.0.0.1:9000") as http:
        page = await http.get("/account")
        icon = await http.get("/favicon.svg")
    assert "<title>Sign in · Acme sign-in</title>" in page.text
    assert '<img src="https://cdn.acme.example/logo.svg" alt="">' in page.text
    assert "--accent: #ffcc00; --on-accent: #111827;" in page.text  # dark text on yellow
    assert "127.0.0.1:9000" in page.text
    assert "img-src 'self' https://cdn.acme.example;" in page.headers["content-security-policy"]
    assert icon.headers["content-type"].startswith("image/svg+xml")
    assert "#ffcc00" in icon.text


async def test_unknown_pages_answer_html_to_browsers_and_json_to_clients(
    http: httpx2.AsyncClient,
) -> None:
    browser = await http.get("/nope", headers={"Accept": "text/html,*/*"})
    assert browser.status_code == 404
    assert "Page not found" in browser.text
    client = await http.get("/nope", headers={"Accept": "application/json"})
    assert client.status_code == 404
    assert client.json()["error"] == "invalid_request"


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("accent_color", "blue"),
        ("accent_color", "#12345"),
        ("logo_url", "http://acme.example/logo.svg"),
        ("logo_url", "//acme.example/logo.svg"),
        ("logo_url", "javascript:alert(1)"),
        ("service_name", ""),
    ],
)
def test_invalid_branding_is_refused_with_the_setting_name(setting: str, value: Any) -> None:
    with pytest.raises(ConfigurationError, match=setting):
        load_settings({setting: value}, environ={})
