"""Key rotation never rejects a valid token: the next key is published at once, signs only
after the delay, and the old key stays published until its last token expired; checked with
the protected-resource middleware as the verifier."""

from __future__ import annotations

import base64
from collections.abc import Callable

import httpx2
import pytest
from freezegun import freeze_time
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from mcpauth import jwt
from mcpauth.middleware import ProtectedResourceMiddleware
from mcpauth.server import Settings, admin, create_app

from ..conftest import ISSUER

pytestmark = pytest.mark.anyio
RESOURCE = "http://127.0.0.1:8000/mcp"


async def ok(request: Request) -> Response:
    return JSONResponse({"ok": True})


async def test_no_valid_token_is_rejected_during_a_rotation(
    make_settings: Callable[..., Settings],
) -> None:
    with freeze_time("2026-06-01 12:00:00") as frozen:
        server = create_app(make_settings(key_rotation_delay=120, access_token_ttl=600))
        ctx = server.state.mcpauth
        admin.add_resource(ctx, RESOURCE, scopes=["a"], default_scopes=["a"], is_default=True)
        bot = admin.add_client(ctx, name="bot", grant_types=["client_credentials"])
        basic = base64.b64encode(f"{bot['client_id']}:{bot['client_secret']}".encode()).decode()
        to_server = httpx2.AsyncClient(transport=httpx2.ASGITransport(server), base_url=ISSUER)
        resource_app = ProtectedResourceMiddleware(
            Starlette(routes=[Route("/mcp", ok, methods=["POST"])]),
            resource=RESOURCE,
            authorization_servers=[ISSUER],
            http_client=to_server,
        )
        to_resource = httpx2.AsyncClient(
            transport=httpx2.ASGITransport(resource_app), base_url="http://127.0.0.1:8000"
        )

        async def token() -> str:
            response = await to_server.post(
                "/token",
                data={"grant_type": "client_credentials"},
                headers={"Authorization": f"Basic {basic}"},
            )
            assert response.status_code == 200
            return str(response.json()["access_token"])

        async def accepted(access_token: str) -> bool:
            response = await to_resource.post(
                "/mcp",
                json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                headers={"Authorization": f"Bearer {access_token}"},
            )
            return response.status_code == 200

        old = await token()
        assert await accepted(old)
        rotated = admin.rotate_keys(ctx)
        frozen.tick(10)
        during = await token()  # still signed by the old key: the new one is only published
        assert jwt.unverified_header(during)["kid"] != rotated["kid"]
        assert await accepted(old)
        assert await accepted(during)
        frozen.tick(120)
        new = await token()
        assert jwt.unverified_header(new)["kid"] == rotated["kid"]
        assert await accepted(new)  # a kid the middleware had not seen: one JWKS refetch
        assert await accepted(old)
        assert await accepted(during)
        frozen.tick(660)  # past the old key's last token (signed by t+120, 600 s, +60 s leeway)
        kids = {key["kid"] for key in (await to_server.get("/jwks.json")).json()["keys"]}
        assert kids == {rotated["kid"]}
        assert await accepted(await token())
        await to_server.aclose()
        await to_resource.aclose()
