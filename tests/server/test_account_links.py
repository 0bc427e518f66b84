"""Linking an upstream identity to an account only by the account's own explicit, recent
action on /account, never because an email matches, and removing one (docs/security.md T41),
in process against the stand-in provider (tests/server/upstream_fake.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import urljoin

import httpx2
import pytest
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from starlette.applications import Starlette

from mcpauth.server.browser.account_links import LINK_MAX_AGE
from mcpauth.server.storage import identities
from mcpauth.server.storage.models import UpstreamIdentity, UpstreamToken, User

from ..conftest import ISSUER
from ..oauth import follow, forms, query
from .conftest import PASSWORD, add_user
from .test_upstream_sign_in import (  # noqa: F401 - fixtures used by name
    Clock,
    clock,
    come_back,
    counts,
    idp,
    make_app,
    other_idp,
    refused,
)
from .upstream_fake import FakeProvider

pytestmark = pytest.mark.anyio


@pytest.fixture
def app(make_app: Callable[..., Starlette], password_hash: str) -> Starlette:  # noqa: F811
    app = make_app(policy={"allowed_email_domains": ["example.com"], "keep_tokens": True})
    add_user(app, "alice", password_hash)
    add_user(app, "bob", password_hash)
    return app


def user_id(app: Starlette, username: str) -> str:
    with app.state.mcpauth.db.read() as session:
        return str(session.execute(select(User.id).where(User.username == username)).scalar_one())


def identities_of(app: Starlette) -> list[tuple[str, str, str]]:
    with app.state.mcpauth.db.read() as session:
        rows = session.execute(select(UpstreamIdentity)).scalars()
        return sorted((r.subject, r.user_id, r.provider_id) for r in rows)


def kept(app: Starlette) -> list[tuple[str, str]]:
    with app.state.mcpauth.db.read() as session:
        return [
            (r.user_id, r.provider_id) for r in session.execute(select(UpstreamToken)).scalars()
        ]


async def account_page(http: httpx2.AsyncClient, username: str = "alice") -> httpx2.Response:
    """/account, signed in with the password when it shows the sign-in page."""
    page = await http.get("/account")
    form = next((f for f in forms(page.text) if "password" in f.fields), None)
    if form is not None:
        values = {**form.fields, "username": username, "password": PASSWORD}
        done = await http.post(urljoin(str(page.url), form.action), data=values)
        assert done.status_code == 303, done.text
        page = await http.get("/account")
    assert page.status_code == 200
    return page


async def press_link(
    http: httpx2.AsyncClient, page: httpx2.Response, provider: str = "idp"
) -> httpx2.Response:
    button = next(f for f in forms(page.text) if f.action.endswith(f"/upstream/{provider}/link"))
    return await http.post(urljoin(str(page.url), button.action), data=button.fields)


async def link(
    http: httpx2.AsyncClient,
    idp: FakeProvider,  # noqa: F811
    **claims: Any,
) -> httpx2.Response:
    """Press "Link Example IdP" on the signed-in account page, sign in at the provider, come
    back."""
    started = await press_link(http, await account_page(http))
    assert started.status_code == 303, started.text
    return await come_back(http, idp.approve(started.headers["location"], **claims))


async def test_a_signed_in_person_links_a_provider_and_then_signs_in_with_it(
    app: Starlette,
    http: httpx2.AsyncClient,
    idp: FakeProvider,  # noqa: F811
) -> None:
    alice = user_id(app, "alice")
    page = await account_page(http)
    assert "Ways to sign in" in page.text
    assert "Username and password" in page.text
    assert "Link Example IdP" in page.text
    back = await link(http, idp)
    assert back.status_code == 303
    assert back.headers["location"] == "http://127.0.0.1:9000/account?linked=idp"
    shown = await follow(http, back)
    assert "Example IdP is linked" in shown.text
    assert "alice@example.com" in shown.text
    assert "Link Example IdP" not in shown.text  # one identity per provider
    assert identities_of(app) == [("alice-0001", alice, "idp")]
    assert kept(app) == [(alice, "idp")]  # keep_tokens: kept for the linked account
    # another browser signs in with the provider alone: the linked account, no new one
    users_before = counts(app)["users"]
    async with httpx2.AsyncClient(transport=http._transport, base_url=str(http.base_url)) as other:
        login = await other.get("/account")
        button = next(f for f in forms(login.text) if f.action.endswith("/upstream/idp/login"))
        started = await other.post(urljoin(str(login.url), button.action), data=button.fields)
        again = await come_back(other, idp.approve(started.headers["location"]))
        assert again.status_code == 303, again.text
        mine = await other.get("/account")
        assert "Username and password" in mine.text  # alice's own account
    assert counts(app)["users"] == users_before


async def test_an_identity_of_another_account_is_never_moved(
    app: Starlette,
    http: httpx2.AsyncClient,
    idp: FakeProvider,  # noqa: F811
) -> None:
    """bob links alice-0001 first; alice's attempt to link it is refused, bob keeps it."""
    bob = user_id(app, "bob")
    async with httpx2.AsyncClient(transport=http._transport, base_url=str(http.base_url)) as b:
        started = await press_link(b, await account_page(b, "bob"))
        assert (await come_back(b, idp.approve(started.headers["location"]))).status_code == 303
    before = counts(app)
    response = await link(http, idp)
    refused(response, 409, "already signs in to another account here", None)
    assert 'href="http://127.0.0.1:9000/account"' in response.text
    assert identities_of(app) == [("alice-0001", bob, "idp")]
    assert counts(app) == before  # nothing added, the pending link taken
    assert kept(app) == [(bob, "idp")]


async def test_a_second_identity_at_the_same_provider_is_refused(
    app: Starlette,
    http: httpx2.AsyncClient,
    idp: FakeProvider,  # noqa: F811
) -> None:
    assert (await link(http, idp)).status_code == 303
    page = await account_page(http)
    assert "Link Example IdP" not in page.text
    # the button is gone, but a form posted from an older page still reaches the callback
    button_page = page.text.replace("/upstream/other/link", "/upstream/idp/link")
    fake = httpx2.Response(200, text=button_page, request=page.request)
    started = await press_link(http, fake)
    response = await come_back(http, idp.approve(started.headers["location"], sub="alice-0002"))
    refused(response, 409, "already linked to another Example IdP account", None)
    assert [s for s, _, _ in identities_of(app)] == ["alice-0001"]


async def test_a_link_is_refused_by_the_provider_s_policy_like_a_sign_in(
    app: Starlette,
    http: httpx2.AsyncClient,
    idp: FakeProvider,  # noqa: F811
) -> None:
    refused(
        await link(http, idp, email="alice@other.example"),
        403,
        "Accounts with an address at other.example can&#39;t sign in",
        None,
    )
    assert identities_of(app) == []


async def test_linking_needs_a_recent_sign_in_at_the_start_and_at_the_callback(
    app: Starlette,
    http: httpx2.AsyncClient,
    idp: FakeProvider,  # noqa: F811
    clock: Clock,  # noqa: F811
) -> None:
    page = await account_page(http)
    clock.now += LINK_MAX_AGE - 100  # still recent: the button is there
    page = await http.get("/account")
    started = await press_link(http, page)
    clock.now += 200  # the person took a while at the provider: no longer recent
    refused(
        await come_back(http, idp.approve(started.headers["location"])),
        403,
        "needs a sign-in in the last 15 minutes",
        None,
    )
    stale = await http.get("/account")
    assert "Link Example IdP" not in stale.text
    assert "sign out and sign in again" in stale.text
    refused(await press_link(http, page), 403, "needs a sign-in in the last 15 minutes", None)
    assert identities_of(app) == []


async def test_the_link_button_needs_its_csrf_token_and_a_signed_in_browser(
    app: Starlette,
    http: httpx2.AsyncClient,
) -> None:
    page = await account_page(http)
    button = next(f for f in forms(page.text) if f.action.endswith("/upstream/idp/link"))
    forged = await http.post(
        urljoin(str(page.url), button.action), data={**button.fields, "csrf_token": "x" * 40}
    )
    assert forged.status_code == 403
    assert "location" not in forged.headers
    async with httpx2.AsyncClient(transport=http._transport, base_url=str(http.base_url)) as anon:
        login = await anon.get("/account")  # its own anonymous session and token
        token = next(f for f in forms(login.text) if "/upstream/idp/login" in f.action)
        other_page = await anon.post(urljoin(str(login.url), button.action), data=token.fields)
        assert other_page.status_code == 403  # a token for another form
        assert "location" not in other_page.headers
    # a copy of the cookie, kept after signing out: its token is good, its session is not
    async with httpx2.AsyncClient(
        transport=http._transport, base_url=str(http.base_url), cookies=http.cookies
    ) as copy:
        logout = next(f for f in forms(page.text) if f.action.endswith("/account/logout"))
        assert (
            await http.post(urljoin(str(page.url), logout.action), data=logout.fields)
        ).status_code == 303
        signed_out = await copy.post(urljoin(str(page.url), button.action), data=button.fields)
        refused(signed_out, 403, "Sign in to your account before linking", None)
    assert counts(app)["upstream_logins"] == 0


async def test_removing_a_provider_unless_it_is_the_last_way_in(
    app: Starlette,
    http: httpx2.AsyncClient,
    idp: FakeProvider,  # noqa: F811
) -> None:
    await link(http, idp)
    page = await account_page(http)
    remove = next(f for f in forms(page.text) if f.action.endswith("/account/unlink"))
    assert remove.fields["provider_id"] == "idp"
    done = await http.post(urljoin(str(page.url), remove.action), data=remove.fields)
    assert done.status_code == 303
    assert done.headers["location"].endswith("/account?unlinked=idp")
    assert "no longer signs you in" in (await follow(http, done)).text
    assert identities_of(app) == []
    assert kept(app) == []  # the tokens kept from it went with it
    forged = await http.post(
        urljoin(str(page.url), remove.action), data={**remove.fields, "csrf_token": "x" * 40}
    )
    assert forged.status_code == 403
    # an account made by a provider has no password: its only identity stays
    async with httpx2.AsyncClient(transport=http._transport, base_url=str(http.base_url)) as fed:
        login = await fed.get("/account")
        button = next(f for f in forms(login.text) if f.action.endswith("/upstream/idp/login"))
        started = await fed.post(urljoin(str(login.url), button.action), data=button.fields)
        await come_back(fed, idp.approve(started.headers["location"], sub="carol-7"))
        mine = await fed.get("/account")
        assert "Username and password" not in mine.text
        form = next(f for f in forms(mine.text) if f.action.endswith("/account/unlink"))
        last = await fed.post(urljoin(str(mine.url), form.action), data=form.fields)
        refused(last, 409, "only way you can sign in", None)
    assert [s for s, _, _ in identities_of(app)] == ["carol-7"]


async def test_the_link_asks_the_provider_to_authenticate_the_person_again(
    app: Starlette,
    http: httpx2.AsyncClient,
) -> None:
    started = await press_link(http, await account_page(http))
    assert query(started.headers["location"])["prompt"] == "login"


async def test_removing_needs_a_recent_sign_in_too(
    app: Starlette,
    http: httpx2.AsyncClient,
    idp: FakeProvider,  # noqa: F811
    clock: Clock,  # noqa: F811
) -> None:
    await link(http, idp)
    page = await account_page(http)
    remove = next(f for f in forms(page.text) if f.action.endswith("/account/unlink"))
    clock.now += LINK_MAX_AGE + 1
    later = await http.get("/account")
    assert "Remove Example IdP" not in later.text
    assert "sign out and sign in again" in later.text
    refused(
        await http.post(urljoin(str(page.url), remove.action), data=remove.fields),
        403,
        "Removing a way to sign in needs a sign-in in the last 15 minutes",
        None,
    )
    assert len(identities_of(app)) == 1


async def test_a_removed_identity_never_reaches_the_account_it_made_again(
    app: Starlette,
    http: httpx2.AsyncClient,
    idp: FakeProvider,  # noqa: F811
    other_idp: FakeProvider,  # noqa: F811
) -> None:
    """Carol's account was made by Example IdP; she links Other IdP and removes Example IdP.
    Signing in through Example IdP as carol-7 then makes a new account: it does not find hers
    by the name it once gave it."""
    carol = await provider_sign_in(app, http, idp, "idp", sub="carol-7")
    started = await press_link(http, await http.get("/account"), "other")
    assert (
        await come_back(http, other_idp.approve(started.headers["location"]), "other")
    ).status_code == 303
    page = await http.get("/account")
    remove = next(
        f
        for f in forms(page.text)
        if f.action.endswith("/unlink") and f.fields["provider_id"] == "idp"
    )
    assert (
        await http.post(urljoin(str(page.url), remove.action), data=remove.fields)
    ).status_code == 303
    assert identities_of(app) == [("alice-0001", carol, "other")]
    async with httpx2.AsyncClient(transport=http._transport, base_url=str(http.base_url)) as again:
        someone = await provider_sign_in(app, again, idp, "idp", sub="carol-7")
    assert someone != carol
    assert sorted(identities_of(app)) == sorted(
        [("alice-0001", carol, "other"), ("carol-7", someone, "idp")]
    )


def test_only_configured_providers_count_as_a_way_in_and_one_identity_per_issuer(
    app: Starlette,
) -> None:
    ctx = app.state.mcpauth
    with ctx.db.write() as session:
        claims = identities.Claims("https://idp.example", "dave-1", None, False, None)
        dave = identities.sign_in(session, claims, "idp", 1).user_id
        session.add(
            UpstreamIdentity(
                issuer="https://gone.example", subject="dave-2", user_id=dave,
                provider_id="gone", created_at=1, last_login_at=1,
            )
        )  # fmt: skip
    with pytest.raises(identities.LastWayIn), ctx.db.write() as session:
        identities.unlink(
            session, dave, "idp", {p.id for p in ctx.upstream}, passwords_sign_in=True
        )
    with pytest.raises(IntegrityError), ctx.db.write() as session:  # the unique index
        session.add(
            UpstreamIdentity(
                issuer="https://idp.example", subject="dave-3", user_id=dave,
                provider_id="idp", created_at=1, last_login_at=1,
            )
        )  # fmt: skip
    assert len([i for i in identities_of(app) if i[1] == dave]) == 2


async def test_with_local_accounts_off_a_password_is_no_way_in(
    make_app: Callable[..., Starlette],  # noqa: F811
    password_hash: str,
    idp: FakeProvider,  # noqa: F811
) -> None:
    """Erin had a password before the operator turned local accounts off, then linked Example
    IdP. Her password no longer signs her in, so removing Example IdP would leave her no way
    back to this account (her next sign-in would make a new, empty one): refused."""
    app = make_app(local_accounts=False)
    erin = add_user(app, "erin", password_hash)
    with app.state.mcpauth.db.write() as session:
        session.add(
            UpstreamIdentity(
                issuer=idp.issuer, subject="erin-1", user_id=erin, provider_id="idp",
                created_at=1, last_login_at=1,
            )
        )  # fmt: skip
    transport = httpx2.ASGITransport(app=app, client=("203.0.113.9", 50000))
    async with httpx2.AsyncClient(transport=transport, base_url=ISSUER) as http:
        assert await provider_sign_in(app, http, idp, "idp", sub="erin-1") == erin
        page = await http.get("/account")
        assert "Username and password" not in page.text
        remove = next(f for f in forms(page.text) if f.action.endswith("/account/unlink"))
        last = await http.post(urljoin(str(page.url), remove.action), data=remove.fields)
        refused(last, 409, "only way you can sign in", None)
    assert identities_of(app) == [("erin-1", erin, "idp")]
    with pytest.raises(identities.LastWayIn), app.state.mcpauth.db.write() as session:
        identities.unlink(session, erin, "idp", {"idp"}, passwords_sign_in=False)
    with app.state.mcpauth.db.write() as session:  # the same account, local accounts on
        assert identities.unlink(session, erin, "idp", {"idp"}, passwords_sign_in=True) == 1


async def provider_sign_in(
    app: Starlette, http: httpx2.AsyncClient, fake: FakeProvider, provider: str, **claims: Any
) -> str:
    """Sign in on /account through a provider alone; the account's id."""
    login = await http.get("/account")
    button = next(f for f in forms(login.text) if f.action.endswith(f"/upstream/{provider}/login"))
    started = await http.post(urljoin(str(login.url), button.action), data=button.fields)
    back = await come_back(http, fake.approve(started.headers["location"], **claims), provider)
    assert back.status_code == 303, back.text
    with app.state.mcpauth.db.read() as session:
        row = session.execute(
            select(UpstreamIdentity).where(UpstreamIdentity.subject == claims["sub"])
        ).scalar_one()
    return str(row.user_id)
