"""Token exchange and a resource that requires two factors (RFC 8693; docs/security.md T49,
T37): the exchanged token says how its person signed in (the subject token's ``amr``), and a
one-factor caller's token is not exchanged for a token to a resource that requires two."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx2
import pytest
from starlette.applications import Starlette

from mcpauth.oauth import TOKEN_EXCHANGE
from mcpauth.server import Settings, admin, create_app

from .conftest import RESOURCE
from .mfa_support import Clock, browser, signed_in_with_app
from .test_second_factor import authorize, exchanged
from .test_token_exchange import DOWNSTREAM, caller_token, exchange, verified

pytestmark = pytest.mark.anyio


@pytest.fixture
def clock() -> Clock:
    """Held still a minute behind: the exchange checks the subject token against the real
    time, and the sign-in moves the clock on past each code, never into the real future."""
    clock = Clock()
    clock.now -= 60
    return clock


@pytest.fixture
def app(make_settings: Callable[..., Settings], clock: Clock) -> Starlette:
    return create_app(make_settings(), clock=clock)


@pytest.fixture
def mcp_server(seeded: Starlette) -> dict[str, Any]:
    """The MCP server at RESOURCE, registered to act for its callers at DOWNSTREAM."""
    return admin.add_client(
        seeded.state.mcpauth,
        name="demo MCP server",
        grant_types=[TOKEN_EXCHANGE],
        scopes=["other:read"],
        exchange_from=[RESOURCE],
        exchange_to=[DOWNSTREAM],
    )


async def test_the_exchanged_token_says_how_its_person_signed_in(
    http: httpx2.AsyncClient,
    seeded: Starlette,
    public_client: dict[str, Any],
    mcp_server: dict[str, Any],
) -> None:
    caller = await caller_token(http, public_client)
    assert verified(seeded, caller["access_token"], RESOURCE)["amr"] == ["pwd"]
    response = await exchange(http, mcp_server, caller["access_token"])
    assert response.status_code == 200, response.text
    assert verified(seeded, response.json()["access_token"], DOWNSTREAM)["amr"] == ["pwd"]


async def test_a_one_factor_token_is_not_exchanged_for_a_resource_that_requires_two(
    http: httpx2.AsyncClient,
    seeded: Starlette,
    public_client: dict[str, Any],
    mcp_server: dict[str, Any],
) -> None:
    caller = await caller_token(http, public_client)  # a password alone
    admin.edit_resource(seeded.state.mcpauth, DOWNSTREAM, require_mfa=True)
    response = await exchange(http, mcp_server, caller["access_token"])
    assert response.status_code == 400
    body = response.json()
    assert body["error"] == "invalid_request"  # RFC 8693 §2.2.2: an unacceptable subject_token
    assert "requires a second factor" in body["error_description"]
    assert "access_token" not in body
    by_audience = await exchange(
        http, mcp_server, caller["access_token"], resource="", audience=DOWNSTREAM
    )
    assert by_audience.json()["error"] == "invalid_request"


async def test_a_two_factor_token_is_exchanged_for_a_resource_that_requires_two(
    seeded: Starlette, public_client: dict[str, Any], mcp_server: dict[str, Any], clock: Clock
) -> None:
    admin.edit_resource(seeded.state.mcpauth, DOWNSTREAM, require_mfa=True)
    secret, _ = await signed_in_with_app(seeded, clock)
    cid = public_client["client_id"]
    async with browser(seeded) as http:
        response, verifier = await authorize(http, cid, secret=secret, clock=clock)
        caller = await exchanged(http, cid, response, verifier)
        answer = await exchange(http, mcp_server, caller["access_token"])
    assert answer.status_code == 200, answer.text
    claims = verified(seeded, answer.json()["access_token"], DOWNSTREAM)
    assert claims["amr"] == ["pwd", "otp", "mfa"]
    assert claims["act"] == {"sub": mcp_server["client_id"]}


async def test_a_disabled_persons_token_is_not_exchanged(
    http: httpx2.AsyncClient,
    seeded: Starlette,
    public_client: dict[str, Any],
    mcp_server: dict[str, Any],
) -> None:
    """Disabling revokes a person's grants, which refuses their tokens; a token whose grant
    survives (here the flag set alone) is refused by the flag itself."""
    from sqlalchemy import update

    from mcpauth.server.storage.models import User

    caller = await caller_token(http, public_client)
    ctx = seeded.state.mcpauth
    with ctx.db.write() as session:
        session.execute(update(User).where(User.username == "alice").values(disabled=True))
    response = await exchange(http, mcp_server, caller["access_token"])
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_request"
    assert "disabled" in response.json()["error_description"]
