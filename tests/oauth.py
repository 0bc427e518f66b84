"""Test helpers that drive the authorization server the way a browser and a client would:
PKCE pairs, registration, and following the authorization URL through the HTML forms."""

from __future__ import annotations

import base64
import hashlib
import secrets
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any
from urllib.parse import parse_qs, urlencode, urljoin, urlsplit

import httpx2


def pkce_pair() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=")
    return verifier, challenge.decode()


@dataclass
class Form:
    action: str
    fields: dict[str, str] = field(default_factory=dict)
    buttons: dict[str, list[str]] = field(default_factory=dict)


class _FormParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.forms: list[Form] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form":
            self.forms.append(Form(action=a.get("action", "")))
        elif tag == "input" and self.forms and a.get("name"):
            self.forms[-1].fields[a["name"]] = a.get("value", "")
        elif tag == "button" and self.forms and a.get("name"):
            self.forms[-1].buttons.setdefault(a["name"], []).append(a.get("value", ""))


def forms(html: str) -> list[Form]:
    parser = _FormParser()
    parser.feed(html)
    return parser.forms


def query(url: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(url).query, keep_blank_values=True).items()}


async def register_public_client(
    http: httpx2.AsyncClient, redirect_uri: str = "http://127.0.0.1/callback", **extra: Any
) -> dict[str, Any]:
    body = {
        "client_name": "Test client",
        "redirect_uris": [redirect_uri],
        "token_endpoint_auth_method": "none",
        "grant_types": ["authorization_code", "refresh_token"],
        **extra,
    }
    response = await http.post("/register", json=body)
    assert response.status_code == 201, response.text
    return dict(response.json())


def authorization_params(
    client_id: str,
    challenge: str,
    *,
    redirect_uri: str = "http://127.0.0.1:5555/callback",
    resource: str | None = None,
    scope: str | None = None,
    state: str = "state-123",
    **extra: str,
) -> dict[str, str]:
    params = {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": redirect_uri,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "state": state,
    }
    if resource is not None:
        params["resource"] = resource
    if scope is not None:
        params["scope"] = scope
    params.update(extra)
    return params


async def follow(
    http: httpx2.AsyncClient, response: httpx2.Response, limit: int = 10
) -> httpx2.Response:
    """Follow same-server redirects; stop at the first one that leaves the server."""
    for _ in range(limit):
        if response.status_code not in (302, 303) or "location" not in response.headers:
            return response
        location = urljoin(str(response.request.url), response.headers["location"])
        if urlsplit(location).netloc != urlsplit(str(response.request.url)).netloc:
            return response
        response = await http.get(location)
    raise AssertionError("too many redirects")


async def submit(
    http: httpx2.AsyncClient, page: httpx2.Response, values: dict[str, str]
) -> httpx2.Response:
    form = forms(page.text)[0]
    action = urljoin(str(page.request.url), form.action)
    return await http.post(action, data={**form.fields, **values})


async def sign_in_and_approve(
    http: httpx2.AsyncClient,
    params: dict[str, str],
    *,
    username: str = "alice",
    password: str = "correct horse battery",
    action: str | None = "approve",
) -> httpx2.Response:
    """Run the authorization request through login (and consent if shown); return the
    response that leaves the server (the redirect to the client)."""
    url = "/authorize?" + urlencode(params)
    page = await follow(http, await http.get(url))
    if page.status_code == 200 and "password" in forms(page.text)[0].fields:
        page = await follow(
            http, await submit(http, page, {"username": username, "password": password})
        )
    if page.status_code == 200 and action is not None and forms(page.text)[0].buttons.get("action"):
        page = await follow(http, await submit(http, page, {"action": action}))
    return page
