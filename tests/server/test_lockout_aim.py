"""Throttling that an outsider cannot aim: failed client authentication and failed sign-ins
count per (client or account, address) and per address, so wrong secrets or passwords naming a
victim from many addresses do not lock the victim out, while a guesser from one address is
slowed; a client's request budget counts only its authenticated requests (runs on SQLite and
PostgreSQL)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx2
import pytest
from starlette.applications import Starlette

from mcpauth.server import Settings, admin, create_app

from ..conftest import ISSUER
from ..oauth import submit
from .conftest import PASSWORD, add_user

pytestmark = [pytest.mark.anyio, pytest.mark.every_engine]  # storage: on both engines


@asynccontextmanager
async def from_address(app: Starlette, address: str) -> AsyncIterator[httpx2.AsyncClient]:
    transport = httpx2.ASGITransport(app=app, client=(address, 40000))
    async with httpx2.AsyncClient(transport=transport, base_url=ISSUER) as http:
        yield http


async def token(app: Starlette, address: str, client_id: str, secret: str) -> int:
    async with from_address(app, address) as http:
        response = await http.post(
            "/token", data={"grant_type": "client_credentials"}, auth=(client_id, secret)
        )
    return response.status_code


def machine_app(make_settings: Callable[..., Settings], **settings: Any) -> tuple[Starlette, Any]:
    app = create_app(make_settings(**settings))
    ctx = app.state.mcpauth
    admin.add_resource(
        ctx, "http://127.0.0.1:8000/mcp", scopes=["a"], default_scopes=["a"], is_default=True
    )
    bot = admin.add_client(ctx, name="bot", grant_types=["client_credentials"])
    return app, bot


async def test_wrong_secrets_from_twenty_addresses_do_not_lock_the_real_client_out(
    make_settings: Callable[..., Settings],
) -> None:
    app, bot = machine_app(make_settings)
    for index in range(20):
        assert await token(app, f"198.51.100.{index + 1}", bot["client_id"], "guess") == 401
    assert await token(app, "203.0.113.50", bot["client_id"], bot["client_secret"]) == 200


async def test_a_guesser_from_one_address_is_slowed(
    make_settings: Callable[..., Settings],
) -> None:
    app, bot = machine_app(make_settings)
    statuses = [await token(app, "198.51.100.9", bot["client_id"], "guess") for _ in range(21)]
    assert statuses[:20] == [401] * 20
    assert statuses[20] == 429
    assert await token(app, "203.0.113.50", bot["client_id"], bot["client_secret"]) == 200


async def test_unauthenticated_requests_naming_a_client_do_not_spend_its_budget(
    make_settings: Callable[..., Settings],
) -> None:
    app, bot = machine_app(make_settings, rate_limit_token=2)
    for index in range(5):  # wrong secrets naming the client, from elsewhere
        assert await token(app, f"198.51.100.{index + 1}", bot["client_id"], "nope") == 401
    for index in range(5):  # revocations naming it, unauthenticated
        async with from_address(app, f"192.0.2.{index + 1}") as http:
            await http.post("/revoke", data={"token": "x"}, auth=(bot["client_id"], "nope"))
    real = [await token(app, "203.0.113.50", bot["client_id"], bot["client_secret"])]
    real.append(await token(app, "203.0.113.51", bot["client_id"], bot["client_secret"]))
    # its own two requests use its budget of two; the third is over it, from any address
    real.append(await token(app, "203.0.113.52", bot["client_id"], bot["client_secret"]))
    assert real == [200, 200, 429]


async def sign_in_status(app: Starlette, address: str, password: str) -> int:
    async with from_address(app, address) as http:
        page = await http.get("/account")
        response = await submit(http, page, {"username": "alice", "password": password})
    if response.status_code == 303:
        return 303
    return 429 if response.status_code == 429 else 200 if "Wrong" in response.text else 0


async def test_wrong_passwords_from_other_addresses_do_not_lock_the_user_out(
    make_settings: Callable[..., Settings], password_hash: str
) -> None:
    app = create_app(make_settings(login_max_failures=3, rate_limit_login=0))
    add_user(app, "alice", password_hash)
    for index in range(6):  # twice the limit, spread over addresses
        assert await sign_in_status(app, f"198.51.100.{index + 1}", "wrong") == 200
    assert await sign_in_status(app, "203.0.113.50", PASSWORD) == 303
    # the guesser from one address is slowed: locked after three failures
    statuses = [await sign_in_status(app, "198.51.100.99", "wrong") for _ in range(4)]
    assert statuses == [200, 200, 200, 429]
    assert await sign_in_status(app, "203.0.113.51", PASSWORD) == 303
