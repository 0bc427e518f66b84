"""Passkeys (docs/security.md T48): made on the account page for this issuer's host and
origin, used to sign in without a name, as a second factor after a password, and removed
after a recent sign-in. An assertion made for another origin or RP ID, replayed, with a
counter that does not grow, or answering another session's or an old challenge is refused,
and so is anything malformed (a page, never a 500)."""

from __future__ import annotations

import html
import json
import logging
from collections.abc import Callable
from typing import Any

import httpx2
import pytest
from sqlalchemy import update
from starlette.applications import Starlette

from mcpauth import jwt
from mcpauth.server import Settings, admin, create_app
from mcpauth.server.browser.account_links import LINK_MAX_AGE
from mcpauth.server.browser.passkey_ceremonies import CHALLENGE_TTL
from mcpauth.server.storage import passkeys
from mcpauth.server.storage.models import User

from ..oauth import register_public_client
from .conftest import RESOURCE, add_user
from .mfa_support import Clock, browser, password_step, post_form, turn_on_app
from .soft_authenticator import SoftAuthenticator, b64, page_form, page_options
from .test_second_factor import authorize, exchanged, says, signed_in_as
from .test_token import REDIRECT

pytestmark = pytest.mark.anyio
ISSUER = "http://localhost:9000"  # a host name: browsers take no IP address as an RP ID


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def app(make_settings: Callable[..., Settings], clock: Clock, password_hash: str) -> Starlette:
    app = create_app(make_settings(issuer=ISSUER), clock=clock)
    admin.add_resource(
        app.state.mcpauth,
        RESOURCE,
        scopes=["mcp:tools"],
        default_scopes=["mcp:tools"],
        is_default=True,
    )
    add_user(app, "alice", password_hash)
    return app


@pytest.fixture
def authenticator() -> SoftAuthenticator:
    return SoftAuthenticator(origin=ISSUER)


async def add_passkey(app: Starlette, authenticator: SoftAuthenticator) -> None:
    """Alice signs in with her password and adds the authenticator's passkey."""
    async with browser(app, ISSUER) as http:
        assert (await password_step(http)).status_code == 303
        page = await http.get("/account")
        made = await post_passkey(
            http, page, "create", authenticator.create(page_options(page.text, "create"))
        )
        assert made.status_code == 303, made.text
        assert made.headers["location"].endswith("notice=passkey-added")


async def post_passkey(
    http: httpx2.AsyncClient, page: httpx2.Response, kind: str, credential: str
) -> httpx2.Response:
    form = page_form(page.text, kind)
    return await http.post(form["action"], data={**form["fields"], "credential": credential})


async def sign_in_with(
    http: httpx2.AsyncClient, authenticator: SoftAuthenticator, **wrong: Any
) -> httpx2.Response:
    page = await http.get("/account")
    options = page_options(page.text, "get")
    return await post_passkey(http, page, "get", authenticator.get(options, **wrong))


def refused(response: httpx2.Response) -> bool:
    return response.status_code == 400 and says(response, "The passkey didn't work")


@pytest.fixture
def reasons(caplog: pytest.LogCaptureFixture) -> Callable[[], str]:
    """Why the server refused passkeys, as it logged it."""
    caplog.set_level(logging.WARNING, logger="mcpauth.passkeys")
    return lambda: " ".join(r.getMessage() for r in caplog.records if r.name == "mcpauth.passkeys")


# --------------------------------------------------------------------------------------------
# adding one


async def test_the_registration_options_bind_the_passkey_to_the_issuers_host(
    app: Starlette, http: httpx2.AsyncClient
) -> None:
    async with browser(app, ISSUER) as http:
        assert (await password_step(http)).status_code == 303
        page = await http.get("/account")
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert "/passkeys.js" in page.text
    options = json.loads(page_options(page.text, "create"))
    assert options["rp"] == {"id": "localhost", "name": "mcpauth"}
    assert options["authenticatorSelection"]["residentKey"] == "required"
    assert options["authenticatorSelection"]["userVerification"] == "preferred"
    alice = admin.list_users(app.state.mcpauth)[0]["id"]
    assert options["user"]["id"] == b64(alice.encode())  # the opaque id, no personal data
    assert options["attestation"] == "none"


async def test_a_registration_for_another_origin_or_rp_is_refused(
    app: Starlette, authenticator: SoftAuthenticator
) -> None:
    async with browser(app, ISSUER) as http:
        assert (await password_step(http)).status_code == 303
        for wrong in ({"origin": "https://evil.example"}, {"rp_id": "evil.example"}):
            page = await http.get("/account")
            made = await post_passkey(
                http,
                page,
                "create",
                authenticator.create(page_options(page.text, "create"), **wrong),
            )
            assert made.status_code == 400
            assert says(made, "The passkey wasn't added")
    with app.state.mcpauth.db.read() as session:
        assert passkeys.count(session, admin.list_users(app.state.mcpauth)[0]["id"]) == 0


async def test_adding_a_passkey_needs_a_recent_sign_in(
    app: Starlette, authenticator: SoftAuthenticator, clock: Clock
) -> None:
    async with browser(app, ISSUER) as http:
        assert (await password_step(http)).status_code == 303
        page = await http.get("/account")
        credential = authenticator.create(page_options(page.text, "create"))
        clock.now += LINK_MAX_AGE + 1
        assert 'data-passkey="create"' not in (await http.get("/account")).text
        late = await post_passkey(http, page, "create", credential)
        assert late.status_code == 403


# --------------------------------------------------------------------------------------------
# signing in with one


async def test_a_passkey_signs_in_without_a_name_and_tokens_say_so(
    app: Starlette, authenticator: SoftAuthenticator
) -> None:
    await add_passkey(app, authenticator)
    async with browser(app, ISSUER) as http:
        page = await http.get("/account")
        assert json.loads(page_options(page.text, "get"))["allowCredentials"] == []
        done = await sign_in_with(http, authenticator)
        assert done.status_code == 303
        assert done.headers["location"].endswith("/account")
        assert signed_in_as(await http.get("/account"))
        client = await register_public_client(http, REDIRECT)
        response, verifier = await authorize(http, client["client_id"])
        issued = await exchanged(http, client["client_id"], response, verifier)
    assert jwt.unverified_claims(issued["access_token"])["amr"] == ["hwk", "user", "mfa"]


async def test_without_user_verification_a_passkey_is_one_factor(
    app: Starlette, clock: Clock
) -> None:
    lazy = SoftAuthenticator(origin=ISSUER, user_verified=False)
    await add_passkey(app, lazy)
    async with browser(app, ISSUER) as http:
        assert (await sign_in_with(http, lazy)).status_code == 303
        client = await register_public_client(http, REDIRECT)
        response, verifier = await authorize(http, client["client_id"])
        issued = await exchanged(http, client["client_id"], response, verifier)
    assert jwt.unverified_claims(issued["access_token"])["amr"] == ["hwk", "user"]


@pytest.mark.parametrize(
    ("wrong", "reason"),
    [
        ({"origin": "https://evil.example"}, "Unexpected client data origin"),
        ({"origin": "http://localhost:9001"}, "Unexpected client data origin"),  # another port
        ({"rp_id": "evil.example"}, "Unexpected RP ID hash"),
    ],
)
async def test_an_assertion_for_another_origin_or_rp_is_refused(
    app: Starlette,
    authenticator: SoftAuthenticator,
    wrong: dict[str, str],
    reason: str,
    reasons: Callable[[], str],
) -> None:
    await add_passkey(app, authenticator)
    async with browser(app, ISSUER) as http:
        assert refused(await sign_in_with(http, authenticator, **wrong))
        assert not signed_in_as(await http.get("/account"))
    assert reason in reasons()


async def test_a_replayed_assertion_is_refused(app: Starlette, reasons: Callable[[], str]) -> None:
    # no counter to catch it (as synced passkeys report 0): the challenge's single use does
    authenticator = SoftAuthenticator(origin=ISSUER, counting=False)
    await add_passkey(app, authenticator)
    async with browser(app, ISSUER) as http:
        page = await http.get("/account")
        cookies = dict(http.cookies)  # the session the challenge is bound to
        assertion = authenticator.get(page_options(page.text, "get"))
        assert (await post_passkey(http, page, "get", assertion)).status_code == 303
    async with browser(app, ISSUER) as thief:  # the same post, with a copy of that cookie
        thief.cookies.update(cookies)
        assert refused(await post_passkey(thief, page, "get", assertion))
        assert not signed_in_as(await thief.get("/account"))
    assert "the challenge was used before" in reasons()
    async with browser(app, ISSUER) as other:  # or from a browser of its own
        page = await other.get("/account")
        assert refused(await post_passkey(other, page, "get", assertion))
    assert "not one this session was given" in reasons()


async def test_a_counter_that_does_not_grow_is_refused(
    app: Starlette, authenticator: SoftAuthenticator, reasons: Callable[[], str]
) -> None:
    authenticator.counter = 5
    await add_passkey(app, authenticator)
    async with browser(app, ISSUER) as http:
        assert (await sign_in_with(http, authenticator)).status_code == 303  # 6
    for counter in (6, 3):  # the same count again, then one that went back: a clone
        async with browser(app, ISSUER) as http:
            assert refused(await sign_in_with(http, authenticator, counter=counter))
    assert "was not greater than current count of 6" in reasons()
    async with browser(app, ISSUER) as http:
        assert (await sign_in_with(http, authenticator, counter=7)).status_code == 303


async def test_an_authenticator_that_keeps_no_counter_is_accepted(app: Starlette) -> None:
    synced = SoftAuthenticator(origin=ISSUER, counting=False)  # as synced passkeys report 0
    await add_passkey(app, synced)
    for _ in range(2):
        async with browser(app, ISSUER) as http:
            assert (await sign_in_with(http, synced)).status_code == 303


async def test_a_challenge_of_another_session_or_too_old_is_refused(
    app: Starlette, authenticator: SoftAuthenticator, clock: Clock
) -> None:
    await add_passkey(app, authenticator)
    async with browser(app, ISSUER) as first, browser(app, ISSUER) as second:
        theirs = page_options((await first.get("/account")).text, "get")
        page = await second.get("/account")
        assert refused(await post_passkey(second, page, "get", authenticator.get(theirs)))
        mine = page_options(page.text, "get")
        clock.now += CHALLENGE_TTL + 1
        assert refused(await post_passkey(second, page, "get", authenticator.get(mine)))


async def test_a_passkey_of_no_account_here_is_refused(app: Starlette) -> None:
    stranger = SoftAuthenticator(origin=ISSUER)
    stranger.user_handle = b"someone"
    async with browser(app, ISSUER) as http:
        assert refused(await sign_in_with(http, stranger))


async def test_a_forged_signature_is_refused(
    app: Starlette, authenticator: SoftAuthenticator
) -> None:
    await add_passkey(app, authenticator)
    impostor = SoftAuthenticator(origin=ISSUER, credential_id=authenticator.credential_id)
    impostor.user_handle, impostor.counter = authenticator.user_handle, 100
    async with browser(app, ISSUER) as http:
        assert refused(await sign_in_with(http, impostor))


def _assertion_with(**changes: Any) -> Callable[[str], str]:
    def change(valid: str) -> str:
        document = json.loads(valid)
        for path, value in changes.items():
            target = document
            *parents, last = path.split(".")
            for key in parents:
                target = target[key]
            target[last] = value
        return json.dumps(document)

    return change


MALFORMED: list[Callable[[str], str]] = [
    lambda valid: "",
    lambda valid: "{",
    lambda valid: "[]",
    lambda valid: '{"response": 1}',
    lambda valid: valid.replace('"public-key"', '"password"'),
    lambda valid: "x" * 20_000,
    _assertion_with(**{"response.clientDataJSON": "!!!"}),
    _assertion_with(**{"response.clientDataJSON": b64(b"not json")}),
    _assertion_with(**{"response.authenticatorData": b64(b"short")}),
    _assertion_with(**{"response.signature": "AA"}),
    _assertion_with(**{"response.userHandle": "%%%"}),
    _assertion_with(rawId="A" * 2000, id="A" * 2000),
    _assertion_with(rawId=12),
    _assertion_with(id="other"),
]


@pytest.mark.parametrize("mangle", MALFORMED)
async def test_a_malformed_assertion_gets_a_page_never_a_500(
    app: Starlette, authenticator: SoftAuthenticator, mangle: Callable[[str], str]
) -> None:
    await add_passkey(app, authenticator)
    async with browser(app, ISSUER) as http:
        page = await http.get("/account")
        valid = authenticator.get(page_options(page.text, "get"))
        answer = await post_passkey(http, page, "get", mangle(valid))
        assert answer.status_code in (400, 413), answer.text
        assert not signed_in_as(await http.get("/account"))


async def test_wrong_passkeys_are_throttled_by_address(
    make_settings: Callable[..., Settings], clock: Clock, password_hash: str
) -> None:
    app = create_app(make_settings(issuer=ISSUER, login_max_failures=1), clock=clock)
    stranger = SoftAuthenticator(origin=ISSUER)
    async with browser(app, ISSUER) as http:
        for _ in range(4):  # the address limit: four times an account's
            assert refused(await sign_in_with(http, stranger))
        assert (await sign_in_with(http, stranger)).status_code == 429


# --------------------------------------------------------------------------------------------
# as a second factor, and removing one


async def test_after_a_password_a_passkey_is_the_second_step(
    app: Starlette, authenticator: SoftAuthenticator
) -> None:
    await add_passkey(app, authenticator)
    async with browser(app, ISSUER) as http:
        step = await password_step(http)
        assert step.headers["location"].endswith("/second-factor")
        page = await http.get("/second-factor")
        options = json.loads(page_options(page.text, "get"))
        assert [c["id"] for c in options["allowCredentials"]] == [b64(authenticator.credential_id)]
        assert "/second-factor/login" not in page.text  # no app: no code form
        done = await post_passkey(http, page, "get", authenticator.get(json.dumps(options)))
        assert done.status_code == 303
        assert signed_in_as(await http.get("/account"))


async def test_only_the_accounts_own_passkey_is_its_second_step(
    app: Starlette, password_hash: str, authenticator: SoftAuthenticator
) -> None:
    await add_passkey(app, authenticator)  # alice's
    add_user(app, "mallory", password_hash)
    mallorys = SoftAuthenticator(origin=ISSUER)
    async with browser(app, ISSUER) as http:
        assert (await password_step(http, "mallory")).status_code == 303
        page = await http.get("/account")
        made = await post_passkey(
            http, page, "create", mallorys.create(page_options(page.text, "create"))
        )
        assert made.status_code == 303
    async with browser(app, ISSUER) as http:  # alice's password, mallory's passkey
        page = await http.get((await password_step(http)).headers["location"])
        options = page_options(page.text, "get")
        answer = await post_passkey(http, page, "get", mallorys.get(options))
        assert answer.status_code == 200
        assert says(answer, "That passkey didn't work")
        assert not signed_in_as(await http.get("/account"))


async def test_removing_a_passkey_needs_a_recent_sign_in(
    app: Starlette, authenticator: SoftAuthenticator, clock: Clock
) -> None:
    await add_passkey(app, authenticator)
    async with browser(app, ISSUER) as http:
        assert (await sign_in_with(http, authenticator)).status_code == 303
        page = await http.get("/account")
        clock.now += LINK_MAX_AGE + 1
        stale = await post_form(http, page, "/account/passkeys/remove")
        assert stale.status_code == 403
        clock.now -= LINK_MAX_AGE + 1
        removed = await post_form(http, page, "/account/passkeys/remove")
        assert removed.headers["location"].endswith("notice=passkey-removed")
    async with browser(app, ISSUER) as http:
        assert refused(await sign_in_with(http, authenticator))


async def test_an_issuer_on_an_ip_address_offers_no_passkeys(
    make_settings: Callable[..., Settings],
) -> None:
    app = create_app(make_settings())  # http://127.0.0.1:9000
    async with browser(app) as http:
        page = await http.get("/account")
    assert "data-passkey" not in page.text
    assert "script-src" not in page.headers["content-security-policy"]


async def test_the_script_is_served_as_javascript(app: Starlette) -> None:
    async with browser(app, ISSUER) as http:
        script = await http.get("/passkeys.js")
    assert script.status_code == 200
    assert script.headers["content-type"].startswith("text/javascript")
    assert script.headers["x-content-type-options"] == "nosniff"
    assert "navigator.credentials" in script.text
    assert html.escape("<") not in script.text


async def test_the_last_way_in_is_not_removed(
    app: Starlette, authenticator: SoftAuthenticator
) -> None:
    await add_passkey(app, authenticator)
    ctx = app.state.mcpauth
    with ctx.db.write() as session:  # an account without a password (made by a provider)
        session.execute(update(User).values(password_hash="!"))
    async with browser(app, ISSUER) as http:
        assert (await sign_in_with(http, authenticator)).status_code == 303
        page = await http.get("/account")
        kept = await post_form(http, page, "/account/passkeys/remove")
        assert kept.status_code == 409
        assert says(kept, "This passkey is the only way you can sign in")
    async with browser(app, ISSUER) as http:
        assert (await sign_in_with(http, authenticator)).status_code == 303


async def test_a_passkey_does_not_second_itself_even_over_a_challenge_kept_from_before(
    app: Starlette, password_hash: str, clock: Clock
) -> None:
    """Alice has an app and a passkey without user verification; Mallory holds the key and
    has an account of her own with a passkey. A second-step challenge shown for Mallory's
    sign-in cannot complete Alice's passkey sign-in with the same key: her app is asked."""
    alices = SoftAuthenticator(origin=ISSUER, user_verified=False)  # a key without a PIN
    async with browser(app, ISSUER) as http:
        assert (await password_step(http)).status_code == 303
        page = await http.get("/account")
        made = await post_passkey(
            http, page, "create", alices.create(page_options(page.text, "create"))
        )
        assert made.status_code == 303
        await turn_on_app(http, clock)
    add_user(app, "mallory", password_hash)
    mallorys = SoftAuthenticator(origin=ISSUER)
    async with browser(app, ISSUER) as http:
        assert (await password_step(http, "mallory")).status_code == 303
        page = await http.get("/account")
        made = await post_passkey(
            http, page, "create", mallorys.create(page_options(page.text, "create"))
        )
        assert made.status_code == 303
    clock.now += 30
    async with browser(app, ISSUER) as http:
        assert (await password_step(http, "mallory")).status_code == 303
        kept = await http.get("/second-factor")  # a challenge for Mallory's second step
        step = await sign_in_with(http, alices)  # Alice's key, without a name
        assert step.headers["location"].endswith("/second-factor")
        offered = await http.get("/second-factor")
        assert "data-passkey" not in offered.text  # her app is what completes it
        options = json.loads(page_options(kept.text, "get"))
        options["allowCredentials"] = []
        answer = await post_passkey(http, kept, "get", alices.get(json.dumps(options)))
        assert answer.status_code == 200
        assert not signed_in_as(await http.get("/account"))


async def test_a_passkey_post_nested_too_deep_is_refused_in_words(app: Starlette) -> None:
    async with browser(app, ISSUER) as http:
        page = await http.get("/account")
        answer = await post_passkey(http, page, "get", "[" * 3000)
    assert refused(answer), answer.text


async def test_an_assertion_whose_id_is_not_base64url_is_refused_in_words(
    app: Starlette, authenticator: SoftAuthenticator
) -> None:
    """A genuine assertion over a fresh challenge, its id changed to hold a NUL (which
    PostgreSQL refuses in text): refused before any lookup, never a 500."""
    await add_passkey(app, authenticator)
    async with browser(app, ISSUER) as http:
        page = await http.get("/account")
        answer = json.loads(authenticator.get(page_options(page.text, "get")))
        answer["id"] = answer["rawId"] = "a\u0000b"
        posted = await post_passkey(http, page, "get", json.dumps(answer))
    assert refused(posted), posted.text


@pytest.mark.every_engine  # concurrency: row locks differ between the engines
def test_two_removals_at_once_leave_a_passwordless_account_its_last_passkey(
    app: Starlette, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two requests remove the two passkeys of an account that has nothing else: each counts
    the passkeys and deletes one. Decided one at a time (the user's row locked), the second
    sees the last one and is refused; counted side by side, both would delete."""
    import contextlib
    import threading

    from mcpauth.server.browser import account_security
    from mcpauth.server.storage import identities
    from mcpauth.server.storage.models import Passkey

    ctx = app.state.mcpauth
    carol = add_user(app, "carol", "!")  # signs in with passkeys only
    with ctx.db.write() as session:
        for name in ("a", "b"):
            session.add(
                Passkey(credential_id=name, user_id=carol, public_key="k", created_at=ctx.now())
            )
    side_by_side = threading.Barrier(2, timeout=1.0)
    counted = passkeys.count

    def count_together(session: Any, user_id: str) -> int:
        found = counted(session, user_id)
        # both requests hold their count here, if they can; else the other one waits for
        # this one's transaction and the two are decided in turn
        with contextlib.suppress(threading.BrokenBarrierError):
            side_by_side.wait()
        return found

    monkeypatch.setattr(passkeys, "count", count_together)
    outcomes: list[object] = []

    def remove(credential_id: str) -> None:
        try:
            outcomes.append(account_security._remove_passkey(ctx, carol, credential_id))
        except identities.LastWayIn as refused:
            outcomes.append(refused)

    threads = [threading.Thread(target=remove, args=(name,)) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    with ctx.db.read() as session:
        assert counted(session, carol) == 1
    assert sorted(type(o).__name__ for o in outcomes) == ["LastWayIn", "bool"]
