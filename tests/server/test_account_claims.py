"""The claims of a person's account (docs/upstream-providers.md, docs/security.md T36): the
groups of an upstream sign-in (an OpenID provider's ID token ``groups``, a plain OAuth 2.0
provider's through its ``claim_mapping``, never GitHub's) are kept with the identity, bounded,
and replaced at each sign-in, emptied when the provider stops sending them. A resource's
access tokens carry the person's claims it asks for (``mcpauth resources add --claim``), none
by default, as the account holds them at issuance (a refresh after a new sign-in sees the new
ones), in the JWT and in introspection; a machine's token carries none."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlencode, urljoin

import httpx2
import pytest
from sqlalchemy import select
from starlette.applications import Starlette

from mcpauth import jwt
from mcpauth.cli import main
from mcpauth.cli import resources as resources_command
from mcpauth.oauth import JWT_BEARER, TOKEN_EXCHANGE
from mcpauth.server import Settings, admin
from mcpauth.server.config import UpstreamProvider
from mcpauth.server.identity import accounts, user_apis
from mcpauth.server.storage.models import UpstreamIdentity
from mcpauth.server.tokens.issuance import PERSON_CLAIMS

from ..conftest import ISSUER, TEST_SECRET
from ..oauth import (
    authorization_params,
    follow,
    forms,
    pkce_pair,
    register_public_client,
)
from .conftest import PASSWORD, RESOURCE, add_user
from .test_upstream_sign_in import (  # noqa: F401 - fixtures used by name
    APP_REDIRECT,
    Clock,
    approve_and_redeem,
    browser_for,
    client_id,
    come_back,
    idp,
    make_app,
    other_idp,
    press,
    start,
)
from .upstream_fake import FakeProvider

pytestmark = pytest.mark.anyio


CLAIMS_RESOURCE = "http://127.0.0.1:8001/mcp"  # asks for email and groups
ALICE_GROUPS = ["mcp-users", "admins"]


@pytest.fixture
def clock() -> Clock:
    """Now (held still): introspection and token exchange check tokens by the wall clock."""
    now = Clock()
    now.now = float(int(time.time()))
    return now


@pytest.fixture
def app(make_app: Callable[..., Starlette]) -> Starlette:  # noqa: F811
    app = make_app()  # RESOURCE, the default, asks for no claims
    admin.add_resource(
        app.state.mcpauth,
        CLAIMS_RESOURCE,
        scopes=["mcp:tools"],
        default_scopes=["mcp:tools"],
        token_claims=["groups", "email"],
    )
    return app


def identity(app: Starlette) -> UpstreamIdentity:
    with app.state.mcpauth.db.read() as session:
        (found,) = session.execute(select(UpstreamIdentity)).scalars()
    return found


async def upstream_sign_in(
    app: Starlette,
    client_id: str,  # noqa: F811
    idp: FakeProvider,  # noqa: F811
    **claims: Any,
) -> None:
    """Alice signs in through the provider in a browser of her own, with these claims."""
    async with await browser_for(app) as browser:
        _, url = await start(browser, client_id)
        back = await come_back(browser, idp.approve(url, **claims))
        assert back.status_code == 303, back.text


# --------------------------------------------------------------------------------------------
# groups, kept with the identity


async def test_groups_are_kept_and_replaced_at_each_sign_in_then_emptied(
    app: Starlette,
    client_id: str,  # noqa: F811
    idp: FakeProvider,  # noqa: F811
) -> None:
    await upstream_sign_in(app, client_id, idp, groups=["mcp-users", "admins"])
    assert identity(app).groups == ["mcp-users", "admins"]
    await upstream_sign_in(app, client_id, idp, groups=["mcp-users"])
    assert identity(app).groups == ["mcp-users"]  # admins was taken away at the provider
    await upstream_sign_in(app, client_id, idp, groups="readers")  # one string: one group
    assert identity(app).groups == ["readers"]
    await upstream_sign_in(app, client_id, idp)  # no groups claim any more
    assert identity(app).groups == []


async def test_oversized_groups_keep_the_first_hundred_and_warn_without_naming_any(
    app: Starlette,
    client_id: str,  # noqa: F811
    idp: FakeProvider,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    bad = [7, "", "g" * 256, "tab\there", None, {"name": "x"}]
    sent = [*bad, *(f"team-{n:03d}" for n in range(150)), "team-000"]
    await upstream_sign_in(app, client_id, idp, groups=sent)
    assert identity(app).groups == [f"team-{n:03d}" for n in range(100)]
    logged = [r.getMessage() for r in caplog.records if r.name.startswith("mcpauth")]
    assert any("upstream idp: 150 groups sent, the first 100 kept" in m for m in logged)
    assert any("upstream idp: 6 of 157 groups left out" in message for message in logged)
    assert not any("team-" in message or "ggg" in message for message in logged)


async def test_long_group_names_are_kept_only_up_to_what_fits_in_a_token(
    app: Starlette,
    client_id: str,  # noqa: F811
    idp: FakeProvider,  # noqa: F811
) -> None:
    """Thirty names of 255 characters would make a token of 8 KiB, more than many servers take
    in a header: the first ones within 4 KiB are kept."""
    sent = [f"{n:02d}" + "x" * 253 for n in range(30)]
    await upstream_sign_in(app, client_id, idp, groups=sent)
    kept = identity(app).groups
    assert kept == sent[: len(kept)]
    assert len(kept) == accounts.MAX_GROUPS_BYTES // 258
    assert len(json.dumps(kept)) <= accounts.MAX_GROUPS_BYTES


async def test_a_groups_claim_that_is_no_list_of_strings_keeps_none(
    app: Starlette,
    client_id: str,  # noqa: F811
    idp: FakeProvider,  # noqa: F811
) -> None:
    await upstream_sign_in(app, client_id, idp, groups=["a"])
    await upstream_sign_in(app, client_id, idp, groups={"a": True})
    assert identity(app).groups == []


def plain_provider(kind: str, **extra: Any) -> UpstreamProvider:
    endpoints = {
        "authorization_endpoint": "https://forge.example/authorize",
        "token_endpoint": "https://forge.example/token",
        "userinfo_endpoint": "https://forge.example/user",
    }
    return UpstreamProvider.model_validate(
        {
            "id": kind,
            "name": kind,
            "kind": kind,
            "issuer": "https://forge.example",
            "client_id": "c",
            **(endpoints if kind == "oauth2" else {}),
            **extra,
        }
    )


def test_an_oauth2_provider_s_groups_come_through_its_claim_mapping_and_github_has_none() -> None:
    answer = {"id": 5, "groups": ["top"], "org": {"teams": ["nested", 3]}}
    mapped = plain_provider("oauth2", claim_mapping={"subject": "id", "groups": "org.teams"})
    kept = accounts.admit(mapped, user_apis.mapped_claims(mapped, answer))
    assert kept.groups == ("nested",)
    default = plain_provider("oauth2", claim_mapping={"subject": "id"})  # field `groups`
    assert accounts.admit(default, user_apis.mapped_claims(default, answer)).groups == ("top",)
    github = plain_provider("github")
    claims = user_apis.github_claims(github.issuer, {**answer, "login": "octo"}, None)
    assert claims["groups"] == ["top"]  # a top-level field, for required_claims only
    assert accounts.admit(github, claims).groups == ()


# --------------------------------------------------------------------------------------------
# the claims a resource asks its tokens to carry


async def tokens_for(
    browser: httpx2.AsyncClient,
    client_id: str,  # noqa: F811
    resource: str,
    sign_in: Callable[[httpx2.Response], Awaitable[httpx2.Response]],
) -> dict[str, Any]:
    """The person asks for ``resource``, signs in on the sign-in page (``sign_in``: the answer
    that leads to the consent page), approves the client, and the client redeems the code."""
    verifier, challenge = pkce_pair()
    params = authorization_params(client_id, challenge, resource=resource)
    page = await follow(browser, await browser.get("/authorize?" + urlencode(params)))
    consent = await follow(browser, await sign_in(page))
    return await approve_and_redeem(browser, consent, client_id, verifier, resource)


async def tokens_through_upstream(
    app: Starlette,
    client_id: str,  # noqa: F811
    idp: FakeProvider,  # noqa: F811
    resource: str,
    **claims: Any,
) -> dict[str, Any]:
    """Alice's tokens for ``resource``, signing in through the provider (with these claims)
    in a browser of her own."""
    async with await browser_for(app) as browser:

        async def through_the_provider(page: httpx2.Response) -> httpx2.Response:
            started = await press(browser, page)
            return await come_back(browser, idp.approve(started.headers["location"], **claims))

        return await tokens_for(browser, client_id, resource, through_the_provider)


def claims_of(app: Starlette, token: str) -> dict[str, Any]:
    return jwt.verify(
        token, jwt.key_set(app.state.mcpauth.keys.jwks()), issuer=ISSUER, audience=None
    )


PERSON = {"email", "email_verified", "name", "groups"}


async def refreshed(http: httpx2.AsyncClient, client_id: str, issued: dict[str, Any]) -> str:  # noqa: F811
    response = await http.post(
        "/token",
        data={
            "grant_type": "refresh_token",
            "refresh_token": issued["refresh_token"],
            "client_id": client_id,
        },
    )
    assert response.status_code == 200, response.text
    issued["refresh_token"] = response.json()["refresh_token"]  # rotated: the next one
    return str(response.json()["access_token"])


async def test_a_resource_s_tokens_carry_the_claims_it_asks_for_and_introspection_says_them(
    app: Starlette,
    http: httpx2.AsyncClient,
    client_id: str,  # noqa: F811
    idp: FakeProvider,  # noqa: F811
) -> None:
    issued = await tokens_through_upstream(
        app, client_id, idp, CLAIMS_RESOURCE, groups=ALICE_GROUPS
    )
    claims = claims_of(app, issued["access_token"])
    assert claims["aud"] == CLAIMS_RESOURCE
    assert (claims["email"], claims["groups"]) == ("alice@example.com", ALICE_GROUPS)
    assert "name" not in claims  # not asked for
    assert claims["email_verified"] is True  # an email always goes with its verification
    rs = admin.add_client(
        app.state.mcpauth, name="RS", grant_types=["client_credentials"], introspect=True
    )
    answer = await http.post(
        "/introspect",
        data={"token": issued["access_token"]},
        auth=(rs["client_id"], rs["client_secret"]),
    )
    assert answer.status_code == 200, answer.text
    info = answer.json()
    assert info["active"] is True
    assert (info["email"], info["groups"], info["sub"]) == (
        "alice@example.com",
        ALICE_GROUPS,
        claims["sub"],
    )
    assert "name" not in info


@pytest.mark.parametrize("verified", [False, None])
async def test_an_unverified_email_reaches_no_resource(
    app: Starlette,
    http: httpx2.AsyncClient,
    client_id: str,  # noqa: F811
    idp: FakeProvider,  # noqa: F811
    verified: bool | None,
) -> None:
    # anyone can create ceo@corp.example at some provider: a resource that trusts `email`
    # must never see an address the provider did not verify
    issued = await tokens_through_upstream(
        app, client_id, idp, CLAIMS_RESOURCE, email="ceo@corp.example", email_verified=verified
    )
    assert identity(app).email == "ceo@corp.example"  # kept on the account, not released
    for token in (issued["access_token"], await refreshed(http, client_id, issued)):
        claims = claims_of(app, token)
        assert "email" not in claims
        assert "email_verified" not in claims  # not asked for by this resource
    admin.add_resource(
        app.state.mcpauth,
        "http://127.0.0.1:8002/mcp",
        scopes=["mcp:tools"],
        default_scopes=["mcp:tools"],
        token_claims=["email", "email_verified"],
    )
    issued = await tokens_through_upstream(
        app, client_id, idp, "http://127.0.0.1:8002/mcp", email="ceo@corp.example",
        email_verified=verified,
    )  # fmt: skip
    claims = claims_of(app, issued["access_token"])
    assert "email" not in claims
    assert claims["email_verified"] is False
    rs = admin.add_client(
        app.state.mcpauth, name="RS", grant_types=["client_credentials"], introspect=True
    )
    answer = await http.post(
        "/introspect",
        data={"token": issued["access_token"]},
        auth=(rs["client_id"], rs["client_secret"]),
    )
    assert "email" not in answer.json()


async def test_a_resource_that_asks_for_nothing_gets_no_claims_about_the_person(
    app: Starlette,
    http: httpx2.AsyncClient,
    client_id: str,  # noqa: F811
    idp: FakeProvider,  # noqa: F811
) -> None:
    issued = await tokens_through_upstream(app, client_id, idp, RESOURCE, groups=ALICE_GROUPS)
    assert not PERSON & set(claims_of(app, issued["access_token"]))
    assert not PERSON & set(claims_of(app, await refreshed(http, client_id, issued)))


async def test_a_refresh_after_a_new_sign_in_carries_the_new_claims(
    app: Starlette,
    http: httpx2.AsyncClient,
    client_id: str,  # noqa: F811
    idp: FakeProvider,  # noqa: F811
) -> None:
    issued = await tokens_through_upstream(
        app, client_id, idp, CLAIMS_RESOURCE, groups=ALICE_GROUPS
    )
    await upstream_sign_in(app, client_id, idp, groups=["mcp-users"], email="alice.new@example.com")
    claims = claims_of(app, await refreshed(http, client_id, issued))
    assert (claims["email"], claims["groups"]) == ("alice.new@example.com", ["mcp-users"])
    await upstream_sign_in(app, client_id, idp, email="alice.new@example.com")  # no groups
    claims = claims_of(app, await refreshed(http, client_id, issued))
    assert claims["email"] == "alice.new@example.com"
    assert "groups" not in claims  # no group left: no claim


async def test_token_exchange_carries_the_target_s_claims_for_a_person_and_none_for_a_machine(
    app: Starlette,
    http: httpx2.AsyncClient,
    client_id: str,  # noqa: F811
    idp: FakeProvider,  # noqa: F811
) -> None:
    server = admin.add_client(
        app.state.mcpauth,
        name="MCP server",
        grant_types=["client_credentials", TOKEN_EXCHANGE],
        scopes=["mcp:tools"],
        exchange_from=[RESOURCE],
        exchange_to=[CLAIMS_RESOURCE],
    )
    auth = (server["client_id"], server["client_secret"])

    async def exchanged(subject: str) -> dict[str, Any]:
        response = await http.post(
            "/token",
            data={
                "grant_type": TOKEN_EXCHANGE,
                "subject_token": subject,
                "subject_token_type": "urn:ietf:params:oauth:token-type:access_token",
                "resource": CLAIMS_RESOURCE,
            },
            auth=auth,
        )
        assert response.status_code == 200, response.text
        return claims_of(app, response.json()["access_token"])

    person = await tokens_through_upstream(app, client_id, idp, RESOURCE, groups=ALICE_GROUPS)
    claims = await exchanged(person["access_token"])
    assert (claims["email"], claims["groups"]) == ("alice@example.com", ALICE_GROUPS)
    assert claims["act"] == {"sub": server["client_id"]}
    # the machine's own token for the resource that asks for claims, and exchanged: none
    machine = await http.post(
        "/token",
        data={"grant_type": "client_credentials", "resource": RESOURCE},
        auth=auth,
    )
    assert machine.status_code == 200, machine.text
    direct = await http.post(
        "/token",
        data={"grant_type": "client_credentials", "resource": CLAIMS_RESOURCE},
        auth=auth,
    )
    assert direct.status_code == 200, direct.text
    assert not PERSON & set(claims_of(app, direct.json()["access_token"]))
    assert not PERSON & set(await exchanged(machine.json()["access_token"]))


async def test_a_local_account_s_name_is_its_username_and_it_has_no_email(
    app: Starlette,
    http: httpx2.AsyncClient,
    client_id: str,  # noqa: F811
    password_hash: str,
) -> None:
    admin.add_resource(
        app.state.mcpauth, "http://127.0.0.1:8002/mcp", scopes=["x"], token_claims=PERSON
    )
    add_user(app, "carol", password_hash)

    async def with_the_password(page: httpx2.Response) -> httpx2.Response:
        login = next(f for f in forms(page.text) if "password" in f.fields)
        values = {**login.fields, "username": "carol", "password": PASSWORD}
        return await http.post(urljoin(str(page.url), login.action), data=values)

    token = await tokens_for(http, client_id, "http://127.0.0.1:8002/mcp", with_the_password)
    claims = claims_of(app, token["access_token"])
    assert claims["name"] == "carol"
    assert not {"email", "email_verified", "groups"} & set(claims)


def test_the_claim_flag_round_trips_through_resources_list(
    make_settings: Callable[..., Settings],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MCPAUTH_SECRET_KEY", TEST_SECRET)  # a PostgreSQL database needs it
    database = ["--database", make_settings().database_url]
    assert main(["db", "upgrade", *database]) == 0
    add = ["resources", "add", "https://mcp.example/a", "--claim", "groups", "--claim", "email"]
    assert main([*add, *database]) == 0
    assert main(["resources", "add", "https://mcp.example/b", *database]) == 0
    capsys.readouterr()
    assert main(["resources", "list", *database]) == 0
    listed = {r["uri"]: r["token_claims"] for r in json.loads(capsys.readouterr().out)}
    assert listed == {"https://mcp.example/a": ["email", "groups"], "https://mcp.example/b": []}
    with pytest.raises(SystemExit):  # argparse: not one of the choices
        main(["resources", "add", "https://mcp.example/c", "--claim", "phone", *database])
    assert resources_command.CLAIMS == PERSON_CLAIMS  # the parser's choices are the server's
    with (
        admin.Admin.open(make_settings()) as direct,
        pytest.raises(admin.AdminError, match="phone"),
    ):
        direct.add_resource("https://mcp.example/c", token_claims=["phone"])


async def test_an_id_jag_for_a_person_who_signed_in_upstream_carries_their_claims(
    make_app: Callable[..., Starlette],  # noqa: F811
    idp: FakeProvider,  # noqa: F811
) -> None:
    """The jwt-bearer grant names the account issuer#subject, the one upstream sign-in made."""
    key = jwt.generate_private_key("ES256")
    jwks = {"keys": [jwt.public_jwk(key.public_key(), kid="idp-1", alg="ES256")]}
    app = make_app(trusted_idps={idp.issuer: json.dumps(jwks)})
    admin.add_resource(
        app.state.mcpauth, CLAIMS_RESOURCE, scopes=["mcp:tools"], token_claims=["groups"]
    )
    async with await browser_for(app) as http:
        registered = (await register_public_client(http, APP_REDIRECT))["client_id"]
    await upstream_sign_in(app, registered, idp, groups=ALICE_GROUPS)
    agent = admin.add_client(app.state.mcpauth, name="agent", grant_types=[JWT_BEARER])
    now = int(time.time())
    assertion = jwt.encode(
        {
            "iss": idp.issuer,
            "sub": "alice-0001",
            "aud": ISSUER,
            "client_id": agent["client_id"],
            "resource": CLAIMS_RESOURCE,
            "jti": "jag-1",
            "iat": now,
            "exp": now + 300,
            "scope": "mcp:tools",
        },
        key,
        alg="ES256",
        kid="idp-1",
        typ="oauth-id-jag+jwt",
    )
    async with await browser_for(app) as http:
        response = await http.post(
            "/token",
            data={"grant_type": JWT_BEARER, "assertion": assertion},
            auth=(agent["client_id"], agent["client_secret"]),
        )
    assert response.status_code == 200, response.text
    claims = claims_of(app, response.json()["access_token"])
    assert claims["groups"] == ALICE_GROUPS
    assert identity(app).user_id == claims["sub"]
