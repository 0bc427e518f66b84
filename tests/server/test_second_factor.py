"""Two-step sign-in with an authenticator app (TOTP) and recovery codes, and the step up a
resource that requires two factors asks for (docs/security.md T46, T47, T49): an app is on
only after a code from it; a password alone then leaves the browser half signed in, bound to
it and short-lived; each code and each recovery code works once; wrong codes are throttled
like passwords; the tokens say how the person signed in (``amr``)."""

from __future__ import annotations

import asyncio
import html
import logging
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

import httpx2
import pytest
from sqlalchemy import select
from starlette.applications import Starlette

from mcpauth import jwt
from mcpauth.server import Settings, admin, create_app
from mcpauth.server.browser import second_factor as second_factor_module
from mcpauth.server.browser.account_links import LINK_MAX_AGE
from mcpauth.server.browser.second_factor import PENDING_TTL
from mcpauth.server.storage import second_factors
from mcpauth.server.storage.models import BrowserSessionRecord, PendingSignIn, TotpFactor

from ..oauth import authorization_params, follow, forms, pkce_pair, query, submit
from .conftest import PASSWORD, RESOURCE
from .mfa_support import (
    Clock,
    browser,
    code,
    form_to,
    password_step,
    post_form,
    signed_in_with_app,
    turn_on_app,
)
from .test_token import REDIRECT, claims_of, redeem

pytestmark = pytest.mark.anyio
MFA_RESOURCE = "http://127.0.0.1:8002/mcp"
MAX_FAILURES = 3


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def app(make_settings: Callable[..., Settings], clock: Clock) -> Starlette:
    return create_app(make_settings(login_max_failures=MAX_FAILURES), clock=clock)


@pytest.fixture
def mfa_resource(seeded: Starlette) -> str:
    admin.add_resource(
        seeded.state.mcpauth,
        MFA_RESOURCE,
        name="Payroll tools",
        scopes=["payroll:read"],
        default_scopes=["payroll:read"],
        require_mfa=True,
    )
    return MFA_RESOURCE


async def second_step(http: httpx2.AsyncClient, response: httpx2.Response) -> httpx2.Response:
    """The second-factor page a 303 leads to."""
    assert response.status_code == 303, response.text
    assert response.headers["location"].endswith("/second-factor")
    page = await http.get(response.headers["location"])
    assert page.status_code == 200
    return page


def says(page: httpx2.Response, words: str) -> bool:
    return words in html.unescape(page.text)


def signed_in_as(page: httpx2.Response) -> bool:
    return "Signed in as" in page.text


# --------------------------------------------------------------------------------------------
# turning an app on


async def test_an_app_is_on_only_after_a_code_from_it_and_its_secret_is_sealed(
    seeded: Starlette, http: httpx2.AsyncClient, clock: Clock
) -> None:
    assert (await password_step(http)).status_code == 303
    account = await http.get("/account")
    assert "Authenticator app" in account.text
    assert "Off" in account.text
    enrol = await post_form(http, account, "/account/totp")
    assert "<svg" in enrol.text  # the QR code, inline
    secret = enrol.text.split('<p class="secret"><code>')[1].split("<")[0].replace(" ", "")
    assert len(secret) == 32
    wrong = await post_form(http, enrol, "/account/totp/confirm", code="000000")
    assert wrong.status_code == 200
    assert says(wrong, "That code didn't work")
    assert secret in wrong.text.replace(" ", "")  # the same secret, shown again
    assert "Off" in (await http.get("/account")).text
    done = await post_form(http, wrong, "/account/totp/confirm", code=code(secret, clock))
    assert "Save your recovery codes" in done.text
    assert "On · 10 recovery codes left" in (await http.get("/account")).text
    with seeded.state.mcpauth.db.read() as session:
        (row,) = session.execute(select(TotpFactor)).scalars()
    assert secret not in row.sealed
    assert row.confirmed_at is not None


async def test_a_second_secret_cannot_replace_one_that_is_on(
    seeded: Starlette, http: httpx2.AsyncClient, clock: Clock
) -> None:
    assert (await password_step(http)).status_code == 303
    secret, _ = await turn_on_app(http, clock)
    page = await http.get("/account")
    assert not [f for f in forms(page.text) if f.action.endswith("/account/totp")]
    # a form kept from before: nothing is replaced
    token = form_to(page, "/account/totp/remove").fields["csrf_token"]
    again = await http.post("/account/totp", data={"csrf_token": token})
    assert again.status_code == 303
    ctx = seeded.state.mcpauth
    with ctx.db.read() as session:
        kept = second_factors.totp_secret(
            session, ctx.second_factor_key, _alice(seeded), confirmed=True
        )
    assert kept is not None
    assert kept[0] == secret


def _alice(app: Starlette) -> str:
    return str(admin.list_users(app.state.mcpauth)[0]["id"])


# --------------------------------------------------------------------------------------------
# signing in with it


async def test_a_password_alone_leaves_the_browser_half_signed_in_until_the_code(
    seeded: Starlette, clock: Clock
) -> None:
    secret, _ = await signed_in_with_app(seeded, clock)
    async with browser(seeded) as http:
        page = await second_step(http, await password_step(http))
        assert says(page, "Confirm it's you")
        assert not signed_in_as(await http.get("/account"))  # not yet
        done = await post_form(http, page, "/second-factor/login", code=code(secret, clock))
        assert done.status_code == 303
        assert done.headers["location"].endswith("/account")
        assert signed_in_as(await http.get("/account"))


async def test_an_answer_completes_only_the_sign_in_it_was_checked_for(
    seeded: Starlette, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Alice's code is checked; before it is taken, the same browser posts Bob's password (a
    new half-finished sign-in replaces hers). The answer checked for Alice must not sign the
    browser in as Bob, whose second factor nobody gave."""
    secret, _ = await signed_in_with_app(seeded, clock)  # alice's app
    ctx = seeded.state.mcpauth
    bob = str(next(u for u in admin.list_users(ctx) if u["username"] == "bob")["id"])
    checked = second_factor_module._check_code

    def then_bobs_password(ctx: Any, user_id: str, typed: str) -> bool:
        good = checked(ctx, user_id, typed)
        now = ctx.now()
        with ctx.db.read() as session:
            (sid_digest,) = session.execute(select(PendingSignIn.digest)).scalars()
        with ctx.db.write() as session:  # what Bob's password step does meanwhile
            second_factors.start_pending(session, sid_digest, bob, "pwd", None, now, now + 300)
        return good

    monkeypatch.setattr(second_factor_module, "_check_code", then_bobs_password)
    async with browser(seeded) as http:
        page = await second_step(http, await password_step(http))
        answer = await post_form(http, page, "/second-factor/login", code=code(secret, clock))
        assert answer.status_code != 303
        assert not signed_in_as(await http.get("/account"))
    with ctx.db.read() as session:
        signed = session.execute(select(BrowserSessionRecord.user_id)).scalars().all()
    assert bob not in signed


async def test_a_code_is_accepted_once_and_its_neighbours_only_if_newer(
    seeded: Starlette, clock: Clock
) -> None:
    secret, _ = await signed_in_with_app(seeded, clock)
    used = code(secret, clock)
    async with browser(seeded) as first:
        page = await second_step(first, await password_step(first))
        assert (await post_form(first, page, "/second-factor/login", code=used)).status_code == 303
    async with browser(seeded) as second:  # the same code again, in its window: a replay
        page = await second_step(second, await password_step(second))
        replay = await post_form(second, page, "/second-factor/login", code=used)
        assert replay.status_code == 200
        assert says(replay, "That code didn't work")
        older = await post_form(
            second, replay, "/second-factor/login", code=code(secret, clock, -1)
        )
        assert says(older, "That code didn't work")  # a step before the one used
        newer = await post_form(second, older, "/second-factor/login", code=code(secret, clock, 1))
        assert newer.status_code == 303  # RFC 6238 §5.2: one step of drift either way


async def test_codes_outside_the_window_are_refused(seeded: Starlette, clock: Clock) -> None:
    secret, _ = await signed_in_with_app(seeded, clock)
    clock.now += 60  # two steps past the code that turned the app on
    async with browser(seeded) as http:
        page = await second_step(http, await password_step(http))
        for steps in (-2, 2):
            page = await post_form(
                http, page, "/second-factor/login", code=code(secret, clock, steps)
            )
            assert says(page, "That code didn't work")
        assert (
            await post_form(http, page, "/second-factor/login", code=code(secret, clock, -1))
        ).status_code == 303


async def test_wrong_codes_are_throttled_like_passwords(seeded: Starlette, clock: Clock) -> None:
    secret, _ = await signed_in_with_app(seeded, clock)
    async with browser(seeded) as http:
        page = await second_step(http, await password_step(http))
        for _ in range(MAX_FAILURES):
            page = await post_form(http, page, "/second-factor/login", code="123456")
            assert page.status_code == 200
        locked = await post_form(http, page, "/second-factor/login", code=code(secret, clock))
        assert locked.status_code == 429  # even the right code waits now
        assert "Retry-After" in locked.headers
    async with browser(seeded) as other:  # the account is locked, from any browser
        page = await second_step(other, await password_step(other))
        late = await post_form(other, page, "/second-factor/login", code=code(secret, clock))
        assert late.status_code == 429


@pytest.mark.every_engine  # concurrency: row locks differ between the engines
async def test_concurrent_wrong_codes_are_never_checked_past_the_limit(
    seeded: Starlette, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Many guesses posted at once from one half-finished sign-in: each is counted before it
    is checked, so no more than the limit are ever compared, whatever the interleaving."""
    await signed_in_with_app(seeded, clock)
    compared: list[str] = []
    matches = second_factor_module._matches

    def counted(ctx: Any, session: Any, user_id: str, typed: str, now: int) -> bool:
        compared.append(typed)
        return matches(ctx, session, user_id, typed, now)

    monkeypatch.setattr(second_factor_module, "_matches", counted)
    async with browser(seeded) as http:
        page = await second_step(http, await password_step(http))
        token = form_to(page, "/second-factor/login").fields["csrf_token"]
        answers = await asyncio.gather(
            *(
                http.post("/second-factor/login", data={"csrf_token": token, "code": f"{n:06d}"})
                for n in range(40)
            )
        )
    assert len(compared) <= MAX_FAILURES
    assert sum(a.status_code == 429 for a in answers) >= 40 - MAX_FAILURES


async def test_each_recovery_code_works_once(seeded: Starlette, clock: Clock) -> None:
    _, codes = await signed_in_with_app(seeded, clock)
    async with browser(seeded) as http:
        page = await second_step(http, await password_step(http))
        assert "or one of your recovery codes" in page.text
        typed = codes[0].upper().replace("-", " ")  # as a person may type it
        assert (await post_form(http, page, "/second-factor/login", code=typed)).status_code == 303
        assert "8 recovery codes left" not in (await http.get("/account")).text
        assert "9 recovery codes left" in (await http.get("/account")).text
    async with browser(seeded) as http:
        page = await second_step(http, await password_step(http))
        again = await post_form(http, page, "/second-factor/login", code=codes[0])
        assert says(again, "That code didn't work")
        other = await post_form(http, again, "/second-factor/login", code=codes[1])
        assert other.status_code == 303


async def test_recovery_codes_are_stored_as_digests_of_the_account_and_code(
    seeded: Starlette, clock: Clock
) -> None:
    _, codes = await signed_in_with_app(seeded, clock)
    with seeded.state.mcpauth.db.read() as session:
        stored = {row[0] for row in session.execute(select(second_factors._CODES.c.digest))}
    assert len(stored) == 10
    assert not any(c in d or c.replace("-", "") in d for c in codes for d in stored)


async def test_the_half_signed_in_state_is_bound_to_its_browser_and_short_lived(
    seeded: Starlette, clock: Clock
) -> None:
    secret, _ = await signed_in_with_app(seeded, clock)
    async with browser(seeded) as http, browser(seeded) as stranger:
        page = await second_step(http, await password_step(http))
        other = await stranger.get("/second-factor")  # another browser has nothing to finish
        assert other.status_code == 403
        assert not says(other, "Confirm it's you")
        clock.now += PENDING_TTL + 1
        late = await post_form(http, page, "/second-factor/login", code=code(secret, clock))
        assert late.status_code == 403
        assert not signed_in_as(await http.get("/account"))


async def test_the_second_step_refuses_a_form_from_another_site_or_without_its_token(
    seeded: Starlette, clock: Clock
) -> None:
    secret, _ = await signed_in_with_app(seeded, clock)
    async with browser(seeded) as http:
        page = await second_step(http, await password_step(http))
        fields = form_to(page, "/second-factor/login").fields
        forged = await http.post(
            "/second-factor/login",
            data={**fields, "code": code(secret, clock)},
            headers={"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"},
        )
        assert forged.status_code == 403
        stale = await http.post(
            "/second-factor/login", data={"csrf_token": "x", "code": code(secret, clock)}
        )
        assert stale.status_code == 403
        assert not signed_in_as(await http.get("/account"))


@pytest.mark.parametrize("typed", ["", " ", "12345", "1234567", "x" * 5000, "١٢٣٤٥٦", "\x00"])
async def test_malformed_codes_are_a_plain_refusal(
    seeded: Starlette, clock: Clock, typed: str
) -> None:
    await signed_in_with_app(seeded, clock)
    async with browser(seeded) as http:
        page = await second_step(http, await password_step(http))
        answer = await post_form(http, page, "/second-factor/login", code=typed)
        assert answer.status_code == 200
        assert "Enter the code." in answer.text or says(answer, "That code didn't work")


async def test_turning_the_app_off_needs_a_recent_sign_in(
    seeded: Starlette, http: httpx2.AsyncClient, clock: Clock
) -> None:
    assert (await password_step(http)).status_code == 303
    await turn_on_app(http, clock)
    page = await http.get("/account")
    clock.now += LINK_MAX_AGE + 1
    stale = await post_form(http, page, "/account/totp/remove")
    assert stale.status_code == 403
    assert "On · 10 recovery codes left" in (await http.get("/account")).text


# --------------------------------------------------------------------------------------------
# authorizing a client


async def authorize(
    http: httpx2.AsyncClient,
    client_id: str,
    *,
    resource: str = RESOURCE,
    username: str = "alice",
    secret: str | None = None,
    clock: Clock | None = None,
    **extra: str,
) -> tuple[httpx2.Response, str]:
    """An authorization request through sign-in (the second step with the app's code when it
    is asked for) and consent: the response that leaves the server, and the PKCE verifier."""
    verifier, challenge = pkce_pair()
    params = authorization_params(
        client_id, challenge, resource=resource, redirect_uri=REDIRECT, **extra
    )
    page = await follow(http, await http.get("/authorize?" + urlencode(params)))
    if page.status_code == 200 and "password" in forms(page.text)[0].fields:
        response = await submit(http, page, {"username": username, "password": PASSWORD})
        page = await follow(http, response)
    if page.status_code == 200 and "/second-factor/login" in page.text:
        assert secret is not None
        assert clock is not None
        answer = await post_form(http, page, "/second-factor/login", code=code(secret, clock))
        page = await follow(http, answer)
    if page.status_code == 200 and forms(page.text)[0].buttons.get("action"):
        page = await follow(http, await submit(http, page, {"action": "approve"}))
    return page, verifier


async def exchanged(
    http: httpx2.AsyncClient, client_id: str, response: httpx2.Response, verifier: str, **form: str
) -> dict[str, Any]:
    assert response.status_code == 303, response.text
    the_code = query(response.headers["location"])["code"]
    issued = await redeem(http, client_id, the_code, verifier, **form)
    assert issued.status_code == 200, issued.text
    return dict(issued.json())


async def test_the_tokens_say_a_password_and_an_app_code_signed_in(
    seeded: Starlette, public_client: dict[str, Any], clock: Clock
) -> None:
    secret, _ = await signed_in_with_app(seeded, clock)
    cid = public_client["client_id"]
    async with browser(seeded) as http:
        response, verifier = await authorize(
            http, cid, secret=secret, clock=clock, scope="mcp:tools openid"
        )
        issued = await exchanged(http, cid, response, verifier)
    assert jwt.unverified_claims(issued["access_token"])["amr"] == ["pwd", "otp", "mfa"]
    assert jwt.unverified_claims(issued["id_token"])["amr"] == ["pwd", "otp", "mfa"]


async def test_a_password_alone_is_said_so(
    seeded: Starlette, public_client: dict[str, Any], http: httpx2.AsyncClient
) -> None:
    cid = public_client["client_id"]
    response, verifier = await authorize(http, cid, username="bob")
    issued = await exchanged(http, cid, response, verifier)
    assert claims_of(seeded, issued["access_token"])["amr"] == ["pwd"]  # the clock is now
    refreshed = await http.post(
        "/token",
        data={
            "grant_type": "refresh_token",
            "refresh_token": issued["refresh_token"],
            "client_id": cid,
        },
    )
    assert claims_of(seeded, refreshed.json()["access_token"])["amr"] == ["pwd"]  # the grant's


async def test_a_resource_that_requires_two_factors_steps_a_password_session_up(
    seeded: Starlette, public_client: dict[str, Any], mfa_resource: str, clock: Clock
) -> None:
    cid = public_client["client_id"]
    async with browser(seeded) as http:
        assert (await password_step(http)).status_code == 303  # a password alone
        secret, _ = await turn_on_app(http, clock)  # the app turned on after that sign-in
        clock.now += 30
        verifier, challenge = pkce_pair()
        params = authorization_params(cid, challenge, resource=mfa_resource, redirect_uri=REDIRECT)
        page = await follow(http, await http.get("/authorize?" + urlencode(params)))
        assert "asks for a second step" in page.text
        page = await follow(
            http, await post_form(http, page, "/second-factor/login", code=code(secret, clock))
        )
        assert "Payroll tools" in page.text  # the consent page now
        response = await follow(http, await submit(http, page, {"action": "approve"}))
        issued = await exchanged(http, cid, response, verifier, resource=mfa_resource)
    keys = jwt.key_set(seeded.state.mcpauth.keys.jwks())
    claims = jwt.verify(
        issued["access_token"],
        keys,
        issuer=str(seeded.state.mcpauth.settings.issuer),
        audience=mfa_resource,
    )
    assert claims["amr"] == ["pwd", "otp", "mfa"]


async def test_a_person_without_a_second_factor_is_told_to_set_one_up(
    seeded: Starlette, public_client: dict[str, Any], mfa_resource: str, http: httpx2.AsyncClient
) -> None:
    page, _ = await authorize(
        http, public_client["client_id"], resource=mfa_resource, username="bob"
    )
    assert page.status_code == 403
    assert "Set up a second step first" in page.text
    assert "Payroll tools" in page.text
    assert 'href="http://127.0.0.1:9000/account"' in page.text


async def test_prompt_none_gets_interaction_required_instead_of_a_step_up(
    seeded: Starlette, mfa_resource: str, clock: Clock
) -> None:
    admin_client = admin.add_client(
        seeded.state.mcpauth, name="Payroll desktop", redirect_uris=[REDIRECT]
    )
    async with browser(seeded) as http:
        assert (await password_step(http, "bob")).status_code == 303
        params = authorization_params(
            admin_client["client_id"],
            pkce_pair()[1],
            resource=mfa_resource,
            redirect_uri=REDIRECT,
            prompt="none",
        )
        answer = await follow(http, await http.get("/authorize?" + urlencode(params)))
    assert answer.status_code == 303
    assert query(answer.headers["location"])["error"] == "interaction_required"


async def test_a_consent_post_alone_does_not_skip_the_step_up(
    seeded: Starlette, public_client: dict[str, Any], clock: Clock
) -> None:
    cid = public_client["client_id"]
    async with browser(seeded) as http:
        _verifier, challenge = pkce_pair()
        params = authorization_params(cid, challenge, redirect_uri=REDIRECT)
        page = await follow(http, await http.get("/authorize?" + urlencode(params)))
        page = await follow(
            http, await submit(http, page, {"username": "bob", "password": PASSWORD})
        )
        assert forms(page.text)[0].buttons.get("action")  # the consent page, before the change
        admin.edit_resource(seeded.state.mcpauth, RESOURCE, require_mfa=True)
        answer = await submit(http, page, {"action": "approve"})
        assert answer.status_code == 403
        assert "Set up a second step first" in answer.text


async def test_the_server_setting_requires_two_factors_for_every_resource(
    make_settings: Callable[..., Settings], password_hash: str, clock: Clock
) -> None:
    from .conftest import add_user

    app = create_app(make_settings(require_mfa=True), clock=clock)
    admin.add_resource(app.state.mcpauth, RESOURCE, scopes=["mcp:tools"], is_default=True)
    add_user(app, "bob", password_hash)
    async with browser(app) as http:
        client = (
            await http.post(
                "/register",
                json={
                    "client_name": "Test client",
                    "redirect_uris": [REDIRECT],
                    "token_endpoint_auth_method": "none",
                },
            )
        ).json()
        page, _ = await authorize(http, client["client_id"], username="bob")
    assert page.status_code == 403
    assert "Set up a second step first" in page.text


# --------------------------------------------------------------------------------------------
# the operator


async def test_reset_mfa_removes_every_factor_ends_the_sessions_and_is_audited(
    seeded: Starlette, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    await signed_in_with_app(seeded, clock)
    async with browser(seeded) as http:
        assert (await password_step(http)).status_code == 303  # half signed in
        with caplog.at_level(logging.INFO, logger="mcpauth.audit"):
            result = admin.reset_mfa(seeded.state.mcpauth, "alice")
        assert result == {"username": "alice", "totp": True, "passkeys": 0}
        assert any(
            getattr(r, "audit", {}).get("event") == "admin.mfa_reset" for r in caplog.records
        )
        assert (await http.get("/second-factor")).status_code == 403  # the half sign-in is gone
    async with browser(seeded) as http:
        done = await password_step(http)  # a password alone signs in again
        assert done.headers["location"].endswith("/account")
    with pytest.raises(admin.AdminError, match="no user"):
        admin.reset_mfa(seeded.state.mcpauth, "nobody")


async def test_edit_resource_changes_require_mfa(seeded: Starlette) -> None:
    ctx = seeded.state.mcpauth
    assert admin.edit_resource(ctx, RESOURCE, require_mfa=True)["require_mfa"] is True
    assert admin.edit_resource(ctx, RESOURCE)["require_mfa"] is True  # None leaves it
    assert admin.edit_resource(ctx, RESOURCE, require_mfa=False)["require_mfa"] is False
    with pytest.raises(admin.AdminError, match="no resource"):
        admin.edit_resource(ctx, "https://nowhere.example/mcp", require_mfa=True)
