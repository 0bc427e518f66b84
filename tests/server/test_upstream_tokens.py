"""Upstream tokens kept for downstream APIs (docs/security.md T37, T38): with ``keep_tokens``
the provider's access and refresh tokens of a person who signs in are sealed at rest; an MCP
server allowed to exchange gets the caller's token at the provider by RFC 8693 token exchange
(``audience`` = the provider), refreshed when it has expired; revoking an application on
``/account`` or removing the account deletes them; a refused refresh deletes them too."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx2
import jwt as pyjwt
import pytest
from sqlmodel import select
from starlette.applications import Starlette

from mcpauth.errors import OAuthError
from mcpauth.middleware.exchange import NoCaller, TokenExchanger
from mcpauth.oauth import TOKEN_EXCHANGE
from mcpauth.server import admin
from mcpauth.server.storage import upstream_tokens
from mcpauth.server.storage.models import UpstreamToken

from ..conftest import ISSUER
from ..oauth import follow, pkce_pair
from .conftest import RESOURCE
from .test_account import revoke_form
from .test_upstream_sign_in import (  # noqa: F401 - fixtures used by name
    APP_REDIRECT,
    Clock,
    approve_and_redeem,
    client_id,
    clock,
    come_back,
    idp,
    make_app,
    other_idp,
    press,
    sign_in_page,
)
from .upstream_fake import FakeProvider

pytestmark = pytest.mark.anyio

ACCESS = "urn:ietf:params:oauth:token-type:access_token"


@pytest.fixture
def app(make_app: Callable[..., Starlette], clock: Clock) -> Starlette:  # noqa: F811
    """The module's own app; its clock at the wall clock's time, as the subject tokens are
    checked against the wall clock (PyJWT's)."""
    clock.now = time.time()
    return make_app(policy={"keep_tokens": True, "release_to": [RESOURCE]})


@pytest.fixture
def mcp_server(app: Starlette) -> dict[str, Any]:
    return admin.add_client(
        app.state.mcpauth,
        name="notes MCP server",
        grant_types=[TOKEN_EXCHANGE],
        exchange_from=[RESOURCE],
        exchange_to=[RESOURCE],
    )


async def signed_in(http: httpx2.AsyncClient, client_id: str, idp: FakeProvider) -> str:  # noqa: F811
    """Sign in through the provider, approve, redeem: the MCP access token."""
    verifier, challenge = pkce_pair()
    page = await sign_in_page(http, client_id, challenge)
    url = (await press(http, page)).headers["location"]
    consent = await follow(http, await come_back(http, idp.approve(url)))
    return str((await approve_and_redeem(http, consent, client_id, verifier))["access_token"])


async def exchange(
    http: httpx2.AsyncClient, server: dict[str, Any], subject: str, audience: str = "idp"
) -> httpx2.Response:
    return await http.post(
        "/token",
        data={
            "grant_type": TOKEN_EXCHANGE, "subject_token": subject,
            "subject_token_type": ACCESS, "requested_token_type": ACCESS, "audience": audience,
        },
        auth=(server["client_id"], server["client_secret"]),
    )  # fmt: skip


def rows(app: Starlette) -> list[UpstreamToken]:
    with app.state.mcpauth.db.read() as session:
        return list(session.exec(select(UpstreamToken)).all())


async def test_the_tokens_are_sealed_and_exchanged_for_the_caller(
    app: Starlette,
    http: httpx2.AsyncClient,
    client_id: str,  # noqa: F811
    idp: FakeProvider,  # noqa: F811
    mcp_server: dict[str, Any],
) -> None:
    subject = await signed_in(http, client_id, idp)
    (row,) = rows(app)
    assert "upstream-access-token" not in row.sealed
    assert "upstream-refresh" not in row.sealed
    key = app.state.mcpauth.upstream_token_key
    opened = upstream_tokens.unseal(key, row.user_id, row.provider_id, row.sealed)
    assert opened is not None
    assert opened.access_token == "upstream-access-token"
    # the row cannot be moved to another person, nor opened with another key
    assert upstream_tokens.unseal(key, "someone-else", row.provider_id, row.sealed) is None
    assert upstream_tokens.unseal(b"k" * 32, row.user_id, row.provider_id, row.sealed) is None
    response = await exchange(http, mcp_server, subject)
    assert response.status_code == 200, response.text
    assert response.json()["access_token"] == "upstream-access-token"
    assert response.json()["issued_token_type"] == ACCESS
    assert response.json()["token_type"] == "Bearer"


async def test_an_expired_token_is_refreshed_and_a_refused_refresh_deletes_it(
    app: Starlette,
    http: httpx2.AsyncClient,
    client_id: str,  # noqa: F811
    idp: FakeProvider,  # noqa: F811
    clock: Clock,  # noqa: F811
    mcp_server: dict[str, Any],
) -> None:
    subject = await signed_in(http, client_id, idp)
    clock.now += 290  # within the refresh margin of the 300-second upstream token
    refreshed = await exchange(http, mcp_server, subject)
    assert refreshed.status_code == 200, refreshed.text
    assert refreshed.json()["access_token"] == "upstream-access-2"
    assert idp.token_requests[-1]["grant_type"] == "refresh_token"
    assert (await exchange(http, mcp_server, subject)).json()["access_token"] == "upstream-access-2"
    idp.refresh_tokens.clear()  # the person revoked mcpauth at the provider
    clock.now += 290
    refused = await exchange(http, mcp_server, subject)
    assert refused.status_code == 400
    assert refused.json()["error"] == "invalid_grant"
    assert rows(app) == []


async def test_only_listed_resources_and_providers_that_keep_tokens_get_them(
    app: Starlette,
    http: httpx2.AsyncClient,
    client_id: str,  # noqa: F811
    idp: FakeProvider,  # noqa: F811
    mcp_server: dict[str, Any],
) -> None:
    subject = await signed_in(http, client_id, idp)
    other = await exchange(http, mcp_server, subject, audience="other")  # keeps no tokens
    assert other.json()["error"] == "invalid_target"
    outsider = admin.add_client(app.state.mcpauth, name="bot", grant_types=["client_credentials"])
    not_allowed = await exchange(http, outsider, subject)
    assert not_allowed.json()["error"] == "unauthorized_client"


async def test_the_middleware_s_exchanger_gets_the_caller_s_upstream_token_in_one_call(
    http: httpx2.AsyncClient,
    client_id: str,  # noqa: F811
    idp: FakeProvider,  # noqa: F811
    mcp_server: dict[str, Any],
) -> None:
    """``TokenExchanger.upstream_token``: audience = the provider's id, cached per caller and
    provider, the authorization server's refusal raised with its error."""
    subject = await signed_in(http, client_id, idp)
    sent: list[str] = []

    async def count(request: httpx2.Request) -> None:
        sent.append(request.url.path)

    counted = httpx2.AsyncClient(
        transport=http._transport, base_url=ISSUER, event_hooks={"request": [count]}
    )
    exchanger = TokenExchanger(
        issuer=ISSUER,
        client_id=mcp_server["client_id"],
        client_secret=mcp_server["client_secret"],
        token_endpoint=f"{ISSUER}/token",
        http=counted,
    )
    first = await exchanger.upstream_token("idp", subject_token=subject)
    assert first == "upstream-access-token"
    again = await exchanger.upstream_token("idp", subject_token=subject)
    assert again == first
    assert sent == ["/token"]  # the second answer came from the cache
    with pytest.raises(OAuthError) as refused:
        await exchanger.upstream_token("other", subject_token=subject)  # keeps no tokens
    assert refused.value.error == "invalid_target"
    with pytest.raises(NoCaller):
        await exchanger.upstream_token("idp")  # outside a request: no caller


async def test_revoking_the_application_or_removing_the_account_deletes_them(
    app: Starlette,
    http: httpx2.AsyncClient,
    client_id: str,  # noqa: F811
    idp: FakeProvider,  # noqa: F811
    mcp_server: dict[str, Any],
) -> None:
    subject = await signed_in(http, client_id, idp)
    assert len(rows(app)) == 1
    action, revoke = await revoke_form(http, await http.get("/account"))
    done = await http.post(action, data=revoke.fields)
    assert done.status_code == 303, done.text
    assert rows(app) == []
    again = await exchange(http, mcp_server, subject)
    assert again.status_code == 400  # the subject token died with its grant
    # a second sign-in (another browser) keeps new tokens; removing the account deletes them
    transport = httpx2.ASGITransport(app=app)
    async with httpx2.AsyncClient(transport=transport, base_url=str(http.base_url)) as browser:
        await signed_in(browser, client_id, idp)
    (row,) = rows(app)
    ctx = app.state.mcpauth
    username = next(u["username"] for u in admin.list_users(ctx) if u["id"] == row.user_id)
    admin.remove_user(ctx, username)
    assert rows(app) == []


def test_release_to_needs_keep_tokens() -> None:
    from mcpauth.server.config import UpstreamProvider

    with pytest.raises(ValueError, match="keep_tokens"):
        UpstreamProvider(
            id="x", name="X", issuer="https://x.example", client_id="c", release_to=[RESOURCE]
        )


async def test_a_refresh_refused_for_another_reason_keeps_the_tokens(
    app: Starlette,
    http: httpx2.AsyncClient,
    client_id: str,  # noqa: F811
    idp: FakeProvider,  # noqa: F811
    clock: Clock,  # noqa: F811
    mcp_server: dict[str, Any],
) -> None:
    """invalid_client is the operator's to fix (a rotated client secret, say): the person's
    grant at the provider is intact, so nothing is deleted."""
    subject = await signed_in(http, client_id, idp)

    async def wrong_client(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(401, json={"error": "invalid_client"})

    idp.token_response = wrong_client
    clock.now += 290
    answer = await exchange(http, mcp_server, subject)
    assert answer.status_code == 503, answer.text
    assert answer.json()["error"] == "temporarily_unavailable"
    assert len(rows(app)) == 1
    idp.token_response = None
    assert (await exchange(http, mcp_server, subject)).status_code == 200


@pytest.mark.every_engine  # concurrency: row locks differ between the engines
async def test_a_refresh_that_lost_a_race_returns_what_the_winner_kept(
    app: Starlette,
    http: httpx2.AsyncClient,
    client_id: str,  # noqa: F811
    idp: FakeProvider,  # noqa: F811
    clock: Clock,  # noqa: F811
    mcp_server: dict[str, Any],
) -> None:
    """Two requests (or replicas) refresh the same rotating refresh token: the provider gives
    the second invalid_grant, and that must not delete the tokens the first has just kept."""
    subject = await signed_in(http, client_id, idp)
    ctx = app.state.mcpauth
    (row,) = rows(app)

    async def first_wins(request: httpx2.Request) -> httpx2.Response:
        winner = upstream_tokens.UpstreamTokens(
            "winner-access", "winner-refresh", int(clock.now) + 300
        )
        with ctx.db.write() as session:
            upstream_tokens.keep(
                session,
                ctx.upstream_token_key,
                row.user_id,
                row.provider_id,
                winner,
                int(clock.now),
            )
        return httpx2.Response(400, json={"error": "invalid_grant"})

    idp.token_response = first_wins
    clock.now += 290
    answer = await exchange(http, mcp_server, subject)
    assert answer.status_code == 200, answer.text
    assert answer.json()["access_token"] == "winner-access"
    (kept,) = rows(app)
    opened = upstream_tokens.unseal(
        ctx.upstream_token_key, kept.user_id, kept.provider_id, kept.sealed
    )
    assert opened is not None
    assert opened.refresh_token == "winner-refresh"


async def test_tokens_deleted_while_a_refresh_runs_stay_deleted(
    app: Starlette,
    http: httpx2.AsyncClient,
    client_id: str,  # noqa: F811
    idp: FakeProvider,  # noqa: F811
    clock: Clock,  # noqa: F811
    mcp_server: dict[str, Any],
) -> None:
    """The person revokes the application on /account while an exchange is refreshing at the
    provider: the refreshed tokens are not written back, and nothing is handed out."""
    subject = await signed_in(http, client_id, idp)
    (row,) = rows(app)

    async def revoked_meanwhile(request: httpx2.Request) -> httpx2.Response:
        with app.state.mcpauth.db.write() as session:
            upstream_tokens.forget(session, row.user_id)
        return idp.token(request)

    idp.token_response = revoked_meanwhile
    clock.now += 290
    answer = await exchange(http, mcp_server, subject)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"] == "invalid_grant"
    assert idp.token_requests[-1]["grant_type"] == "refresh_token"
    assert rows(app) == []


async def test_a_machine_s_token_has_no_upstream_token_and_none_outlives_the_caller_s(
    app: Starlette,
    http: httpx2.AsyncClient,
    client_id: str,  # noqa: F811
    idp: FakeProvider,  # noqa: F811
    mcp_server: dict[str, Any],
) -> None:
    subject = await signed_in(http, client_id, idp)
    answer = await exchange(http, mcp_server, subject)
    assert answer.status_code == 200, answer.text
    caller = pyjwt.decode(subject, options={"verify_signature": False})
    assert answer.json()["expires_in"] <= caller["exp"] - caller["iat"]
    bot = admin.add_client(
        app.state.mcpauth, name="bot", grant_types=["client_credentials"], scopes=["mcp:tools"]
    )
    machine = await http.post(
        "/token",
        data={"grant_type": "client_credentials", "resource": RESOURCE},
        auth=(bot["client_id"], bot["client_secret"]),
    )
    assert machine.status_code == 200, machine.text
    refused = await exchange(http, mcp_server, machine.json()["access_token"])
    assert refused.status_code == 400
    assert refused.json()["error"] == "invalid_request"
