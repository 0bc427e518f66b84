"""Refreshing a grant whose resource came to require two factors (docs/security.md T49): a grant
made with one factor refreshes no longer once its resource (``mcpauth resources edit URI
--require-mfa``) or the server (``require_mfa``) requires two, and the refusal leaves the
refresh token as it was; a grant made with two goes on refreshing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx2
import pytest
from starlette.applications import Starlette

from mcpauth import jwt
from mcpauth.server import Settings, admin, create_app

from ..conftest import ISSUER
from .conftest import RESOURCE
from .mfa_support import Clock, browser, signed_in_with_app
from .test_second_factor import authorize, exchanged
from .test_token import claims_of, refresh, tokens

pytestmark = pytest.mark.anyio


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def app(make_settings: Callable[..., Settings], clock: Clock) -> Starlette:
    return create_app(make_settings(), clock=clock)


def refused_for_one_factor(response: httpx2.Response) -> bool:
    body = response.json()
    return (
        response.status_code == 400
        and body["error"] == "invalid_grant"
        and body["error_description"] == "The resource now requires a second factor: sign in again"
    )


async def test_a_one_factor_grant_stops_refreshing_when_its_resource_requires_two(
    http: httpx2.AsyncClient, seeded: Starlette, public_client: dict[str, Any]
) -> None:
    cid = public_client["client_id"]
    issued = await tokens(http, public_client)  # a password alone
    admin.edit_resource(seeded.state.mcpauth, RESOURCE, require_mfa=True)
    response = await refresh(http, cid, issued["refresh_token"])
    assert refused_for_one_factor(response), response.text
    assert "access_token" not in response.json()
    # the refusal consumed nothing and revoked nothing: with the requirement lifted, it works
    admin.edit_resource(seeded.state.mcpauth, RESOURCE, require_mfa=False)
    again = await refresh(http, cid, issued["refresh_token"])
    assert again.status_code == 200, again.text
    assert claims_of(seeded, again.json()["access_token"])["amr"] == ["pwd"]


async def test_a_two_factor_grant_goes_on_refreshing_when_its_resource_requires_two(
    seeded: Starlette, public_client: dict[str, Any], clock: Clock
) -> None:
    secret, _ = await signed_in_with_app(seeded, clock)
    cid = public_client["client_id"]
    async with browser(seeded) as http:
        response, verifier = await authorize(http, cid, secret=secret, clock=clock)
        issued = await exchanged(http, cid, response, verifier)
        admin.edit_resource(seeded.state.mcpauth, RESOURCE, require_mfa=True)
        refreshed = await refresh(http, cid, issued["refresh_token"])
    assert refreshed.status_code == 200, refreshed.text
    assert jwt.unverified_claims(refreshed.json()["access_token"])["amr"] == ["pwd", "otp", "mfa"]


async def test_a_one_factor_grant_stops_refreshing_when_the_server_requires_two(
    http: httpx2.AsyncClient,
    seeded: Starlette,
    public_client: dict[str, Any],
    make_settings: Callable[..., Settings],
    clock: Clock,
) -> None:
    issued = await tokens(http, public_client)  # a password alone
    # the operator turns require_mfa on: the server starts again on the same database
    strict = create_app(make_settings(require_mfa=True), clock=clock)
    transport = httpx2.ASGITransport(app=strict)
    async with httpx2.AsyncClient(transport=transport, base_url=ISSUER) as again:
        response = await refresh(again, public_client["client_id"], issued["refresh_token"])
    assert refused_for_one_factor(response), response.text
