"""What the second-factor tests share: a clock held still, browsers of their own on one app,
signing in on the account page, and turning an authenticator app on the way a person does
(the secret read off the page, codes made with pyotp)."""

from __future__ import annotations

import html
import re
import time
from urllib.parse import urljoin

import httpx2
import pyotp
from starlette.applications import Starlette

from ..conftest import ISSUER
from ..oauth import Form, forms
from .conftest import PASSWORD


class Clock:
    """Held still at the first second of the current TOTP step; tests move it."""

    def __init__(self) -> None:
        self.now = float(int(time.time()) // 30 * 30)

    def __call__(self) -> float:
        return self.now


def browser(app: Starlette, base_url: str = ISSUER) -> httpx2.AsyncClient:
    """Another browser (its own cookies) on ``app``."""
    transport = httpx2.ASGITransport(app=app, client=("203.0.113.7", 50000))
    return httpx2.AsyncClient(transport=transport, base_url=base_url)


def form_to(page: httpx2.Response, ending: str) -> Form:
    """The page's form whose action ends with ``ending``."""
    found = [form for form in forms(page.text) if form.action.endswith(ending)]
    assert found, f"no form posting to …{ending} on the page"
    return found[0]


async def post_form(
    http: httpx2.AsyncClient, page: httpx2.Response, ending: str, **values: str
) -> httpx2.Response:
    form = form_to(page, ending)
    return await http.post(
        urljoin(str(page.request.url), html.unescape(form.action)),
        data={**form.fields, **values},
    )


async def password_step(http: httpx2.AsyncClient, username: str = "alice") -> httpx2.Response:
    """The password form of the account page, posted: 303 to the account page or to the
    second step."""
    page = await http.get("/account")
    return await post_form(http, page, "/account/login", username=username, password=PASSWORD)


def secret_on(page: httpx2.Response) -> str:
    found = re.search(r'<p class="secret"><code>([A-Z2-7 ]+)</code>', page.text)
    assert found is not None, "no secret on the page"
    return found.group(1).replace(" ", "")


def codes_on(page: httpx2.Response) -> list[str]:
    return re.findall(r"<li><code>([a-z2-9-]{19})</code></li>", page.text)


def code(secret: str, clock: Clock, steps: int = 0) -> str:
    """The app's code ``steps`` time steps from now."""
    return pyotp.TOTP(secret).at(int(clock.now) + 30 * steps)


async def turn_on_app(http: httpx2.AsyncClient, clock: Clock) -> tuple[str, list[str]]:
    """Turn an authenticator app on for the signed-in account: its secret and recovery codes."""
    page = await http.get("/account")
    enrol = await post_form(http, page, "/account/totp")
    assert enrol.status_code == 200, enrol.text
    secret = secret_on(enrol)
    done = await post_form(http, enrol, "/account/totp/confirm", code=code(secret, clock))
    assert done.status_code == 200, done.text
    codes = codes_on(done)
    assert len(codes) == 10
    return secret, codes


async def signed_in_with_app(
    app: Starlette, clock: Clock, username: str = "alice"
) -> tuple[str, list[str]]:
    """``username`` signs in and turns an app on, in a browser of her own; then time moves
    past the code used, as it does for a person."""
    async with browser(app) as http:
        assert (await password_step(http, username)).status_code == 303
        enrolled = await turn_on_app(http, clock)
    clock.now += 30
    return enrolled
