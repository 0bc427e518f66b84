"""Sign-in through plain OAuth 2.0 providers, in process: the GitHub preset (``kind =
"github"``) and a generic ``kind = "oauth2"`` provider with a claim mapping, both against the
GitHub stand-in (tests/github_standin.py, not GitHub: a local app serving GitHub's documented
responses). The authorization request carries PKCE and the bound state but no nonce; the code
is redeemed with the secret in the form as GitHub documents; the person is GitHub's numeric id,
never the login or an email; the primary email counts only as verified as the emails API says;
every failure (API down, token refused, no usable id, cancellation, another provider's answer)
is a plain page with nothing stored (docs/security.md T34, T36, T38). Kept GitHub App tokens
are refreshed at the configured token endpoint (T37)."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx2
import pytest
from sqlalchemy import select
from starlette.applications import Starlette

from mcpauth.errors import ConfigurationError
from mcpauth.oauth import TOKEN_EXCHANGE
from mcpauth.server import Settings, admin, create_app
from mcpauth.server.config import UpstreamProvider, load_settings
from mcpauth.server.identity import user_apis
from mcpauth.server.identity.upstream import ProfileError, ProviderMetadata, UpstreamProviders
from mcpauth.server.storage.models import UpstreamIdentity, UpstreamToken, User

from ..conftest import ISSUER
from ..github_standin import StandIn
from ..github_standin import app as standin_app
from ..oauth import follow, pkce_pair, query, register_public_client
from .conftest import RESOURCE
from .test_upstream_sign_in import (  # noqa: F401 - fixtures used by name
    APP_REDIRECT,
    Clock,
    approve_and_redeem,
    browser_for,
    clock,
    counts,
    press,
    refused,
    sign_in_page,
)

pytestmark = pytest.mark.anyio

SECRET_ENV = "MCPAUTH_TEST_GITHUB_SECRET"
CLIENT_ID = "Iv1.0123456789abcdef"
SECRET = "github-client-secret-0123456789"
FORGE = "https://forge.example"
ACCESS = "urn:ietf:params:oauth:token-type:access_token"


def github(**extra: Any) -> UpstreamProvider:
    return UpstreamProvider.model_validate(
        {
            "id": "github",
            "name": "GitHub",
            "kind": "github",
            "client_id": CLIENT_ID,
            "client_secret_env": SECRET_ENV,
            "authorization_params": {"allow_signup": "false"},
            **extra,
        }
    )


def forge(**extra: Any) -> UpstreamProvider:
    return UpstreamProvider.model_validate(
        {
            "id": "forge",
            "name": "Forge",
            "kind": "oauth2",
            "issuer": FORGE,
            "authorization_endpoint": f"{FORGE}/login/oauth/authorize",
            "token_endpoint": f"{FORGE}/login/oauth/access_token",
            "userinfo_endpoint": f"{FORGE}/api/v3/user",
            "token_endpoint_auth_method": "client_secret_post",
            "claim_mapping": {"subject": "id", "name": "login"},
            "scopes": ["read:user"],
            "client_id": CLIENT_ID,
            "client_secret_env": SECRET_ENV,
            **extra,
        }
    )


@pytest.fixture
def standin() -> StandIn:
    callbacks = (f"{ISSUER}/upstream/github/callback", f"{ISSUER}/upstream/forge/callback")
    return StandIn(CLIENT_ID, SECRET, callbacks)


@pytest.fixture
def make_app(
    make_settings: Callable[..., Settings],
    standin: StandIn,
    clock: Clock,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> Callable[..., Starlette]:
    monkeypatch.setenv(SECRET_ENV, SECRET)

    def make(**policy: Any) -> Starlette:
        settings = make_settings(upstream=(github(**policy), forge()))
        app = create_app(settings, clock=clock)
        ctx = app.state.mcpauth
        ctx.upstream.transport = httpx2.ASGITransport(app=standin_app(standin))
        admin.add_resource(
            ctx, RESOURCE, scopes=["mcp:tools"], default_scopes=["mcp:tools"], is_default=True
        )
        return app

    return make


@pytest.fixture
def app(make_app: Callable[..., Starlette]) -> Starlette:
    return make_app(allowed_email_domains=["example.com"])


@pytest.fixture
async def at_github(standin: StandIn) -> AsyncIterator[httpx2.AsyncClient]:
    """The person's browser at the stand-in (any host: github.com, api.github.com, forge)."""
    transport = httpx2.ASGITransport(app=standin_app(standin))
    async with httpx2.AsyncClient(transport=transport) as browser:
        yield browser


@pytest.fixture
async def client_id(http: httpx2.AsyncClient) -> str:
    return str((await register_public_client(http, APP_REDIRECT))["client_id"])


async def authorize_there(
    browser: httpx2.AsyncClient, url: str, login: str = "octocat", *, allow: bool = True
) -> str:
    """The person chooses an account on the provider's page and authorizes (or cancels): the
    URL the provider sends the browser back to."""
    page = await browser.get(url)
    assert page.status_code == 200, page.text
    answer = await browser.post(url, data={"login": login, "authorize": "1" if allow else "0"})
    assert answer.status_code == 302, answer.text
    return answer.headers["location"]


async def sign_in(
    http: httpx2.AsyncClient,
    at_github: httpx2.AsyncClient,
    client_id: str,
    login: str = "octocat",
    *,
    provider: str = "github",
    allow: bool = True,
    challenge: str | None = None,
) -> httpx2.Response:
    """Press the provider's button, act there, come back: mcpauth's answer to the callback."""
    page = await sign_in_page(http, client_id, challenge)
    started = await press(http, page, provider)
    assert started.status_code == 303, started.text
    return await http.get(await authorize_there(at_github, started.headers["location"], login))


def identities(app: Starlette) -> list[UpstreamIdentity]:
    with app.state.mcpauth.db.read() as session:
        return list(session.execute(select(UpstreamIdentity)).scalars())


async def test_github_sign_in_sends_pkce_and_no_nonce_and_keys_the_account_by_github_id(
    app: Starlette,
    http: httpx2.AsyncClient,
    at_github: httpx2.AsyncClient,
    client_id: str,
    standin: StandIn,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    back = await sign_in(http, at_github, client_id)
    assert back.status_code == 303, back.text
    (access_token,) = standin.tokens
    assert access_token not in caplog.text
    assert SECRET not in caplog.text
    consent = await follow(http, back)
    assert "octocat@example.com" in consent.text  # the account's name on the consent page
    (sent,) = standin.authorization_requests  # at github.com, the preset's endpoint
    assert sent["client_id"] == CLIENT_ID
    assert sent["redirect_uri"] == f"{ISSUER}/upstream/github/callback"
    assert sent["scope"] == "read:user user:email"
    assert sent["code_challenge_method"] == "S256"
    assert len(sent["code_challenge"]) == 43
    assert sent["allow_signup"] == "false"  # authorization_params
    assert "nonce" not in sent
    assert "prompt" not in sent
    (token,) = standin.token_requests
    assert token["client_secret"] == SECRET  # in the form, as GitHub documents
    assert token["authorization"] is False
    assert "json" in token["accept"]
    assert len(token["code_verifier"]) == 43
    assert standin.api_requests == ["GET /user", "GET /user/emails"]  # api.github.com
    (identity,) = identities(app)
    assert (identity.issuer, identity.subject) == ("https://github.com", "583231")
    assert (identity.email, identity.email_verified, identity.name) == (
        "octocat@example.com",
        True,
        "The Octocat",
    )
    with app.state.mcpauth.db.read() as session:
        user = session.get(User, identity.user_id)
    assert user is not None
    assert user.username == "https://github.com#583231"


async def test_a_renamed_login_is_the_same_account_and_an_email_never_links_two(
    app: Starlette,
    http: httpx2.AsyncClient,
    at_github: httpx2.AsyncClient,
    client_id: str,
    standin: StandIn,
) -> None:
    assert (await sign_in(http, at_github, client_id)).status_code == 303
    standin.users["octocat"]["user"]["login"] = "octocat-renamed"
    standin.users["twin"] = {  # another GitHub account whose primary address is the same
        "user": {"login": "twin", "id": 77, "name": "Twin", "email": None},
        "emails": [{"email": "octocat@example.com", "primary": True, "verified": True}],
    }
    async with await browser_for(app) as second:
        assert (await sign_in(second, at_github, client_id)).status_code == 303
    async with await browser_for(app) as third:
        assert (await sign_in(third, at_github, client_id, "twin")).status_code == 303
    owners = {i.subject: i.user_id for i in identities(app)}
    assert set(owners) == {"583231", "77"}
    assert owners["583231"] != owners["77"]
    assert counts(app)["users"] == 2


async def test_an_unverified_primary_email_is_refused_where_a_domain_is_required(
    app: Starlette,
    http: httpx2.AsyncClient,
    at_github: httpx2.AsyncClient,
    client_id: str,
) -> None:
    """hubot's primary address is at example.com but unverified; a verified secondary address
    does not stand in for it."""
    before = counts(app)
    back = await sign_in(http, at_github, client_id, "hubot")
    refused(back, 403, "is not verified", None, "access_denied")
    assert counts(app) == before


async def test_without_a_domain_policy_unverified_or_unreadable_emails_are_kept_unverified(
    make_app: Callable[..., Starlette],
    at_github: httpx2.AsyncClient,
    standin: StandIn,
) -> None:
    app = make_app()
    for login in ("hubot", "nomail"):
        async with await browser_for(app) as browser:
            client = str((await register_public_client(browser, APP_REDIRECT))["client_id"])
            assert (await sign_in(browser, at_github, client, login)).status_code == 303
    found = {i.subject: (i.email, i.email_verified, i.name) for i in identities(app)}
    assert found == {
        "1000002": ("hubot@example.com", False, "hubot"),  # no name: the login
        "1000003": (None, False, "No Mail"),  # the emails API answered 404
    }


class _ForgetsTokens(dict[str, str]):
    """A token store that keeps nothing: every token the stand-in issued is then unknown."""

    def __setitem__(self, key: str, value: str) -> None:
        pass


@pytest.mark.parametrize(
    ("breakage", "status", "words", "code"),
    [
        ("api_down", 502, "GitHub is not possible right now", "temporarily_unavailable"),
        ("code_refused", 400, "GitHub did not accept this sign-in", "access_denied"),
        ("token_unknown_to_api", 400, "could not be verified", "access_denied"),
        ("no_id", 400, "could not be verified", "access_denied"),
        ("id_is_a_boolean", 400, "could not be verified", "access_denied"),
        ("cancelled", 400, "Signing in with GitHub was cancelled", "access_denied"),
    ],
)  # fmt: skip
async def test_a_failing_or_refusing_github_is_a_plain_page_and_nothing_is_stored(
    app: Starlette,
    http: httpx2.AsyncClient,
    at_github: httpx2.AsyncClient,
    client_id: str,
    standin: StandIn,
    breakage: str,
    status: int,
    words: str,
    code: str,
) -> None:
    before = counts(app)
    page = await sign_in_page(http, client_id)
    started = await press(http, page, "github")
    back = await authorize_there(
        at_github, started.headers["location"], allow=breakage != "cancelled"
    )
    if breakage == "api_down":
        standin.api_down = True
    elif breakage == "code_refused":
        standin.codes.clear()  # GitHub answers bad_verification_code, with HTTP 200
    elif breakage == "token_unknown_to_api":
        standin.tokens = _ForgetsTokens()  # the user API answers 401 Bad credentials
    elif breakage in ("no_id", "id_is_a_boolean"):
        standin.users["octocat"]["user"]["id"] = None if breakage == "no_id" else True
    answer = await http.get(back)
    refused(answer, status, words, str(page.url), code)
    assert counts(app) == before
    assert identities(app) == []


async def test_a_github_answer_delivered_at_the_forge_callback_is_refused(
    app: Starlette,
    http: httpx2.AsyncClient,
    at_github: httpx2.AsyncClient,
    client_id: str,
) -> None:
    """Mix-up across plain OAuth providers: the callback path names the provider the state was
    made for; both providers here even share the authorization server."""
    page = await sign_in_page(http, client_id)
    started = await press(http, page, "github")
    back = await authorize_there(at_github, started.headers["location"])
    misdelivered = back.replace("/upstream/github/", "/upstream/forge/")
    refused(await http.get(misdelivered), 400, "another sign-in option", str(page.url))
    refused(await http.get(back), 400, "has expired or was already used", str(page.url))
    assert identities(app) == []


async def test_a_generic_oauth2_provider_maps_its_user_api_to_the_account(
    app: Starlette,
    http: httpx2.AsyncClient,
    at_github: httpx2.AsyncClient,
    client_id: str,
    standin: StandIn,
) -> None:
    back = await sign_in(http, at_github, client_id, provider="forge")
    assert back.status_code == 303, back.text
    (sent,) = standin.authorization_requests
    assert sent["scope"] == "read:user"
    assert "nonce" not in sent
    assert sent["code_challenge_method"] == "S256"
    assert standin.api_requests == ["GET /api/v3/user"]  # no emails API for a generic one
    (identity,) = identities(app)
    # the issuer configured names its accounts; email_verified is not mapped: unverified
    assert (identity.issuer, identity.subject) == (FORGE, "583231")
    assert (identity.email, identity.email_verified, identity.name) == (
        "octocat@github.com",
        False,
        "octocat",
    )


def test_claims_from_user_apis() -> None:
    paths = {"subject": "data.uid", "email": "data.mail", "email_verified": "data.checked"}
    nested = forge(claim_mapping={**paths, "name": "data.display"})
    claims = user_apis.mapped_claims(
        nested,
        {"data": {"uid": "u-1", "mail": "a@example.com", "checked": True, "display": "A"},
         "groups": ["mcp-users"], "blob": "x" * 2000, "iss": "https://evil.example"},
    )  # fmt: skip
    assert claims["iss"] == FORGE  # the configured issuer, never the answer's
    assert (claims["sub"], claims["email"], claims["email_verified"], claims["name"]) == (
        "u-1",
        "a@example.com",
        True,
        "A",
    )
    assert claims["groups"] == ["mcp-users"]  # top-level fields for required_claims
    assert "blob" not in claims
    for bad in (None, True, "", " padded", "x" * 256, "tab\there", 1.5, ["1"], {"id": 1}):
        with pytest.raises(ProfileError):
            user_apis.subject(bad)
    assert user_apis.subject(0) == "0"
    # GitHub: the primary address only, as verified as GitHub says; else the public one
    user = {"id": 9, "login": "x", "email": "public@example.com"}
    assert user_apis.github_claims("https://github.com", user, "not a list")["email"] == (
        "public@example.com"
    )
    secondary_only = [{"email": "v@example.com", "primary": False, "verified": True}]
    claims = user_apis.github_claims("https://github.com", user, secondary_only)
    assert (claims["email"], claims["email_verified"]) == ("public@example.com", False)
    verified_string = [{"email": "p@example.com", "primary": True, "verified": "true"}]
    claims = user_apis.github_claims("https://github.com", user, verified_string)
    assert (claims["email"], claims["email_verified"]) == ("p@example.com", False)


def test_the_presets_and_what_each_kind_requires() -> None:
    preset = github()
    assert preset.issuer == "https://github.com"
    assert preset.authorization_endpoint == "https://github.com/login/oauth/authorize"
    assert preset.token_endpoint == "https://github.com/login/oauth/access_token"
    assert preset.userinfo_endpoint == "https://api.github.com/user"
    assert preset.scopes == ("read:user", "user:email")
    assert preset.auth_method == "client_secret_post"
    enterprise = github(issuer="https://github.example.com")
    assert enterprise.authorization_endpoint == "https://github.example.com/login/oauth/authorize"
    assert enterprise.userinfo_endpoint == "https://github.example.com/api/v3/user"
    assert forge(scopes=()).scopes == ()
    generic = UpstreamProvider.model_validate(
        {k: v for k, v in forge().model_dump().items() if k not in ("scopes", "claim_mapping")}
    )
    assert generic.scopes == ()  # a generic provider asks for no scope unless told
    assert generic.claim_field("subject") == "sub"
    assert generic.auth_method == "client_secret_post"  # as configured for it


BASE = {"id": "p", "name": "P", "client_id": "c"}


@pytest.mark.parametrize(
    ("provider", "words"),
    [
        ({"issuer": "https://idp.example", "token_endpoint": "https://idp.example/t"},
         "token_endpoint is for kind oauth2"),
        ({"kind": "oauth2", "issuer": "https://x.example",
          "authorization_endpoint": "https://x.example/a", "token_endpoint": "https://x.example/t"},
         "needs userinfo_endpoint"),
        ({"kind": "oauth2", "authorization_endpoint": "https://x.example/a",
          "token_endpoint": "https://x.example/t", "userinfo_endpoint": "https://x.example/u"},
         "upstream.0.issuer"),
        ({"kind": "github", "token_endpoint": "http://github.example/t"}, "loopback"),
        ({"kind": "github", "userinfo_endpoint": "https://api.example/u#frag"}, "fragment"),
        ({"kind": "github", "claim_mapping": {"subject": "login"}}, "claim_mapping is for kind"),
        ({"kind": "oauth2", "issuer": "https://x.example", "claim_mapping": {"roles": "g"}},
         "unknown claim 'roles'"),
        ({"kind": "oauth2", "issuer": "https://x.example", "claim_mapping": {"subject": "a b"}},
         "not a field name"),
        ({"kind": "github", "authorization_params": {"state": "fixed"}}, "state is set by"),
        ({"kind": "github", "authorization_params": {"code_challenge_method": "plain"}},
         "code_challenge_method is set by"),
        ({"kind": "sso"}, "upstream.0.kind"),
    ],
)  # fmt: skip
def test_a_bad_plain_oauth_provider_is_refused_naming_the_setting(
    provider: dict[str, Any], words: str
) -> None:
    with pytest.raises(ConfigurationError, match=words):
        load_settings({"upstream": [{**BASE, **provider}]}, environ={})


async def test_idps_list_names_the_kind_and_endpoints_and_fetches_no_discovery(
    app: Starlette, standin: StandIn
) -> None:
    rows = {row["id"]: row for row in admin.list_upstream(app.state.mcpauth, check=True)}
    assert rows["github"]["kind"] == "github"
    assert rows["github"]["token_endpoint"] == "https://github.com/login/oauth/access_token"
    assert rows["github"]["redirect_uri"] == f"{ISSUER}/upstream/github/callback"
    assert rows["github"]["token_endpoint_auth_method"] == "client_secret_post"
    assert rows["forge"]["userinfo_endpoint"] == f"{FORGE}/api/v3/user"
    assert rows["forge"]["reachable"].startswith("not checked")
    assert standin.api_requests == []


async def test_kept_github_app_tokens_are_refreshed_at_the_configured_token_endpoint(
    make_app: Callable[..., Starlette],
    at_github: httpx2.AsyncClient,
    standin: StandIn,
    clock: Clock,  # noqa: F811
) -> None:
    """A GitHub App's user tokens expire (expires_in) and come with a rotated refresh token;
    GitHub refuses a spent one with ``bad_refresh_token``, which deletes what was kept."""
    clock.now = time.time()  # subject tokens are checked against the wall clock
    standin.expiring, standin.expires_in = True, 300
    app = make_app(keep_tokens=True, release_to=[RESOURCE])
    ctx = app.state.mcpauth
    server = admin.add_client(
        ctx, name="repos MCP server", grant_types=[TOKEN_EXCHANGE],
        exchange_from=[RESOURCE], exchange_to=[RESOURCE],
    )  # fmt: skip
    async with await browser_for(app) as http:
        client = str((await register_public_client(http, APP_REDIRECT))["client_id"])
        verifier, challenge = pkce_pair()
        back = await sign_in(http, at_github, client, challenge=challenge)
        consent = await follow(http, back)
        subject = (await approve_and_redeem(http, consent, client, verifier))["access_token"]

        async def exchange() -> httpx2.Response:
            return await http.post(
                "/token",
                data={"grant_type": TOKEN_EXCHANGE, "subject_token": subject,
                      "subject_token_type": ACCESS, "audience": "github"},
                auth=(server["client_id"], server["client_secret"]),
            )  # fmt: skip

        first = await exchange()
        assert first.status_code == 200, first.text
        assert first.json()["access_token"] in standin.tokens
        clock.now += 280  # within the refresh margin of the 300-second token
        refreshed = await exchange()
        assert refreshed.status_code == 200, refreshed.text
        assert refreshed.json()["access_token"] != first.json()["access_token"]
        assert refreshed.json()["access_token"].startswith("ghu_")
        assert refreshed.json()["access_token"] in standin.tokens  # the API takes it
        assert first.json()["access_token"] not in standin.tokens  # GitHub ended the old one
        sent = standin.token_requests[-1]
        assert sent["grant_type"] == "refresh_token"
        assert sent["client_id"] == CLIENT_ID
        assert sent["authorization"] is False  # the secret in the form, as for the code
        standin.refresh_tokens.clear()  # the person revoked the app at GitHub
        clock.now += 280
        gone = await exchange()
        assert gone.status_code == 400
        assert gone.json()["error"] == "invalid_grant"
    with ctx.db.read() as session:
        assert list(session.execute(select(UpstreamToken)).scalars()) == []


def test_authorization_params_join_what_mcpauth_sends() -> None:
    """Google's pair for a refresh token (access_type=offline, prompt=consent) on an OpenID
    provider: the authorization's own prompt=login is sent beside the configured prompt."""
    google = UpstreamProvider(
        id="google", name="Google", issuer="https://accounts.google.com", client_id="c",
        authorization_params={"access_type": "offline", "prompt": "consent"},
    )  # fmt: skip
    providers = UpstreamProviders([google], key=b"k" * 32, timeout=5)
    provider = providers.get("google")
    assert provider is not None
    metadata = ProviderMetadata(
        issuer="https://accounts.google.com",
        authorization_endpoint="https://accounts.google.com/o/oauth2/v2/auth",
        token_endpoint="https://oauth2.googleapis.com/token",
        jwks_uri="https://www.googleapis.com/oauth2/v3/certs",
        algorithms=("RS256",),
        iss_parameter_supported=True,
    )
    redirect = f"{ISSUER}/upstream/google/callback"
    for prompt, sent in ((None, "consent"), ("login", "login consent")):
        url = providers.authorization_url(
            provider, metadata, redirect_uri=redirect, state="s", prompt=prompt
        )
        params = query(url)
        assert (params["prompt"], params["access_type"]) == (sent, "offline")
        assert params["nonce"] == providers.nonce("s")
        assert params["state"] == "s"
