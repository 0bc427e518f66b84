"""Sign-in through an upstream OpenID provider, in process, against a stand-in provider
(tests/server/upstream_fake.py): just-in-time accounts keyed by (issuer, subject) and never by
email, and every refusal at the upstream boundary — forged, replayed, expired or misdelivered
callbacks, mix-up between providers, RFC 9207 ``iss``, upstream errors and cancellations, a
provider that is down, slow, oversized or refuses the code, bad ID tokens, policy — a plain
page with a way back, nothing stored, no account (docs/security.md T34-T36, T38)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode, urljoin

import httpx2
import jwt as pyjwt
import pytest
from sqlalchemy import func, select
from starlette.applications import Starlette

from mcpauth.server import Settings, admin, create_app
from mcpauth.server.config import UpstreamProvider
from mcpauth.server.storage.models import (
    BrowserSessionRecord,
    UpstreamIdentity,
    UpstreamLogin,
    User,
)
from mcpauth.server.storage.prune import prune
from mcpauth.server.tokens.grants import jwt_bearer

from ..conftest import ISSUER
from ..oauth import (
    authorization_params,
    follow,
    forms,
    pkce_pair,
    query,
    register_public_client,
)
from .conftest import RESOURCE, add_user
from .mfa_support import code, post_form, turn_on_app
from .upstream_fake import FakeProvider

pytestmark = pytest.mark.anyio

SECRET_ENV = "MCPAUTH_TEST_UPSTREAM_SECRET"
OTHER_SECRET_ENV = "MCPAUTH_TEST_OTHER_UPSTREAM_SECRET"
CALLBACK = f"{ISSUER}/upstream/idp/callback"
APP_REDIRECT = "http://127.0.0.1:5555/callback"  # the MCP client's own


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def idp(clock: Clock) -> FakeProvider:
    return FakeProvider(clock=clock)


@pytest.fixture
def other_idp(clock: Clock) -> FakeProvider:
    return FakeProvider(
        issuer="https://other-idp.example",
        client_id="mcpauth-at-other",
        client_secret="other-secret-0123456789",
        clock=clock,
    )


def provider_settings(fake: FakeProvider, provider_id: str, env: str, **extra: Any) -> Any:
    return UpstreamProvider(
        id=provider_id,
        name="Example IdP" if provider_id == "idp" else "Other IdP",
        issuer=fake.issuer,
        client_id=fake.client_id,
        client_secret_env=env,
        **extra,
    )


@pytest.fixture
def make_app(
    make_settings: Callable[..., Settings],
    idp: FakeProvider,
    other_idp: FakeProvider,
    clock: Clock,
    monkeypatch: pytest.MonkeyPatch,
) -> Callable[..., Starlette]:
    monkeypatch.setenv(SECRET_ENV, idp.client_secret)
    monkeypatch.setenv(OTHER_SECRET_ENV, other_idp.client_secret)

    def make(*, policy: dict[str, Any] | None = None, **overrides: Any) -> Starlette:
        providers = (
            provider_settings(idp, "idp", SECRET_ENV, **(policy or {})),
            provider_settings(other_idp, "other", OTHER_SECRET_ENV),
        )
        app = create_app(make_settings(upstream=providers, **overrides), clock=clock)
        ctx = app.state.mcpauth

        async def route(request: httpx2.Request) -> httpx2.Response:
            fake = other_idp if request.url.host == "other-idp.example" else idp
            return await fake.handle(request)

        ctx.upstream.transport = httpx2.MockTransport(route)
        admin.add_resource(
            ctx,
            RESOURCE,
            name="Demo MCP server",
            scopes=["mcp:tools"],
            default_scopes=["mcp:tools"],
            is_default=True,
        )
        return app

    return make


@pytest.fixture
def app(make_app: Callable[..., Starlette]) -> Starlette:
    return make_app(policy={"allowed_email_domains": ["example.com"]})


async def browser_for(app: Starlette) -> httpx2.AsyncClient:
    transport = httpx2.ASGITransport(app=app, client=("203.0.113.7", 50000))
    return httpx2.AsyncClient(transport=transport, base_url=ISSUER)


@pytest.fixture
async def client_id(http: httpx2.AsyncClient) -> str:
    response = await register_public_client(http, APP_REDIRECT)
    return str(response["client_id"])


async def sign_in_page(
    http: httpx2.AsyncClient, client_id: str, challenge: str | None = None
) -> httpx2.Response:
    params = authorization_params(client_id, challenge or pkce_pair()[1], resource=RESOURCE)
    page = await follow(http, await http.get("/authorize?" + urlencode(params)))
    assert page.status_code == 200, page.text
    return page


async def press(
    http: httpx2.AsyncClient, page: httpx2.Response, provider: str = "idp"
) -> httpx2.Response:
    """Press a provider's button on a sign-in page."""
    button = next(f for f in forms(page.text) if f.action.endswith(f"/upstream/{provider}/login"))
    return await http.post(urljoin(str(page.url), button.action), data=button.fields)


async def start(http: httpx2.AsyncClient, client_id: str, provider: str = "idp") -> tuple[str, str]:
    """The interaction page's URL and the authorization URL the button sends the browser to."""
    page = await sign_in_page(http, client_id)
    response = await press(http, page, provider)
    assert response.status_code == 303, response.text
    return str(page.url), response.headers["location"]


async def come_back(
    http: httpx2.AsyncClient, params: dict[str, str], provider: str = "idp"
) -> httpx2.Response:
    return await http.get(f"/upstream/{provider}/callback?" + urlencode(params))


async def approve_and_redeem(
    http: httpx2.AsyncClient,
    consent: httpx2.Response,
    client_id: str,
    verifier: str,
    resource: str = RESOURCE,
) -> dict[str, Any]:
    """Approve on the consent page, then redeem the code as the application: the token
    response."""
    approve = next(f for f in forms(consent.text) if f.buttons.get("action"))
    done = await http.post(
        urljoin(str(consent.url), approve.action), data={**approve.fields, "action": "approve"}
    )
    token = await http.post(
        "/token",
        data={
            "grant_type": "authorization_code", "code": query(done.headers["location"])["code"],
            "client_id": client_id, "redirect_uri": APP_REDIRECT, "code_verifier": verifier,
            "resource": resource,
        },
    )  # fmt: skip
    assert token.status_code == 200, token.text
    return dict(token.json())


def counts(app: Starlette) -> dict[str, int]:
    with app.state.mcpauth.db.read() as session:
        return {
            model.__tablename__: int(
                session.execute(select(func.count()).select_from(model)).scalar_one()
            )
            for model in (User, UpstreamIdentity, UpstreamLogin)
        }


def refused(
    response: httpx2.Response, status: int, words: str, back: str | None, code: str | None = None
) -> None:
    """A plain page (never a redirect), the words, the way back to the sign-in page, and the
    error code it shows for support."""
    if code is not None:
        assert f"<code>{code}</code>" in response.text
    assert response.status_code == status, response.text
    assert "location" not in response.headers
    assert response.headers["content-type"].startswith("text/html")
    assert words in response.text, response.text
    if back is not None:
        assert f'href="{back}"' in response.text
        assert "Back to sign-in" in response.text


# --------------------------------------------------------------------------------------------
# the way in


async def test_the_button_sends_the_browser_to_the_provider_with_pkce_nonce_and_bound_state(
    app: Starlette, http: httpx2.AsyncClient, client_id: str
) -> None:
    page = await sign_in_page(http, client_id)
    assert "Continue with Example IdP" in page.text
    assert "Continue with Other IdP" in page.text
    assert 'name="password"' in page.text  # local accounts on by default
    interaction, url = await start(http, client_id)
    assert url.startswith("https://idp.example/authorize?")
    params = query(url)
    assert params["response_type"] == "code"
    assert params["client_id"] == "mcpauth-client"
    assert params["redirect_uri"] == CALLBACK
    assert params["scope"] == "openid email profile"
    assert params["code_challenge_method"] == "S256"
    assert len(params["code_challenge"]) == 43
    assert len(params["nonce"]) >= 43
    assert params["nonce"] not in params["state"]
    assert params["state"].startswith(interaction.rsplit("/", 1)[1] + ".")
    with app.state.mcpauth.db.read() as session:
        (login,) = session.execute(select(UpstreamLogin)).scalars()
    assert login.provider_id == "idp"
    assert login.digest != params["state"]
    assert params["state"] not in str(login.model_dump())


async def test_first_sign_in_provisions_an_account_then_consent_gives_a_code_for_its_sub(
    app: Starlette, http: httpx2.AsyncClient, client_id: str, idp: FakeProvider
) -> None:
    verifier, challenge = pkce_pair()
    page = await sign_in_page(http, client_id, challenge)
    url = (await press(http, page)).headers["location"]
    back = await come_back(http, idp.approve(url))
    assert back.status_code == 303
    assert back.headers["location"] == str(page.url)
    consent = await follow(http, back)
    assert "alice@example.com" in consent.text
    assert "approve" in consent.text
    # what mcpauth sent to the token endpoint: the code, the redirect URI and the verifier
    (sent,) = idp.token_requests
    assert sent["redirect_uri"] == CALLBACK
    assert len(sent["code_verifier"]) == 43
    token = await approve_and_redeem(http, consent, client_id, verifier)
    sub = pyjwt.decode(token["access_token"], options={"verify_signature": False})["sub"]
    with app.state.mcpauth.db.read() as session:
        user = session.get(User, sub)
        identity = session.get(UpstreamIdentity, ("https://idp.example", "alice-0001"))
    assert user is not None
    assert user.username == "https://idp.example#alice-0001"
    assert user.password_hash == "!"  # no password: it signs in only through the provider
    assert identity is not None
    assert identity.user_id == sub
    assert (identity.email, identity.email_verified, identity.name) == (
        "alice@example.com",
        True,
        "Alice Example",
    )
    assert counts(app) == {"users": 1, "upstream_identities": 1, "upstream_logins": 0}


async def test_the_next_sign_in_reaches_the_same_account_with_fresh_claims(
    app: Starlette, http: httpx2.AsyncClient, client_id: str, idp: FakeProvider
) -> None:
    _, url = await start(http, client_id)
    assert (await come_back(http, idp.approve(url))).status_code == 303
    async with await browser_for(app) as other_browser:
        _, url = await start(other_browser, client_id)
        again = await come_back(
            other_browser, idp.approve(url, name="Alice Renamed", email="alice.r@example.com")
        )
        assert again.status_code == 303
    with app.state.mcpauth.db.read() as session:
        (identity,) = session.execute(select(UpstreamIdentity)).scalars()
    assert (identity.name, identity.email) == ("Alice Renamed", "alice.r@example.com")
    assert counts(app)["users"] == 1


async def test_accounts_are_never_linked_by_email(
    app: Starlette,
    http: httpx2.AsyncClient,
    client_id: str,
    idp: FakeProvider,
    password_hash: str,
) -> None:
    local = add_user(app, "alice@example.com", password_hash)  # a local account, same address
    _, url = await start(http, client_id)
    assert (await come_back(http, idp.approve(url))).status_code == 303
    async with await browser_for(app) as other_browser:  # another subject, the same email
        _, url = await start(other_browser, client_id)
        assert (
            await come_back(other_browser, idp.approve(url, sub="alice-0002"))
        ).status_code == 303
    with app.state.mcpauth.db.read() as session:
        owners = {i.subject: i.user_id for i in session.execute(select(UpstreamIdentity)).scalars()}
    assert len(set(owners.values())) == 2
    assert local not in owners.values()
    assert counts(app)["users"] == 3


async def test_a_passwordless_account_of_the_same_subject_is_the_same_person(
    app: Starlette, http: httpx2.AsyncClient, client_id: str, idp: FakeProvider
) -> None:
    """The jwt-bearer grant names an ID-JAG subject's account issuer#subject too."""
    ctx = app.state.mcpauth
    with ctx.db.write() as session:
        session.add(
            User(
                id="idjag-user",
                username="https://idp.example#alice-0001",
                password_hash="!",
                created_at=0,
            )
        )
    _, url = await start(http, client_id)
    assert (await come_back(http, idp.approve(url))).status_code == 303
    with ctx.db.read() as session:
        assert (
            session.get(UpstreamIdentity, ("https://idp.example", "alice-0001")).user_id
            == "idjag-user"
        )


@pytest.mark.parametrize("subject", ["alice-0001", "s" * 255])
def test_an_account_name_fits_its_column_for_any_subject_of_the_longest_issuer(
    subject: str,
) -> None:
    """The jwt-bearer grant names an ID-JAG's subject with the same function (and refuses
    what does not fit): for every issuer the settings allow, nothing is refused."""
    issuer = "https://login.example.com/" + "t" * 94  # the longest issuer settings allow
    name = jwt_bearer.local_username(issuer, subject)
    assert len(name) <= 200
    short = f"{issuer}#{subject}"
    assert name == short if len(short) <= 200 else name.startswith(f"{issuer}#sha256:")


async def test_a_local_account_with_a_password_holding_the_name_is_not_linked(
    app: Starlette, http: httpx2.AsyncClient, client_id: str, idp: FakeProvider, password_hash: str
) -> None:
    add_user(app, "https://idp.example#alice-0001", password_hash)
    interaction, url = await start(http, client_id)
    refused(await come_back(http, idp.approve(url)), 409, "nothing was linked", interaction)
    assert counts(app) == {"users": 1, "upstream_identities": 0, "upstream_logins": 0}


async def test_the_account_page_signs_in_through_a_provider_too(
    app: Starlette, http: httpx2.AsyncClient, idp: FakeProvider
) -> None:
    page = await http.get("/account")
    response = await press(http, page)
    assert response.status_code == 303
    assert query(response.headers["location"])["state"].startswith("account.")
    back = await come_back(http, idp.approve(response.headers["location"]))
    assert back.headers["location"] == f"{ISSUER}/account"
    assert "alice@example.com" in (await http.get("/account")).text


async def test_without_local_accounts_only_the_buttons_are_offered(
    make_app: Callable[..., Starlette],
) -> None:
    app = make_app(local_accounts=False)
    async with await browser_for(app) as browser:
        response = await register_public_client(browser, APP_REDIRECT)
        page = await sign_in_page(browser, response["client_id"])
        assert "Continue with Example IdP" in page.text
        assert 'name="password"' not in page.text
        assert 'name="username"' not in page.text
        # the form is gone, and so is what it posted to
        login = await browser.post(
            str(page.url) + "/login", data={"username": "alice", "password": "x" * 12}
        )
        refused(login, 403, "doesn&#39;t sign in with a username and password", None)
        account = await browser.get("/account")
        assert 'name="password"' not in account.text
        assert "Continue with Other IdP" in account.text


def test_local_accounts_off_needs_a_provider(make_settings: Callable[..., Settings]) -> None:
    with pytest.raises(ValueError, match="needs at least one upstream provider"):
        make_settings(local_accounts=False)


# --------------------------------------------------------------------------------------------
# the button refused


async def test_the_button_needs_its_csrf_token_and_this_site(
    app: Starlette, http: httpx2.AsyncClient, client_id: str
) -> None:
    page = await sign_in_page(http, client_id)
    action = str(page.url) + "/upstream/idp/login"
    forged = await http.post(action, data={"csrf_token": "forged"})
    refused(forged, 403, "had expired", str(page.url))
    token = next(f for f in forms(page.text) if f.action == action).fields
    cross = await http.post(action, data=token, headers={"Origin": "https://evil.example"})
    assert cross.status_code == 403
    assert "another website" in cross.text
    assert counts(app)["upstream_logins"] == 0


async def test_pressing_a_provider_button_counts_with_the_sign_in_rate_limit(
    make_app: Callable[..., Starlette],
) -> None:
    app = make_app(rate_limit_login=2)
    async with await browser_for(app) as browser:
        registered = await register_public_client(browser, APP_REDIRECT)
        page = await sign_in_page(browser, registered["client_id"])
        pressed = [(await press(browser, page)).status_code for _ in range(3)]
    assert pressed == [303, 303, 429]
    assert counts(app)["upstream_logins"] == 1  # a new press replaces the pending sign-in


async def test_unknown_providers_are_not_found(
    app: Starlette, http: httpx2.AsyncClient, client_id: str
) -> None:
    page = await sign_in_page(http, client_id)
    assert (await http.post(str(page.url) + "/upstream/nobody/login", data={})).status_code == 404
    assert (
        await come_back(http, {"code": "c", "state": "s"}, provider="nobody")
    ).status_code == 404


async def test_a_provider_that_is_down_at_the_button_is_a_page_and_nothing_is_stored(
    app: Starlette, http: httpx2.AsyncClient, client_id: str, idp: FakeProvider
) -> None:
    async def down(request: httpx2.Request) -> httpx2.Response:
        raise httpx2.ConnectError("connection refused", request=request)

    app.state.mcpauth.upstream.transport = httpx2.MockTransport(down)
    page = await sign_in_page(http, client_id)
    refused(await press(http, page), 502, "not possible right now", str(page.url))
    assert counts(app)["upstream_logins"] == 0


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"issuer": "https://evil.example"}, "names another issuer"),
        ({"code_challenge_methods_supported": ["plain"]}, "no S256"),
        ({"id_token_signing_alg_values_supported": ["HS256"]}, "only HMAC"),
        ({"token_endpoint": "http://idp.example/token"}, "plain http"),
        ({"jwks_uri": None}, "no keys"),
    ],
)
async def test_unusable_provider_configuration_is_refused(
    app: Starlette,
    http: httpx2.AsyncClient,
    client_id: str,
    idp: FakeProvider,
    change: dict[str, Any],
    reason: str,
) -> None:
    idp.metadata.update(change)
    page = await sign_in_page(http, client_id)
    refused(await press(http, page), 502, "not possible right now", str(page.url))


# --------------------------------------------------------------------------------------------
# the callback refused


async def test_a_forged_state_is_refused(
    app: Starlette, http: httpx2.AsyncClient, client_id: str, idp: FakeProvider
) -> None:
    interaction, url = await start(http, client_id)
    params = idp.approve(url)
    forged = params["state"].split(".")[0] + "." + "A" * 43
    refused(
        await come_back(http, {**params, "state": forged}),
        400,
        "expired or was already used",
        interaction,
    )
    refused(
        await come_back(http, {**params, "state": "garbage"}), 400, "not one this service", None
    )
    refused(await come_back(http, {"code": params["code"]}), 400, "not one this service", None)
    twice = urlencode([("code", params["code"]), ("state", params["state"])] * 2)
    refused(await http.get(f"/upstream/idp/callback?{twice}"), 400, "not one this service", None)
    assert counts(app)["users"] == 0


async def test_a_callback_is_used_once(
    app: Starlette, http: httpx2.AsyncClient, client_id: str, idp: FakeProvider
) -> None:
    interaction, url = await start(http, client_id)
    params = idp.approve(url)
    assert (await come_back(http, params)).status_code == 303
    refused(await come_back(http, params), 400, "expired or was already used", interaction)


async def test_an_expired_sign_in_is_refused(
    app: Starlette, http: httpx2.AsyncClient, client_id: str, idp: FakeProvider, clock: Clock
) -> None:
    interaction, url = await start(http, client_id)
    params = idp.approve(url)
    clock.now += 601  # the pending authorization (interaction_ttl) and the sign-in are over
    refused(await come_back(http, params), 400, "expired or was already used", interaction)
    assert idp.token_requests == []  # the code was never redeemed
    assert counts(app) == {"users": 0, "upstream_identities": 0, "upstream_logins": 0}


async def test_a_response_brought_to_another_browser_is_refused(
    app: Starlette, http: httpx2.AsyncClient, client_id: str, idp: FakeProvider
) -> None:
    """Login CSRF: someone else's callback URL, opened in the victim's browser."""
    interaction, url = await start(http, client_id)
    async with await browser_for(app) as victim:
        refused(await come_back(victim, idp.approve(url)), 403, "another browser", interaction)
    assert idp.token_requests == []
    assert counts(app)["users"] == 0


async def test_mix_up_a_response_for_one_provider_at_the_other_s_callback_is_refused(
    app: Starlette,
    http: httpx2.AsyncClient,
    client_id: str,
    idp: FakeProvider,
    other_idp: FakeProvider,
) -> None:
    interaction, url = await start(http, client_id, provider="other")
    params = other_idp.approve(url)
    refused(
        await come_back(http, params, provider="idp"),
        400,
        "another sign-in option",
        interaction,
        "invalid_request",
    )
    # the state was spent on the refusal: the response is no good anywhere now
    refused(await come_back(http, params, provider="other"), 400, "already used", interaction)
    assert idp.token_requests == other_idp.token_requests == []
    assert counts(app) == {"users": 0, "upstream_identities": 0, "upstream_logins": 0}


@pytest.mark.parametrize("iss", ["https://other-idp.example", "https://idp.example/", None])
async def test_rfc9207_iss_must_be_the_provider_s(
    app: Starlette, http: httpx2.AsyncClient, client_id: str, idp: FakeProvider, iss: str | None
) -> None:
    interaction, url = await start(http, client_id)
    params = {k: v for k, v in {**idp.approve(url), "iss": iss}.items() if v is not None}
    refused(await come_back(http, params), 400, "did not come from Example IdP", interaction)
    assert idp.token_requests == []


async def test_without_rfc9207_support_a_response_without_iss_is_accepted(
    app: Starlette, http: httpx2.AsyncClient, client_id: str, idp: FakeProvider
) -> None:
    idp.metadata["authorization_response_iss_parameter_supported"] = False
    _, url = await start(http, client_id)
    params = idp.approve(url)
    del params["iss"]
    assert (await come_back(http, params)).status_code == 303


@pytest.mark.parametrize(
    ("error", "words"),
    [
        ("access_denied", "was cancelled"),
        ("server_error", "could not sign you in"),
        ("temporarily_unavailable", "could not sign you in"),
    ],
)
async def test_upstream_errors_and_cancellations_are_pages_in_plain_words(
    app: Starlette,
    http: httpx2.AsyncClient,
    client_id: str,
    idp: FakeProvider,
    error: str,
    words: str,
) -> None:
    interaction, url = await start(http, client_id)
    state = query(url)["state"]
    hostile = "<script>alert(1)</script> Call +1-555 for help"
    response = await come_back(
        http, {"error": error, "error_description": hostile, "state": state, "iss": idp.issuer}
    )
    refused(response, 400, words, interaction, "access_denied")
    assert "alert(1)" not in response.text
    # the provider's words never reach the page (the interaction id in a link is random hex,
    # so look for the phrase, not for its digits alone)
    assert "+1-555" not in response.text
    assert "for help" not in response.text
    assert counts(app) == {"users": 0, "upstream_identities": 0, "upstream_logins": 0}


async def test_a_response_without_a_code_is_refused(
    app: Starlette, http: httpx2.AsyncClient, client_id: str, idp: FakeProvider
) -> None:
    interaction, url = await start(http, client_id)
    params = idp.approve(url)
    del params["code"]
    refused(await come_back(http, params), 400, "incomplete", interaction)


async def json_response(status: int, body: Any) -> httpx2.Response:
    return httpx2.Response(status, json=body)


@pytest.mark.parametrize(
    ("answer", "status", "words"),
    [
        (lambda r: json_response(400, {"error": "invalid_grant"}), 400, "did not accept"),
        (lambda r: json_response(500, {"error": "server_error"}), 502, "not possible right now"),
        (lambda r: json_response(200, ["not", "an", "object"]), 502, "not possible right now"),
        (
            lambda r: json_response(200, {"access_token": "a", "token_type": "Bearer"}),
            400,
            "could not be verified",
        ),  # no ID token
        (
            lambda r: json_response(200, {"id_token": "x" * 300_000}),
            502,
            "not possible right now",
        ),  # past the response-size cap
    ],
    ids=["refused code", "server error", "not an object", "no id_token", "oversized"],
)
async def test_a_token_endpoint_that_misbehaves_signs_nobody_in(
    app: Starlette,
    http: httpx2.AsyncClient,
    client_id: str,
    idp: FakeProvider,
    answer: Callable[[httpx2.Request], Any],
    status: int,
    words: str,
) -> None:
    idp.token_response = answer
    interaction, url = await start(http, client_id)
    refused(await come_back(http, idp.approve(url)), status, words, interaction)
    assert counts(app) == {"users": 0, "upstream_identities": 0, "upstream_logins": 0}


async def test_a_provider_that_hangs_is_given_up_on_at_the_deadline(
    make_app: Callable[..., Starlette], idp: FakeProvider
) -> None:
    app = make_app(upstream_timeout=0.3)

    async def hang(request: httpx2.Request) -> httpx2.Response:
        await idp.stalled.wait()  # never set: only the deadline ends this
        raise AssertionError("unreachable")

    idp.token_response = hang
    async with await browser_for(app) as browser:
        registered = await register_public_client(browser, APP_REDIRECT)
        interaction, url = await start(browser, registered["client_id"])
        refused(
            await come_back(browser, idp.approve(url)),
            504,
            "did not answer in time",
            interaction,
            "temporarily_unavailable",
        )
    assert counts(app)["users"] == 0


@pytest.mark.parametrize(
    ("claims", "header"),
    [
        ({"nonce": "another-sign-in-s-nonce"}, {}),
        ({"aud": "some-other-client"}, {}),
        ({"iss": "https://other-idp.example"}, {}),
        ({"exp": 1_800_000_000 - 120}, {}),
        ({}, {"kid": "not-published"}),
    ],
    ids=["nonce", "aud", "iss", "expired", "unknown kid"],
)
async def test_a_bad_id_token_signs_nobody_in(
    app: Starlette,
    http: httpx2.AsyncClient,
    client_id: str,
    idp: FakeProvider,
    claims: dict[str, Any],
    header: dict[str, Any],
) -> None:
    async def bad(request: httpx2.Request) -> httpx2.Response:
        issued = idp.codes.popitem()[1]
        token = idp.id_token(
            {"nonce": issued["params"]["nonce"], **issued["claims"], **claims}, **header
        )
        return httpx2.Response(
            200, json={"access_token": "a", "token_type": "Bearer", "id_token": token}
        )

    idp.token_response = bad
    interaction, url = await start(http, client_id)
    refused(await come_back(http, idp.approve(url)), 400, "could not be verified", interaction)
    assert counts(app) == {"users": 0, "upstream_identities": 0, "upstream_logins": 0}


async def test_rotated_provider_keys_are_fetched_again_but_not_at_every_unknown_kid(
    app: Starlette, client_id: str, idp: FakeProvider, clock: Clock
) -> None:
    from joserfc.jwk import RSAKey

    async def sign_in() -> httpx2.Response:
        async with await browser_for(app) as browser:
            _, url = await start(browser, client_id)
            return await come_back(browser, idp.approve(url))

    assert (await sign_in()).status_code == 303  # the keys are now cached
    idp.key = RSAKey.generate_key(2048, parameters={"kid": "k2", "alg": "RS256", "use": "sig"})
    idp.jwks = {"keys": [idp.key.as_dict(private=False)]}
    # within a minute of the last fetch an unknown kid does not fetch again (no fetch storm)
    assert (await sign_in()).status_code == 400
    assert idp.requests.count("GET /jwks") == 1
    clock.now += 61
    assert (await sign_in()).status_code == 303
    assert idp.requests.count("GET /jwks") == 2


# --------------------------------------------------------------------------------------------
# policy


@pytest.mark.parametrize(
    ("claims", "policy", "words"),
    [
        ({"email": "mallory@other.example"}, None, "other.example can&#39;t sign in"),
        ({"email_verified": False}, None, "is not verified"),
        ({"email_verified": None}, None, "is not verified"),
        ({"email": None}, None, "did not share your email"),
        ({"email": "alice@sub.example.com"}, None, "sub.example.com can&#39;t sign in"),
        ({}, {"required_claims": {"groups": ["mcp-users"]}}, "doesn&#39;t have the access"),
        (
            {"groups": ["staff"]},
            {"required_claims": {"groups": "mcp-users"}},
            "doesn&#39;t have the access",
        ),
        (
            {"hd": "other.example"},
            {"required_claims": {"hd": ["example.com"]}},
            "doesn&#39;t have the access",
        ),
    ],
    ids=[
        "another domain",
        "unverified",
        "no email_verified",
        "no email",
        "a subdomain",
        "no groups",
        "another group",
        "another hd",
    ],
)
async def test_policy_refuses_before_any_account_exists(
    make_app: Callable[..., Starlette],
    idp: FakeProvider,
    claims: dict[str, Any],
    policy: dict[str, Any] | None,
    words: str,
) -> None:
    app = make_app(policy=policy or {"allowed_email_domains": ["example.com"]})
    async with await browser_for(app) as browser:
        registered = await register_public_client(browser, APP_REDIRECT)
        interaction, url = await start(browser, registered["client_id"])
        refused(await come_back(browser, idp.approve(url, **claims)), 403, words, interaction)
    assert counts(app) == {"users": 0, "upstream_identities": 0, "upstream_logins": 0}


async def test_required_claims_let_the_right_people_in(
    make_app: Callable[..., Starlette], idp: FakeProvider
) -> None:
    app = make_app(policy={"required_claims": {"groups": ["mcp-users", "admins"]}})
    async with await browser_for(app) as browser:
        registered = await register_public_client(browser, APP_REDIRECT)
        _, url = await start(browser, registered["client_id"])
        response = await come_back(browser, idp.approve(url, groups=["staff", "mcp-users"]))
    assert response.status_code == 303


# --------------------------------------------------------------------------------------------
# state over time, secrets in logs


async def test_pending_sign_ins_are_pruned_and_identities_go_with_their_account(
    app: Starlette, http: httpx2.AsyncClient, client_id: str, idp: FakeProvider, clock: Clock
) -> None:
    ctx = app.state.mcpauth
    _, url = await start(http, client_id)
    assert (await come_back(http, idp.approve(url))).status_code == 303
    async with await browser_for(app) as browser:
        await start(browser, client_id)  # a second sign-in, left pending
    assert counts(app)["upstream_logins"] == 1
    counted = prune(ctx.db, ctx.settings, ctx.now() + 601)
    assert counted is not None
    assert counted["upstream_logins"] == 1
    admin.remove_user(ctx, "https://idp.example#alice-0001")
    assert counts(app) == {"users": 0, "upstream_identities": 0, "upstream_logins": 0}


async def test_no_secret_code_or_token_reaches_the_logs(
    app: Starlette,
    http: httpx2.AsyncClient,
    client_id: str,
    idp: FakeProvider,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    _interaction, url = await start(http, client_id)
    params = idp.approve(url)
    assert (await come_back(http, params)).status_code == 303
    idp.token_response = lambda r: json_response(500, {})
    async with await browser_for(app) as browser:
        _, url = await start(browser, client_id)
        await come_back(browser, idp.approve(url))
    # every record but the test client's own (the "httpx2" logger: the browser's requests)
    logged = "".join(str(r.__dict__) for r in caplog.records if r.name != "httpx2")
    assert "upstream.login.success" in logged
    assert "upstream.refused" in logged
    for secret in (
        idp.client_secret,
        params["code"],
        params["state"],
        query(url)["nonce"],
        "upstream-access-token",
    ):
        assert secret not in logged


async def test_an_account_with_a_second_factor_is_asked_for_it_after_the_provider(
    app: Starlette, http: httpx2.AsyncClient, idp: FakeProvider, clock: Clock
) -> None:
    """A provider's sign-in is a first factor like a password: an account that turned an app
    on is asked for its code before the browser is signed in, and then says both."""
    page = await http.get("/account")
    back = await come_back(http, idp.approve((await press(http, page)).headers["location"]))
    assert back.headers["location"] == f"{ISSUER}/account"
    secret, _ = await turn_on_app(http, clock)
    clock.now += 30
    async with await browser_for(app) as other:
        page = await other.get("/account")
        back = await come_back(other, idp.approve((await press(other, page)).headers["location"]))
        assert back.headers["location"].endswith("/second-factor")
        assert "Signed in as" not in (await other.get("/account")).text  # not yet
        step = await other.get("/second-factor")
        done = await post_form(other, step, "/second-factor/login", code=code(secret, clock))
        assert done.headers["location"] == f"{ISSUER}/account"
        assert "Signed in as" in (await other.get("/account")).text
    with app.state.mcpauth.db.read() as session:
        amrs = session.execute(select(BrowserSessionRecord.amr)).scalars().all()
    assert "otp mfa" in amrs
