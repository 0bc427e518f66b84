"""The fuzz table of the pages' forms: every field of every CSRF-checked form a person can reach
(the sign-in page with its provider buttons, consent, the account page's sign-in, revocation,
link, unlink and sign-out forms) posted with non-ASCII and undecodable values, one field at a
time, by the browser that was shown the form. None may answer 500 or redirect anywhere but this
server or the client's registered redirect URI; a mangled CSRF token is a refused form (4xx)."""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from urllib.parse import urlencode, urljoin

import httpx2
import pytest
from starlette.applications import Starlette

from mcpauth.server import Settings, admin, create_app
from mcpauth.server.config import UpstreamProvider

from ..conftest import ISSUER
from ..oauth import Form, authorization_params, follow, forms, pkce_pair, register_public_client
from .conftest import PASSWORD, RESOURCE, add_user
from .upstream_fake import FakeProvider

pytestmark = pytest.mark.anyio

APP_REDIRECT = "http://127.0.0.1:5555/callback"
SECRET_ENV = "MCPAUTH_TEST_FUZZ_UPSTREAM_SECRET"
# What a form field may hold that hmac.compare_digest on str cannot take: Latin-1, a symbol, an
# emoji, a token-length run of non-ASCII; and bytes that are not UTF-8 at all (sent raw).
NON_ASCII = ["\u00e9", "\u2603\u2603\u2603", "\U0001f600", "\u00ff" * 64]
UNDECODABLE = b"%ff%fe"


@pytest.fixture
def app(
    make_settings: Callable[..., Settings], password_hash: str, monkeypatch: pytest.MonkeyPatch
) -> Starlette:
    idp = FakeProvider()
    monkeypatch.setenv(SECRET_ENV, idp.client_secret)
    provider = UpstreamProvider(
        id="idp",
        name="Example IdP",
        issuer=idp.issuer,
        client_id=idp.client_id,
        client_secret_env=SECRET_ENV,
    )
    app = create_app(
        make_settings(upstream=(provider,), rate_limit_login=0, rate_limit_authorize=0)
    )
    ctx = app.state.mcpauth

    async def route(request: httpx2.Request) -> httpx2.Response:
        return await idp.handle(request)

    ctx.upstream.transport = httpx2.MockTransport(route)
    admin.add_resource(ctx, RESOURCE, scopes=["mcp:tools"], default_scopes=["mcp:tools"])
    add_user(app, "alice", password_hash)
    return app


async def _reachable_forms(http: httpx2.AsyncClient) -> list[tuple[str, Form]]:
    """Walk the pages as a person does, collecting (page URL, form) for every form shown."""
    client = await register_public_client(http, APP_REDIRECT)
    params = authorization_params(
        client["client_id"], pkce_pair()[1], redirect_uri=APP_REDIRECT, resource=RESOURCE
    )
    found: list[tuple[str, Form]] = []

    def collect(page: httpx2.Response) -> list[Form]:
        assert page.status_code == 200, page.text[:300]
        shown = forms(page.text)
        found.extend((str(page.url), form) for form in shown)
        return shown

    sign_in = await follow(http, await http.get("/authorize?" + urlencode(params)))
    login = next(f for f in collect(sign_in) if "password" in f.fields)
    action = urljoin(str(sign_in.url), login.action)
    values = {**login.fields, "username": "alice", "password": PASSWORD}
    consent = await follow(http, await http.post(action, data=values))
    approve = collect(consent)[0]
    action = urljoin(str(consent.url), approve.action)
    response = await http.post(action, data={**approve.fields, "action": "approve"})
    assert response.headers["location"].startswith(APP_REDIRECT)
    # the account page of a signed-out browser (its own sign-in form), then signed in
    async with httpx2.AsyncClient(transport=http._transport, base_url=ISSUER) as stranger:
        collect(await stranger.get("/account"))
    account = await http.get("/account")
    collect(account)
    # "Revoke access" is a link to a confirmation page holding the form
    links = re.findall(r'href="([^"]*/account/revoke[^"]*)"', account.text)
    assert links, account.text[:500]
    collect(await http.get(urljoin(str(account.url), html.unescape(links[0]))))
    return found


def _mutations(form: Form) -> list[tuple[str, dict[str, str] | bytes]]:
    """Each field (inputs and buttons) replaced in turn by each non-ASCII value, then raw."""
    base = {**form.fields, **{name: values[0] for name, values in form.buttons.items()}}
    out: list[tuple[str, dict[str, str] | bytes]] = []
    for name in base:
        for value in NON_ASCII:
            out.append((name, {**base, name: value}))
        rest = urlencode({k: v for k, v in base.items() if k != name}).encode()
        out.append((name, rest + b"&" + name.encode() + b"=" + UNDECODABLE))
    return out


def _problem(response: httpx2.Response, field: str) -> str | None:
    if response.status_code >= 500:
        return f"{response.status_code}: {response.text[:120]!r}"
    location = response.headers.get("location")
    if location is not None and not location.startswith((ISSUER + "/", APP_REDIRECT + "?", "/")):
        return f"redirects to an unvalidated URI {location[:100]!r}"
    if field == "csrf_token" and not 400 <= response.status_code < 500:
        return f"a mangled CSRF token answered {response.status_code}"
    return None


async def test_non_ascii_values_in_every_form_field_never_get_a_500(
    http: httpx2.AsyncClient,
) -> None:
    reachable = await _reachable_forms(http)
    actions = {form.action.rsplit("/", 2)[-1] for _, form in reachable}
    # the sign-in page (with the provider's button), consent, the account page's forms
    assert {"login", "logout", "revoke"} <= actions, actions
    assert any(form.action.endswith("/upstream/idp/login") for _, form in reachable)
    assert any("csrf_token" in form.fields for _, form in reachable)
    problems: list[str] = []
    count = 0
    # sign-out last: it ends the session the other forms are posted from
    for page_url, form in sorted(reachable, key=lambda item: item[1].action.endswith("logout")):
        action = urljoin(page_url, form.action)
        for field, body in _mutations(form):
            count += 1
            if isinstance(body, bytes):
                headers = {"Content-Type": "application/x-www-form-urlencoded"}
                response = await http.post(action, content=body, headers=headers)
            else:
                response = await http.post(action, data=body)
            if (problem := _problem(response, field)) is not None:
                problems.append(f"{form.action} {field}: {problem}")
    assert count >= 60
    assert problems == [], f"{len(problems)} of {count}:\n" + "\n".join(problems[:30])
