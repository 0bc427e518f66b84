"""The refresh-token reuse grace (docs/security.md T13, `refresh_token_reuse_grace`): a rotated
refresh token presented again by the same client (and DPoP key) within the grace gets a new pair
from the same grant, and every token handed out stays usable; past the grace, from another
client or with another key, reuse is refused, and by its holder's client it revokes the grant;
a revoked grant is never revived. Concurrent refreshes through one app, through two apps on one
database, and a refresh that loses the race on PostgreSQL's row lock all succeed."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx2
import pytest
from freezegun import freeze_time
from sqlalchemy import text
from starlette.applications import Starlette

from mcpauth.server import Settings, admin, create_app
from mcpauth.server.crypto import digest

from ..conftest import ISSUER
from ..oauth import register_public_client
from .conftest import RESOURCE, add_user
from .test_dpop_tokens import KEY, OTHER, proof, thumbprint
from .test_token import claims_of, get_code, refresh, tokens

pytestmark = [pytest.mark.anyio, pytest.mark.every_engine]  # storage: on both engines
GRACE = 30  # the default


def statuses(responses: list[httpx2.Response]) -> list[int]:
    return [r.status_code for r in responses]


async def assert_usable(http: httpx2.AsyncClient, client_id: str, *refresh_tokens: str) -> None:
    """Each refresh token rotates once more: the grant they belong to lives."""
    for token in refresh_tokens:
        used = await refresh(http, client_id, token)
        assert used.status_code == 200, used.text


def test_the_default_grace_is_thirty_seconds(settings: Settings) -> None:
    assert settings.refresh_token_reuse_grace == GRACE


async def test_two_concurrent_refreshes_both_succeed_and_both_new_tokens_stay_usable(
    http: httpx2.AsyncClient, public_client: dict[str, Any]
) -> None:
    cid = public_client["client_id"]
    first = await tokens(http, public_client)
    both = await asyncio.gather(*(refresh(http, cid, first["refresh_token"]) for _ in range(2)))
    assert statuses(both) == [200, 200], [r.text for r in both]
    new = [r.json()["refresh_token"] for r in both]
    assert len({*new, first["refresh_token"]}) == 3
    await assert_usable(http, cid, *new)


async def test_a_retried_refresh_within_the_grace_succeeds_and_the_winners_token_stays_valid(
    http: httpx2.AsyncClient, public_client: dict[str, Any], seeded: Starlette
) -> None:
    cid = public_client["client_id"]
    with freeze_time() as clock:
        first = await tokens(http, public_client)
        winner = await refresh(http, cid, first["refresh_token"])  # its answer was lost
        clock.tick(GRACE - 1)
        retried = await refresh(http, cid, first["refresh_token"])
        assert retried.status_code == 200, retried.text
        body = retried.json()
        assert body["scope"] == "mcp:tools"
        assert claims_of(seeded, body["access_token"])["aud"] == RESOURCE
        await assert_usable(http, cid, winner.json()["refresh_token"], body["refresh_token"])


async def test_a_replay_after_the_grace_revokes_the_family_with_the_winners_token(
    http: httpx2.AsyncClient, public_client: dict[str, Any]
) -> None:
    cid = public_client["client_id"]
    with freeze_time() as clock:
        first = await tokens(http, public_client)
        winner = (await refresh(http, cid, first["refresh_token"])).json()["refresh_token"]
        clock.tick(GRACE)
        replay = await refresh(http, cid, first["refresh_token"])
        assert replay.status_code == 400
        assert replay.json()["error"] == "invalid_grant"
        assert "revoked" in replay.json()["error_description"]
        killed = await refresh(http, cid, winner)
        assert killed.json()["error"] == "invalid_grant"


async def test_the_grace_runs_from_the_rotation_and_replays_do_not_extend_it(
    http: httpx2.AsyncClient, public_client: dict[str, Any]
) -> None:
    cid = public_client["client_id"]
    with freeze_time() as clock:
        first = await tokens(http, public_client)
        winner = (await refresh(http, cid, first["refresh_token"])).json()["refresh_token"]
        clock.tick(GRACE - 10)
        replayed = await refresh(http, cid, first["refresh_token"])
        assert replayed.status_code == 200, replayed.text
        clock.tick(10)  # GRACE after the rotation, 10 s after the replay
        late = await refresh(http, cid, first["refresh_token"])
        assert late.json()["error"] == "invalid_grant"
        for token in (winner, replayed.json()["refresh_token"]):
            assert (await refresh(http, cid, token)).json()["error"] == "invalid_grant"


async def test_another_client_within_the_grace_is_refused_and_revokes_nothing(
    http: httpx2.AsyncClient, public_client: dict[str, Any]
) -> None:
    cid = public_client["client_id"]
    other = await register_public_client(http)
    first = await tokens(http, public_client)
    winner = (await refresh(http, cid, first["refresh_token"])).json()["refresh_token"]
    stolen = await refresh(http, other["client_id"], first["refresh_token"])
    assert stolen.status_code == 400
    assert stolen.json() == {
        "error": "invalid_grant",
        "error_description": "The refresh token is invalid",
    }
    await assert_usable(http, cid, winner)


async def test_a_revoked_grant_is_not_revived_by_the_grace(
    http: httpx2.AsyncClient, public_client: dict[str, Any]
) -> None:
    cid = public_client["client_id"]
    first = await tokens(http, public_client)
    winner = (await refresh(http, cid, first["refresh_token"])).json()["refresh_token"]
    revoked = await http.post("/revoke", data={"token": winner, "client_id": cid})
    assert revoked.status_code == 200
    replay = await refresh(http, cid, first["refresh_token"])  # well within the grace
    assert replay.json() == {"error": "invalid_grant", "error_description": "The grant was revoked"}


async def test_a_refresh_asking_more_than_the_grant_within_the_grace_is_refused_and_kept(
    http: httpx2.AsyncClient, public_client: dict[str, Any]
) -> None:
    cid = public_client["client_id"]
    first = await tokens(http, public_client)
    winner = (await refresh(http, cid, first["refresh_token"])).json()["refresh_token"]
    wider = await refresh(http, cid, first["refresh_token"], scope="mcp:tools mcp:admin")
    assert wider.json()["error"] == "invalid_scope"
    await assert_usable(http, cid, winner, first["refresh_token"])


async def test_a_zero_grace_is_strict_single_use(
    make_settings: Callable[..., Settings], password_hash: str
) -> None:
    app = create_app(make_settings(refresh_token_reuse_grace=0))
    async with seeded_client(app, password_hash) as (http, client):
        cid = client["client_id"]
        first = await tokens(http, client)
        both = await asyncio.gather(*(refresh(http, cid, first["refresh_token"]) for _ in range(2)))
        assert sorted(statuses(both)) == [200, 400]
        winner = next(r for r in both if r.status_code == 200).json()["refresh_token"]
        assert (await refresh(http, cid, winner)).json()["error"] == "invalid_grant"


# --- DPoP-bound refresh tokens ------------------------------------------------------------


async def dpop_tokens(http: httpx2.AsyncClient, cid: str) -> str:
    code, verifier = await get_code(http, cid)
    data = {
        "grant_type": "authorization_code", "code": code, "code_verifier": verifier,
        "redirect_uri": "http://127.0.0.1:5555/callback", "client_id": cid,
    }  # fmt: skip
    issued = await http.post("/token", data=data, headers={"DPoP": proof()})
    assert issued.status_code == 200, issued.text
    return str(issued.json()["refresh_token"])


async def dpop_refresh(
    http: httpx2.AsyncClient, cid: str, token: str, headers: dict[str, str]
) -> httpx2.Response:
    body = {"grant_type": "refresh_token", "refresh_token": token, "client_id": cid}
    return await http.post("/token", data=body, headers=headers)


async def test_a_bound_token_is_replayed_within_the_grace_with_its_key_only(
    http: httpx2.AsyncClient, public_client: dict[str, Any], seeded: Starlette
) -> None:
    cid = public_client["client_id"]
    first = await dpop_tokens(http, cid)
    winner = await dpop_refresh(http, cid, first, {"DPoP": proof()})
    assert winner.status_code == 200, winner.text
    same_key = await dpop_refresh(http, cid, first, {"DPoP": proof()})
    assert same_key.status_code == 200, same_key.text
    assert claims_of(seeded, same_key.json()["access_token"])["cnf"] == {"jkt": thumbprint(KEY)}
    # the replay's refresh token is bound to the key too
    unbound = await dpop_refresh(http, cid, same_key.json()["refresh_token"], {})
    assert unbound.json()["error"] == "invalid_dpop_proof"
    for token in (winner.json()["refresh_token"], same_key.json()["refresh_token"]):
        used = await dpop_refresh(http, cid, token, {"DPoP": proof()})
        assert used.status_code == 200, used.text


@pytest.mark.parametrize("another_key", [True, False], ids=["another-key", "no-proof"])
async def test_a_bound_token_replayed_without_its_key_within_the_grace_revokes_the_family(
    http: httpx2.AsyncClient, public_client: dict[str, Any], another_key: bool
) -> None:
    cid = public_client["client_id"]
    first = await dpop_tokens(http, cid)
    winner = (await dpop_refresh(http, cid, first, {"DPoP": proof()})).json()["refresh_token"]
    sent = {"DPoP": proof(OTHER, "EdDSA")} if another_key else {}
    thief = await dpop_refresh(http, cid, first, sent)
    assert thief.status_code == 400
    assert thief.json()["error"] == "invalid_grant"
    killed = await dpop_refresh(http, cid, winner, {"DPoP": proof()})
    assert killed.json()["error"] == "invalid_grant"


# --- replicas and the lost race -----------------------------------------------------------


@asynccontextmanager
async def seeded_client(
    app: Starlette, password_hash: str, *, seed: bool = True
) -> AsyncIterator[tuple[httpx2.AsyncClient, dict[str, Any]]]:
    """An httpx client for ``app``, which gets alice, the resource and a public client."""
    if seed:
        add_user(app, "alice", password_hash)
        admin.add_resource(
            app.state.mcpauth,
            RESOURCE,
            scopes=["mcp:tools", "mcp:admin"],
            default_scopes=["mcp:tools"],
            is_default=True,
        )
    transport = httpx2.ASGITransport(app=app, client=("203.0.113.7", 50000))
    async with httpx2.AsyncClient(transport=transport, base_url=ISSUER) as http:
        yield http, (await register_public_client(http) if seed else {})


@pytest.fixture
async def two_replicas(
    make_settings: Callable[..., Settings], password_hash: str
) -> AsyncIterator[tuple[httpx2.AsyncClient, httpx2.AsyncClient, dict[str, Any]]]:
    """Two apps on one database (PostgreSQL with MCPAUTH_TEST_DATABASE=postgresql)."""
    settings = make_settings()
    first, second = create_app(settings), create_app(settings)
    async with (
        seeded_client(first, password_hash) as (a, client),
        seeded_client(second, password_hash, seed=False) as (b, _),
    ):
        yield a, b, client


async def test_concurrent_refreshes_through_two_replicas_both_succeed(
    two_replicas: tuple[httpx2.AsyncClient, httpx2.AsyncClient, dict[str, Any]],
) -> None:
    a, b, client = two_replicas
    cid = client["client_id"]
    first = await tokens(a, client)
    both = await asyncio.gather(
        refresh(a, cid, first["refresh_token"]), refresh(b, cid, first["refresh_token"])
    )
    assert statuses(both) == [200, 200], [r.text for r in both]
    through_a, through_b = (r.json()["refresh_token"] for r in both)
    await assert_usable(b, cid, through_a)  # each replica honours the other's token
    await assert_usable(a, cid, through_b)


async def _wait_until_blocked_on_a_lock(holder: Any, task: asyncio.Task[Any]) -> None:
    waiting = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
    deadline = time.monotonic() + 20
    while not task.done() and time.monotonic() < deadline:
        blocked = holder.execute(text(waiting)).scalar_one()
        holder.rollback()  # pg_stat_activity is a snapshot per transaction
        if blocked > 0:
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the refresh never waited for the row lock")


@pytest.mark.parametrize(("grace", "expected"), [(GRACE, 200), (0, 400)])
async def test_a_refresh_that_loses_the_row_lock_race_on_postgresql_is_a_replay(
    make_settings: Callable[..., Settings], password_hash: str, grace: int, expected: int
) -> None:
    """The request reads the token unrotated, then waits on the row lock of a concurrent
    rotation (held here by another connection); once that commits, its conditional UPDATE
    matches nothing: within the grace it is answered as a replay, else the grant is revoked."""
    app = create_app(make_settings(refresh_token_reuse_grace=grace))
    engine = app.state.mcpauth.db.engine
    if engine.dialect.name != "postgresql":
        pytest.skip("SQLite's write lock serializes whole transactions: no stale read to race")
    async with seeded_client(app, password_hash) as (http, client):
        cid = client["client_id"]
        first = await tokens(http, client)
        with engine.connect() as holder, engine.connect() as watcher:
            holder.execute(
                text("UPDATE refresh_tokens SET rotated_at = :now WHERE digest = :digest"),
                {"now": int(time.time()), "digest": digest(first["refresh_token"])},
            )
            racing = asyncio.create_task(refresh(http, cid, first["refresh_token"]))
            await _wait_until_blocked_on_a_lock(watcher, racing)
            holder.commit()
            lost = await racing
        assert lost.status_code == expected, lost.text
        if expected == 200:
            await assert_usable(http, cid, lost.json()["refresh_token"])
        else:
            assert lost.json()["error"] == "invalid_grant"
