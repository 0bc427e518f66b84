"""RFC 7009 revocation and RFC 7662 introspection (docs/security.md T1, T29)."""

from __future__ import annotations

from typing import Any

import httpx2
import pytest
from freezegun import freeze_time
from starlette.applications import Starlette

from mcpauth.server import admin

from .conftest import RESOURCE
from .test_machine_to_machine import basic
from .test_token import get_code, redeem, refresh, tokens

pytestmark = pytest.mark.anyio


@pytest.fixture
def resource_server(seeded: Starlette) -> dict[str, Any]:
    return admin.add_client(
        seeded.state.mcpauth, name="RS", grant_types=["client_credentials"], introspect=True
    )


async def introspect(
    http: httpx2.AsyncClient, rs: dict[str, Any], token: str, **extra: str
) -> dict[str, Any]:
    response = await http.post(
        "/introspect",
        data={"token": token, **extra},
        headers=basic(rs["client_id"], rs["client_secret"]),
    )
    assert response.status_code == 200, response.text
    assert response.headers["cache-control"] == "no-store"
    return dict(response.json())


async def test_introspection_describes_an_active_access_token(
    http: httpx2.AsyncClient, public_client: dict[str, Any], resource_server: dict[str, Any]
) -> None:
    issued = await tokens(http, public_client)
    info = await introspect(http, resource_server, issued["access_token"])
    assert info["active"] is True
    assert info["aud"] == RESOURCE
    assert info["client_id"] == public_client["client_id"]
    assert info["scope"] == "mcp:tools"
    assert {"sub", "exp", "iat", "iss", "jti"} <= set(info)


async def test_introspection_describes_an_active_refresh_token(
    http: httpx2.AsyncClient, public_client: dict[str, Any], resource_server: dict[str, Any]
) -> None:
    issued = await tokens(http, public_client)
    info = await introspect(
        http, resource_server, issued["refresh_token"], token_type_hint="refresh_token"
    )
    assert info["active"] is True
    assert info["client_id"] == public_client["client_id"]


@pytest.mark.parametrize("token", ["garbage", "a.b.c", "x" * 5000, "eyJhbGciOiJub25lIn0.e30."])
async def test_garbage_is_inactive(
    http: httpx2.AsyncClient, resource_server: dict[str, Any], token: str
) -> None:
    assert await introspect(http, resource_server, token) == {"active": False}


async def test_an_expired_access_token_is_inactive(
    http: httpx2.AsyncClient, public_client: dict[str, Any], resource_server: dict[str, Any]
) -> None:
    with freeze_time() as frozen:
        issued = await tokens(http, public_client)
        frozen.tick(601)
        assert (await introspect(http, resource_server, issued["access_token"]))["active"] is False


async def test_t29_revoking_an_access_token_makes_it_inactive(
    http: httpx2.AsyncClient, public_client: dict[str, Any], resource_server: dict[str, Any]
) -> None:
    issued = await tokens(http, public_client)
    response = await http.post(
        "/revoke", data={"token": issued["access_token"], "client_id": public_client["client_id"]}
    )
    assert response.status_code == 200
    assert (await introspect(http, resource_server, issued["access_token"]))["active"] is False


async def test_t29_revoking_a_refresh_token_revokes_its_grant(
    http: httpx2.AsyncClient, public_client: dict[str, Any], resource_server: dict[str, Any]
) -> None:
    issued = await tokens(http, public_client)
    await http.post(
        "/revoke", data={"token": issued["refresh_token"], "client_id": public_client["client_id"]}
    )
    assert (
        await refresh(http, public_client["client_id"], issued["refresh_token"])
    ).status_code == 400
    assert (await introspect(http, resource_server, issued["access_token"]))["active"] is False


async def test_t1_a_replayed_code_makes_the_first_access_token_inactive(
    http: httpx2.AsyncClient, public_client: dict[str, Any], resource_server: dict[str, Any]
) -> None:
    cid = public_client["client_id"]
    code, verifier = await get_code(http, cid)
    first = await redeem(http, cid, code, verifier)
    assert (await introspect(http, resource_server, first.json()["access_token"]))["active"] is True
    await redeem(http, cid, code, verifier)
    assert (await introspect(http, resource_server, first.json()["access_token"]))[
        "active"
    ] is False


async def test_revoking_another_clients_token_does_nothing_but_answers_200(
    http: httpx2.AsyncClient, public_client: dict[str, Any], resource_server: dict[str, Any]
) -> None:
    from ..oauth import register_public_client

    other = await register_public_client(http)
    issued = await tokens(http, public_client)
    response = await http.post(
        "/revoke", data={"token": issued["refresh_token"], "client_id": other["client_id"]}
    )
    assert response.status_code == 200
    assert (
        await refresh(http, public_client["client_id"], issued["refresh_token"])
    ).status_code == 200


async def test_revoking_an_unknown_token_answers_200(
    http: httpx2.AsyncClient, public_client: dict[str, Any]
) -> None:
    response = await http.post(
        "/revoke", data={"token": "unknown", "client_id": public_client["client_id"]}
    )
    assert response.status_code == 200


async def test_revocation_requires_client_authentication(
    http: httpx2.AsyncClient, seeded: Starlette
) -> None:
    response = await http.post("/revoke", data={"token": "x"})
    assert response.status_code == 401
    assert response.json()["error"] == "invalid_client"


async def test_only_resource_servers_may_introspect(
    http: httpx2.AsyncClient, seeded: Starlette, public_client: dict[str, Any]
) -> None:
    bot = admin.add_client(seeded.state.mcpauth, name="Bot", grant_types=["client_credentials"])
    response = await http.post(
        "/introspect", data={"token": "x"}, headers=basic(bot["client_id"], bot["client_secret"])
    )
    assert response.status_code == 400
    assert response.json()["error"] == "unauthorized_client"
    public = await http.post(
        "/introspect", data={"token": "x", "client_id": public_client["client_id"]}
    )
    assert public.status_code in (400, 401)
