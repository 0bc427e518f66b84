"""The per-caller rate limit of one process (``Limits(rate_limit=, rate_window=)``): a caller's
requests within the limit pass, the next gets 429 with ``Retry-After`` and a JSON-RPC error
body and never reaches the application; other callers keep their own counts; a window ends and
the count starts again; the in-process record is bounded. And ``SharedState``, its checks and
what it refuses: a URL that is not Redis, a ``DPoP(replay=)`` of your own beside it, the
``redis`` package missing; a middleware without it never imports ``redis``."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

import mcpauth.middleware
from mcpauth.errors import ConfigurationError
from mcpauth.middleware import DPoP, Limits, SharedState
from mcpauth.middleware._rate_limits import MemoryRateCounter, caller_key

from .helpers import FakeAuthorizationServer, RecordingApp, bearer, client_for, rpc

pytestmark = pytest.mark.anyio


async def test_one_request_over_the_limit_gets_429_with_retry_after_and_never_reaches_the_app(
    protect: Any, auth_server: FakeAuthorizationServer, recording_app: RecordingApp
) -> None:
    token = auth_server.mint(sub="alice")
    async with client_for(protect(limits=Limits(rate_limit=3, rate_window=30))) as client:
        within = [await client.post("/mcp", json=rpc("ping"), headers=bearer(token)) for _ in "abc"]
        over = await client.post("/mcp", json=rpc("ping"), headers=bearer(token))
        other = await client.post(
            "/mcp", json=rpc("ping"), headers=bearer(auth_server.mint(sub="bob"))
        )
    assert [r.status_code for r in within] == [200, 200, 200]
    assert over.status_code == 429
    assert 1 <= int(over.headers["Retry-After"]) <= 30
    assert over.json() == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {
            "code": -32000,
            "message": "Too many requests; retry after the time in Retry-After",
        },
    }
    assert other.status_code == 200  # another caller, another count
    assert len(recording_app.calls) == 4


async def test_a_caller_is_its_issuer_subject_and_client(
    protect: Any, auth_server: FakeAuthorizationServer
) -> None:
    async with client_for(protect(limits=Limits(rate_limit=1))) as client:
        first = await client.get("/mcp", headers=bearer(auth_server.mint(sub="alice")))
        same_caller = await client.get("/mcp", headers=bearer(auth_server.mint(sub="alice")))
        other_client = await client.get(
            "/mcp", headers=bearer(auth_server.mint(sub="alice", client_id="client-2"))
        )
    assert (first.status_code, same_caller.status_code) == (200, 429)  # a new token, same caller
    assert other_client.status_code == 200
    assert caller_key(("iss", "alice", "c")) != caller_key(("iss", "alice", "d"))
    assert "alice" not in caller_key(("iss", "alice", "c"))


async def test_without_a_rate_limit_nothing_is_counted(
    protect: Any, auth_server: FakeAuthorizationServer
) -> None:
    middleware = protect()
    token = auth_server.mint()
    async with client_for(middleware) as client:
        statuses = {
            (await client.get("/mcp", headers=bearer(token))).status_code for _ in range(20)
        }
    assert statuses == {200}
    assert middleware._rate is None


async def test_a_window_ends_and_the_count_starts_again() -> None:
    now = [1000.0]
    counter = MemoryRateCounter(clock=lambda: now[0])
    assert await counter.hit("a", 10) == (1, 10)
    now[0] += 4
    assert await counter.hit("a", 10) == (2, 6)
    now[0] += 6  # the window's end
    assert await counter.hit("a", 10) == (1, 10)


async def test_the_in_process_counts_are_bounded_dropping_the_window_that_ends_first() -> None:
    now = [1000.0]
    counter = MemoryRateCounter(max_keys=2, clock=lambda: now[0])
    await counter.hit("a", 10)
    now[0] += 1
    await counter.hit("b", 10)
    await counter.hit("b", 10)
    await counter.hit("c", 10)  # "a" ends first: dropped
    assert len(counter) == 2
    assert (await counter.hit("b", 10))[0] == 3
    now[0] += 20  # every window has ended: they make room before any is dropped early
    assert (await counter.hit("d", 10))[0] == 1
    assert len(counter) == 1
    with pytest.raises(ValueError, match="at least 1"):
        MemoryRateCounter(max_keys=0)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"rate_limit": 0}, "rate_limit must be at least 1"),
        ({"rate_window": 0}, "rate_window"),
        ({"rate_window": float("inf")}, "rate_window"),
        ({"rate_window": float("nan")}, "rate_window"),
    ],
)
def test_a_rate_limit_below_one_or_a_window_that_is_not_positive_is_refused(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        Limits(**options)


@pytest.mark.parametrize(
    "url",
    [
        "http://redis.internal:6379",
        "unix:///var/run/redis.sock",
        "redis://",
        "redis://:6379/0",
        "redis://host:port/0",
        "redis.internal:6379",
    ],
)
def test_a_shared_state_is_a_redis_url_with_a_host(url: str) -> None:
    with pytest.raises(ValueError, match="redis:// or rediss://"):
        SharedState(url)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"timeout": 0}, "timeout"),
        ({"timeout": float("nan")}, "timeout"),
        ({"prefix": ""}, "prefix"),
    ],
)
def test_a_shared_state_needs_a_positive_timeout_and_a_prefix(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        SharedState("redis://redis.internal:6379/0", **options)


def test_a_shared_state_never_shows_its_password() -> None:
    state = SharedState("rediss://mcp:s3cret-pass@redis.internal:6380/2", timeout=0.5)
    assert "s3cret-pass" not in repr(state)
    assert "s3cret-pass" not in str(state)
    assert repr(state) == "SharedState('rediss://redis.internal:6380/2', timeout=0.5)"


async def test_a_shared_state_url_string_is_taken_as_it_is(protect: Any) -> None:
    middleware = protect(shared_state="redis://redis.internal:6379/0")
    assert middleware._shared is not None
    assert middleware._shared.config == SharedState("redis://redis.internal:6379/0")
    assert type(middleware.dpop.replay).__name__ == "RedisReplayCache"
    assert middleware._verdicts is None  # the JWT verifier's verdicts are not shared


async def test_shared_state_and_a_replay_record_of_your_own_are_refused_together(
    protect: Any,
) -> None:
    class OwnRecord:
        async def first_use(self, key: str, expires_at: float) -> bool:
            return True

    with pytest.raises(ValueError, match="not both"):
        protect(dpop=DPoP(replay=OwnRecord()), shared_state="redis://redis.internal/0")


async def test_shared_state_without_the_redis_package_is_a_configuration_error(
    protect: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "redis", None)  # import redis raises ImportError
    monkeypatch.delitem(sys.modules, "mcpauth.middleware._redis", raising=False)
    monkeypatch.delattr(mcpauth.middleware, "_redis", raising=False)
    with pytest.raises(ConfigurationError, match=r"mcpauth-kit\[shared-state\]"):
        protect(shared_state="redis://redis.internal/0")


def test_a_middleware_without_shared_state_never_imports_redis() -> None:
    code = (
        "import sys\n"
        "from mcpauth.middleware import Limits, ProtectedResourceMiddleware\n"
        "ProtectedResourceMiddleware(lambda *a: None, resource='https://r.example/mcp',\n"
        "    authorization_servers=['https://as.example'], limits=Limits(rate_limit=5))\n"
        "print('redis' in sys.modules, 'mcpauth.middleware._redis' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.split() == ["False", "False"]
