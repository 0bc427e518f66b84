"""The token endpoint as a bare ASGI app: body limits, disconnects, malformed credentials, and
the event-loop path for fully cached client_credentials requests answering exactly as the
worker-thread path does."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx2
import pytest
from starlette.applications import Starlette

from mcpauth.server import admin
from mcpauth.server.clients.authentication import (
    authenticated_from_memory,
    presented_credentials,
)
from mcpauth.server.tokens import endpoint as token_endpoint

from .conftest import RESOURCE

pytestmark = pytest.mark.anyio
FORM = "application/x-www-form-urlencoded"


@pytest.fixture
def bot(seeded: Starlette) -> dict[str, Any]:
    return admin.add_client(
        seeded.state.mcpauth, name="bot", grant_types=["client_credentials"], scopes=["mcp:tools"]
    )


def basic(client_id: str, secret: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{client_id}:{secret}".encode()).decode()}


async def test_a_declared_body_over_the_limit_is_413_without_reading_it(
    http: httpx2.AsyncClient,
) -> None:
    response = await http.post(
        "/token", content=b"", headers={"content-type": FORM, "content-length": "999999999"}
    )
    assert response.status_code == 413
    assert response.json()["error"] == "invalid_request"
    assert response.headers["cache-control"] == "no-store"


async def test_a_streamed_body_over_the_limit_is_413(http: httpx2.AsyncClient) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(80):  # 80 KiB, no Content-Length
            yield b"a" * 1024

    response = await http.post("/token", content=chunks(), headers={"content-type": FORM})
    assert response.status_code == 413


async def test_a_client_that_disconnects_mid_body_gets_nothing_and_logs_nothing(
    seeded: Starlette, caplog: pytest.LogCaptureFixture
) -> None:
    messages = iter(
        [
            {"type": "http.request", "body": b"grant_type=client", "more_body": True},
            {"type": "http.disconnect"},
        ]
    )
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return next(messages)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/token",
        "raw_path": b"/token",
        "root_path": "",
        "query_string": b"",
        "headers": [(b"content-type", FORM.encode())],
        "client": ("203.0.113.7", 5000),
        "server": ("127.0.0.1", 9000),
    }
    await seeded(scope, receive, send)
    assert sent == []
    assert not [r for r in caplog.records if r.levelname == "ERROR"]


@pytest.mark.parametrize(
    "credentials",
    [b"\xff\xfe:secret", b"client:\xff", b"no-colon-at-all"],
    ids=["id-not-utf8", "secret-not-utf8", "no-colon"],
)
async def test_malformed_basic_credentials_are_401_invalid_client(
    http: httpx2.AsyncClient, credentials: bytes
) -> None:
    header = "Basic " + base64.b64encode(credentials).decode()
    response = await http.post(
        "/token", data={"grant_type": "client_credentials"}, headers={"Authorization": header}
    )
    assert response.status_code == 401
    assert response.json()["error"] == "invalid_client"


async def test_cached_requests_skip_the_worker_thread_and_answer_alike(
    http: httpx2.AsyncClient,
    seeded: Starlette,
    bot: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hops: list[str] = []
    real = token_endpoint.run_blocking

    async def counted(fn: Callable[..., Any], *args: Any) -> Any:
        hops.append(fn.__name__)
        return await real(fn, *args)

    monkeypatch.setattr(token_endpoint, "run_blocking", counted)
    headers = basic(bot["client_id"], bot["client_secret"])
    form = {"grant_type": "client_credentials", "resource": RESOURCE}
    cold = await http.post("/token", data=form, headers=headers)
    warm = await http.post("/token", data=form, headers=headers)
    assert hops == ["_respond"]  # the first loaded the caches in a thread, the second did not
    assert cold.status_code == warm.status_code == 200
    assert cold.headers["cache-control"] == warm.headers["cache-control"] == "no-store"
    first, second = cold.json(), warm.json()
    assert first.keys() == second.keys() == {"access_token", "token_type", "expires_in", "scope"}
    assert (first["scope"], first["expires_in"]) == (second["scope"], second["expires_in"])
    assert first["access_token"] != second["access_token"]


async def test_a_wrong_secret_is_never_answered_on_the_event_loop(
    http: httpx2.AsyncClient, seeded: Starlette, bot: dict[str, Any]
) -> None:
    ctx = seeded.state.mcpauth
    right = basic(bot["client_id"], bot["client_secret"])["Authorization"]
    wrong = basic(bot["client_id"], bot["client_secret"] + "x")["Authorization"]
    form = {"grant_type": "client_credentials"}
    assert (await http.post("/token", data=form, headers={"Authorization": right})).is_success
    address = "203.0.113.7"
    now = ctx.now()
    found = authenticated_from_memory(ctx, presented_credentials(right, form), address, now)
    assert found is not None
    assert found.client_id == bot["client_id"]
    # a failure is counted with a database write: that belongs in a worker thread
    assert authenticated_from_memory(ctx, presented_credentials(wrong, form), address, now) is None
    failed = await http.post("/token", data=form, headers={"Authorization": wrong})
    assert failed.status_code == 401
