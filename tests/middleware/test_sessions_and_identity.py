"""Session binding (MCP RS-19/RS-20) and the caller as the application sees it."""

from __future__ import annotations

import subprocess
import sys
from types import ModuleType
from typing import Any

import pytest
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

import mcpauth.middleware
from mcpauth.middleware import Limits, current_token, verified_token

from .helpers import RESOURCE, FakeAuthorizationServer, RecordingApp, bearer, client_for

pytestmark = pytest.mark.anyio


async def test_a_session_issued_to_one_subject_is_refused_for_another_with_404_rs_19(
    auth_server: FakeAuthorizationServer, recording_app: RecordingApp, protect: Any
) -> None:
    recording_app.session_id = "session-abc"
    alice, mallory = auth_server.mint(sub="alice"), auth_server.mint(sub="mallory")
    async with client_for(protect()) as client:
        opened = await client.post("/mcp", headers=bearer(alice))
        assert opened.headers["mcp-session-id"] == "session-abc"
        recording_app.session_id = None
        hijack = await client.post(
            "/mcp", headers={**bearer(mallory), "Mcp-Session-Id": "session-abc"}
        )
        owner = await client.post(
            "/mcp", headers={**bearer(alice), "Mcp-Session-Id": "session-abc"}
        )
    assert hijack.status_code == 404
    assert hijack.json()["error"]["message"] == "Session not found"
    assert owner.status_code == 200
    assert len(recording_app.calls) == 2


async def test_the_same_user_through_another_client_cannot_use_the_session(
    auth_server: FakeAuthorizationServer, recording_app: RecordingApp, protect: Any
) -> None:
    recording_app.session_id = "s1"
    async with client_for(protect()) as client:
        await client.post("/mcp", headers=bearer(auth_server.mint(client_id="a")))
        other = await client.post(
            "/mcp", headers={**bearer(auth_server.mint(client_id="b")), "Mcp-Session-Id": "s1"}
        )
    assert other.status_code == 404


async def test_an_unknown_session_id_is_refused_so_eviction_fails_closed_rs_20(
    auth_server: FakeAuthorizationServer, recording_app: RecordingApp, protect: Any
) -> None:
    middleware = protect(limits=Limits(session_table_size=2))
    async with client_for(middleware) as client:
        for sid in ("s1", "s2", "s3"):
            recording_app.session_id = sid
            await client.post("/mcp", headers=bearer(auth_server.mint()))
        recording_app.session_id = None
        evicted = await client.post(
            "/mcp", headers={**bearer(auth_server.mint()), "Mcp-Session-Id": "s1"}
        )
        kept = await client.post(
            "/mcp", headers={**bearer(auth_server.mint()), "Mcp-Session-Id": "s3"}
        )
        guessed = await client.get(
            "/mcp", headers={**bearer(auth_server.mint()), "Mcp-Session-Id": "zz"}
        )
    assert (evicted.status_code, kept.status_code, guessed.status_code) == (404, 200, 404)
    assert len(middleware.sessions) == 2


async def test_a_deleted_session_is_forgotten(
    auth_server: FakeAuthorizationServer, recording_app: RecordingApp, protect: Any
) -> None:
    recording_app.session_id = "s1"
    token = auth_server.mint()
    middleware = protect()
    async with client_for(middleware) as client:
        await client.post("/mcp", headers=bearer(token))
        recording_app.session_id = None
        deleted = await client.delete("/mcp", headers={**bearer(token), "Mcp-Session-Id": "s1"})
        after = await client.get("/mcp", headers={**bearer(token), "Mcp-Session-Id": "s1"})
    assert (deleted.status_code, after.status_code) == (200, 404)


async def test_stateless_servers_work_without_session_ids(
    auth_server: FakeAuthorizationServer, recording_app: RecordingApp, protect: Any
) -> None:
    async with client_for(protect()) as client:
        for _ in range(3):
            assert (
                await client.post("/mcp", headers=bearer(auth_server.mint()))
            ).status_code == 200


async def test_the_caller_is_in_request_user_request_auth_and_the_sdk_access_token(
    auth_server: FakeAuthorizationServer, protect: Any
) -> None:
    async def whoami(request: Request) -> JSONResponse:
        sdk_token = get_access_token()
        assert sdk_token is not None
        assert isinstance(request.user, AuthenticatedUser)
        token = verified_token(request)
        assert token is not None
        assert current_token() is token
        return JSONResponse(
            {
                "authenticated": request.user.is_authenticated,
                "auth_scopes": request.auth.scopes,
                "client_id": sdk_token.client_id,
                "subject": sdk_token.subject,
                "scopes": sdk_token.scopes,
                "resource": sdk_token.resource,
                "expires_at": sdk_token.expires_at,
                "iss": (sdk_token.claims or {}).get("iss"),
                "token": sdk_token.token,
            }
        )

    app = Starlette(routes=[Route("/mcp", whoami)])
    raw = auth_server.mint(sub="alice", client_id="c1", scope="a b", exp=2_000_000_000)
    async with client_for(protect(app=app)) as client:
        seen = (await client.get("/mcp", headers=bearer(raw))).json()
    assert seen["authenticated"] is True
    assert seen["auth_scopes"] == ["a", "b"]
    assert (seen["client_id"], seen["subject"], seen["scopes"]) == ("c1", "alice", ["a", "b"])
    assert (seen["resource"], seen["expires_at"]) == (RESOURCE, 2_000_000_000)
    assert seen["iss"] == auth_server.issuer
    # MCP RS-17: the application never receives the caller's token.
    assert seen["token"].startswith("sha256:")
    assert raw not in seen["token"]
    assert get_access_token() is None
    assert current_token() is None


async def test_the_app_never_sees_the_token_and_nothing_logs_it_rs_17_rs_18(
    auth_server: FakeAuthorizationServer,
    recording_app: RecordingApp,
    protect: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    token = auth_server.mint()
    caplog.set_level("DEBUG")
    async with client_for(protect()) as client:
        await client.get("/mcp", headers=bearer(token))
        await client.get("/mcp", headers=bearer(token + "x"))
    assert token not in caplog.text
    assert "authorization" not in recording_app.calls[0]["headers"]
    assert token not in str(recording_app.calls)


def test_importing_the_middleware_loads_no_server_authlib_sqlmodel_or_mcp() -> None:
    code = (
        "import sys, mcpauth.middleware\n"
        "bad = [m for m in ('mcpauth.server', 'authlib', 'sqlmodel', 'mcp') if m in sys.modules]\n"
        "print(','.join(bad))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == ""


def test_the_public_api_is_exactly_what_all_lists() -> None:
    exported = set(mcpauth.middleware.__all__)
    public = {
        name
        for name, value in vars(mcpauth.middleware).items()
        if not name.startswith("_") and not isinstance(value, ModuleType)
    }
    assert exported == public
    for name in exported:
        assert getattr(mcpauth.middleware, name).__doc__, name


async def test_without_the_sdk_request_user_is_a_starlette_user_named_by_subject(
    auth_server: FakeAuthorizationServer,
    recording_app: RecordingApp,
    protect: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from mcpauth.middleware import TokenUser, _sdk

    monkeypatch.setattr(_sdk, "_sdk", lambda: None)
    seen: list[Any] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(scope["user"])
        await recording_app(scope, receive, send)

    async with client_for(protect(app=app)) as client:
        await client.get("/mcp", headers=bearer(auth_server.mint(sub="dave", client_id="c9")))
    user = seen[0]
    assert isinstance(user, TokenUser)
    assert (user.display_name, user.client_id, user.is_authenticated) == ("dave", "c9", True)
    assert recording_app.calls[0]["scopes"] == ["mcp:basic"]


@pytest.mark.parametrize("authorized", [False, True])
async def test_websockets_never_reach_the_app_with_or_without_a_token(
    authorized: bool, auth_server: FakeAuthorizationServer, protect: Any
) -> None:
    reached: list[Any] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        reached.append(scope["user"])

    headers = [(b"authorization", f"Bearer {auth_server.mint()}".encode())] if authorized else []
    sent: list[Any] = []

    async def send(message: Any) -> None:
        sent.append(message)

    async def receive() -> Any:
        return {"type": "websocket.connect"}

    scope = {"type": "websocket", "path": "/mcp", "headers": headers}
    await protect(app=app)(scope, receive, send)
    assert reached == []
    assert sent == [{"type": "websocket.close", "code": 1008}]
