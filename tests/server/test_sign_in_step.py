"""A sign-in step of the application's own (``create_app(settings, sign_in=...)``): a header
set by an authenticating proxy signs the person in at once, a one-time-code form posts back to
the step, and mcpauth still refuses cross-site and CSRF-less posts before the step sees them;
the session id rotates and the request goes on to consent and the code, as with passwords."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from urllib.parse import urlencode

import httpx2
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from mcpauth.server import (
    Account,
    PasswordAndProviders,
    PendingSignIn,
    SignInStep,
    admin,
    create_app,
)
from mcpauth.server.config import Settings

from ..conftest import ISSUER
from ..oauth import authorization_params, follow, forms, pkce_pair, query
from .conftest import RESOURCE

pytestmark = pytest.mark.anyio

CODE = "424242"


class ProxyHeaderOrCode:
    """Signs in whoever an authenticating proxy names in ``X-Authenticated-User``; anyone
    else gets a form asking for a one-time code (here, one fixed code for ``carol``)."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    async def page(self, request: Request, pending: PendingSignIn) -> Response | Account:
        self.seen.append("page")
        user = request.headers.get("x-authenticated-user")
        if user:
            return Account(username=f"proxy:{user}")
        return HTMLResponse(
            f'<form method="post" action="{pending.form_action}">'
            f'<input type="hidden" name="csrf_token" value="{pending.csrf_token}">'
            f'<p>{pending.client_name} wants access. Code:</p><input name="code">'
            "<button>Sign in</button></form>"
        )

    async def submit(self, request: Request, pending: PendingSignIn) -> Response | Account:
        self.seen.append("submit")
        form = await request.form()
        if form.get("code") == CODE:
            return Account(username="carol")
        return HTMLResponse("<p>Wrong code.</p>", status_code=200)


@pytest.fixture
def step() -> ProxyHeaderOrCode:
    return ProxyHeaderOrCode()


@pytest.fixture
def hooked(make_settings: Callable[..., Settings], step: ProxyHeaderOrCode) -> Starlette:
    app = create_app(make_settings(), sign_in=step)
    ctx = app.state.mcpauth
    admin.add_resource(ctx, RESOURCE, scopes=["mcp:tools"], default_scopes=["mcp:tools"])
    return app


async def start(
    http: httpx2.AsyncClient, app: Starlette, **headers: str
) -> tuple[httpx2.Response, str]:
    client = admin.add_client(
        app.state.mcpauth,
        name="Notes",
        redirect_uris=["http://127.0.0.1:5555/callback"],
        grant_types=["authorization_code"],
        first_party=True,
    )
    _, challenge = pkce_pair()
    params = authorization_params(client["client_id"], challenge, resource=RESOURCE)
    http.headers.update(headers)  # what a proxy in front would add to every request
    page = await follow(http, await http.get("/authorize?" + urlencode(params)))
    return page, client["client_id"]


@pytest.fixture
async def hooked_http(hooked: Starlette) -> AsyncIterator[httpx2.AsyncClient]:
    transport = httpx2.ASGITransport(app=hooked)
    async with httpx2.AsyncClient(transport=transport, base_url=ISSUER) as http:
        yield http


async def test_a_step_can_sign_in_at_once_from_a_trusted_header(
    hooked_http: httpx2.AsyncClient, hooked: Starlette, step: ProxyHeaderOrCode
) -> None:
    done, _ = await start(hooked_http, hooked, **{"X-Authenticated-User": "dana"})
    assert done.status_code == 303, done.text
    assert "code" in query(done.headers["location"])
    assert step.seen == ["page"]
    users = admin.list_users(hooked.state.mcpauth)
    assert [u["username"] for u in users] == ["proxy:dana"]


async def test_a_steps_own_form_posts_back_to_it(
    hooked_http: httpx2.AsyncClient, hooked: Starlette, step: ProxyHeaderOrCode
) -> None:
    page, _ = await start(hooked_http, hooked)
    assert page.status_code == 200
    assert "Notes wants access" in page.text
    form = forms(page.text)[0]
    before = hooked_http.cookies.get("mcpauth_session")
    wrong = await hooked_http.post(form.action, data={**form.fields, "code": "0"})
    assert "Wrong code" in wrong.text
    right = await hooked_http.post(form.action, data={**form.fields, "code": CODE})
    assert right.status_code == 303
    assert hooked_http.cookies.get("mcpauth_session") != before  # a new session id
    done = await follow(hooked_http, right)
    assert "code" in query(done.headers["location"])
    assert step.seen == ["page", "submit", "submit"]


async def test_forged_posts_never_reach_the_step(
    hooked_http: httpx2.AsyncClient, hooked: Starlette, step: ProxyHeaderOrCode
) -> None:
    page, _ = await start(hooked_http, hooked)
    form = forms(page.text)[0]
    no_token = await hooked_http.post(form.action, data={"code": CODE})
    assert no_token.status_code == 403
    cross_site = await hooked_http.post(
        form.action,
        data={**form.fields, "code": CODE},
        headers={"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"},
    )
    assert cross_site.status_code == 403
    assert step.seen == ["page"]


def test_the_built_in_step_is_a_sign_in_step_and_others_must_be(
    make_settings: Callable[..., Settings],
) -> None:
    assert isinstance(PasswordAndProviders(), SignInStep)
    with pytest.raises(TypeError, match="SignInStep"):
        create_app(make_settings(), sign_in=object())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="exactly one"):
        Account()
