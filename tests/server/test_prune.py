"""The pruner deletes dead state and only dead state: after more refreshes than a batch, abandoned
authorization requests, expired codes and failed client authentications, and time moved past
their lifetimes, every table holds its live rows only; a rotated refresh token replayed while
its family lives still revokes the family (runs on SQLite and, with the server suite's second
pass, PostgreSQL)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

import httpx2
import pytest
from freezegun import freeze_time
from sqlalchemy import func, select
from starlette.applications import Starlette

from mcpauth.server import Settings, admin, create_app
from mcpauth.server.storage import prune as pruning
from mcpauth.server.storage.models import (
    AuthorizationCode,
    Grant,
    Interaction,
    RateCounter,
    RefreshToken,
    Throttle,
)

from ..conftest import ISSUER
from ..oauth import authorization_params, pkce_pair, register_public_client
from .conftest import add_user
from .test_token import get_code, redeem, refresh, tokens

pytestmark = [pytest.mark.anyio, pytest.mark.every_engine]  # storage: on both engines
DAY = 86400


def count(app: Starlette, model: type) -> int:
    with app.state.mcpauth.db.read() as session:
        return int(session.exec(select(func.count()).select_from(model)).one()[0])


def run_pruner(app: Starlette) -> dict[str, int]:
    ctx = app.state.mcpauth
    counts = pruning.prune(ctx.db, ctx.settings, ctx.now())
    assert counts is not None
    return counts


@pytest.fixture
def short_app(make_settings: Callable[..., Settings], password_hash: str) -> Starlette:
    app = create_app(
        make_settings(
            refresh_token_ttl=2 * DAY,
            refresh_token_idle_ttl=2 * DAY,
            offline_access=True,
            rate_limit_token=0,
            rate_limit_authorize=0,
            rate_limit_register=0,
        )
    )
    add_user(app, "alice", password_hash)
    admin.add_resource(
        app.state.mcpauth,
        "http://127.0.0.1:8000/mcp",
        scopes=["mcp:tools=Use the tools"],
        default_scopes=["mcp:tools"],
        is_default=True,
    )
    return app


async def test_more_dead_rows_than_a_batch_are_pruned_to_the_live_ones(
    short_app: Starlette, monkeypatch: pytest.MonkeyPatch
) -> None:
    # batches of 100 rather than 1,000: the same batch boundaries crossed with a tenth of the
    # requests (one family a row longer than a batch, abandoned requests a batch long)
    monkeypatch.setattr(pruning, "BATCH", 100)
    transport = httpx2.ASGITransport(app=short_app, client=("203.0.113.7", 50000))
    with freeze_time("2027-03-01 00:00:00") as clock:
        async with httpx2.AsyncClient(transport=transport, base_url=ISSUER) as http:
            client: dict[str, Any] = await register_public_client(http)
            cid = client["client_id"]
            # a family refreshed 100 times: 101 rows, all needed for reuse detection
            old = await tokens(http, client, scope="mcp:tools offline_access")
            token = old["refresh_token"]
            first_rotated = token
            for _ in range(100):
                response = await refresh(http, cid, token)
                assert response.status_code == 200, response.text
                token = response.json()["refresh_token"]
            # 100 authorization requests nobody finishes
            _, challenge = pkce_pair()
            for _ in range(100):
                started = await http.get(
                    "/authorize?" + urlencode(authorization_params(cid, challenge))
                )
                assert started.status_code == 303
            # a confidential client guessed at: throttle rows
            confidential = admin.add_client(
                short_app.state.mcpauth,
                name="bot",
                grant_types=["client_credentials"],
                auth_method="client_secret_basic",
            )
            for _ in range(5):
                wrong = await http.post(
                    "/token",
                    data={"grant_type": "client_credentials"},
                    auth=(confidential["client_id"], "wrong"),
                )
                assert wrong.status_code == 401
            assert count(short_app, RefreshToken) == 101
            assert count(short_app, Interaction) >= 100
            assert count(short_app, Throttle) >= 1

            # within the family's lifetime nothing of it is pruned
            clock.tick(DAY // 2)
            first = run_pruner(short_app)
            assert first["interactions"] >= 100
            assert first["refresh_tokens"] == 0
            assert count(short_app, RefreshToken) == 101
            assert count(short_app, Interaction) == 0  # 10 minutes, long gone

            # a second, live family made now
            live = await tokens(http, client, scope="mcp:tools offline_access")
            clock.tick(3 * DAY // 2 + 60)  # the first family is past refresh_token_ttl
            counts = run_pruner(short_app)
            assert counts["refresh_tokens"] == 101
            assert count(short_app, RefreshToken) == 1
            assert count(short_app, Grant) == 1
            assert count(short_app, AuthorizationCode) == 0
            assert count(short_app, Throttle) == 0
            assert count(short_app, RateCounter) == 0
            # the old family is gone: its tokens are simply unknown
            assert (await refresh(http, cid, first_rotated)).status_code == 400
            fresh = await refresh(http, cid, live["refresh_token"])
            assert fresh.status_code == 200
            assert run_pruner(short_app) == dict.fromkeys(counts, 0) | {"refresh_tokens": 0}


async def test_reuse_detection_still_revokes_a_family_before_it_expires(
    short_app: Starlette,
) -> None:
    transport = httpx2.ASGITransport(app=short_app, client=("203.0.113.7", 50000))
    with freeze_time("2027-03-01 00:00:00") as clock:
        async with httpx2.AsyncClient(transport=transport, base_url=ISSUER) as http:
            client = await register_public_client(http)
            cid = client["client_id"]
            issued = await tokens(http, client, scope="mcp:tools offline_access")
            rotated = await refresh(http, cid, issued["refresh_token"])
            newest = rotated.json()["refresh_token"]
            clock.tick(DAY - 60)
            run_pruner(short_app)
            replay = await refresh(http, cid, issued["refresh_token"])
            assert replay.json()["error"] == "invalid_grant"
            # the replay revoked the family: the newest token is dead too
            assert (await refresh(http, cid, newest)).json()["error"] == "invalid_grant"
            run_pruner(short_app)
            assert count(short_app, RefreshToken) == 0  # a revoked family is dead state


async def test_a_second_pruner_waits_for_the_first_on_postgresql(short_app: Starlette) -> None:
    ctx = short_app.state.mcpauth
    if ctx.db.engine.dialect.name != "postgresql":
        pytest.skip("the advisory lock is PostgreSQL's")
    from sqlalchemy import text

    with ctx.db.engine.connect() as holder:
        holder.execute(text("SELECT pg_advisory_lock(:k)"), {"k": pruning.ADVISORY_LOCK})
        assert pruning.prune(ctx.db, ctx.settings, ctx.now()) is None
        holder.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": pruning.ADVISORY_LOCK})
        holder.commit()
    assert pruning.prune(ctx.db, ctx.settings, ctx.now()) is not None


def test_serve_prunes_by_itself_every_prune_interval(
    make_settings: Callable[..., Settings],
) -> None:
    import time

    from starlette.testclient import TestClient

    pytest.importorskip("prometheus_client")
    app = create_app(make_settings(prune_interval=1, metrics=True))
    ctx = app.state.mcpauth
    with ctx.db.write() as session:
        session.add(Interaction(id="abandoned", request={}, created_at=0, expires_at=1))
    assert count(app, Interaction) == 1
    gauge = 'mcpauth_table_rows{table="interactions"} 0.0'
    with TestClient(app) as client:  # runs the lifespan, which starts the pruner
        deadline = time.monotonic() + 15
        while gauge not in client.get("/metrics").text and time.monotonic() < deadline:
            time.sleep(0.1)
        scraped = client.get("/metrics").text
    assert count(app, Interaction) == 0
    assert gauge in scraped
    assert 'mcpauth_pruned_rows_total{table="interactions"} 1.0' in scraped


def test_the_metrics_give_rows_pruned_and_rows_left_per_table_from_each_run_not_each_scrape(
    make_settings: Callable[..., Settings],
) -> None:
    pytest.importorskip("prometheus_client")
    from mcpauth.server.app import prune_once
    from mcpauth.server.operations.metrics import Metrics

    app = create_app(make_settings(prune_interval=0))
    ctx = app.state.mcpauth
    now = ctx.now()

    def add(prefix: str, number: int, expires_at: int) -> None:
        with ctx.db.write() as session:
            for index in range(number):
                session.add(
                    Interaction(
                        id=f"{prefix}-{index}", request={}, created_at=0, expires_at=expires_at
                    )
                )

    add("dead", 5, 1)
    add("live", 3, now + 600)
    metrics = Metrics()

    def sample(name: str, table: str) -> float | None:
        return metrics.registry.get_sample_value(name, {"table": table})

    prune_once(ctx, metrics)
    assert sample("mcpauth_pruned_rows_total", "interactions") == 5
    assert sample("mcpauth_table_rows", "interactions") == 3
    for rule in pruning.RULES:  # every pruned table has its gauge
        assert sample("mcpauth_table_rows", rule.name) is not None, rule.name
    add("later", 4, now + 600)
    metrics.render()  # a scrape counts nothing: the gauge is the last run's
    assert sample("mcpauth_table_rows", "interactions") == 3
    prune_once(ctx, metrics)
    assert sample("mcpauth_table_rows", "interactions") == 7
    assert sample("mcpauth_pruned_rows_total", "interactions") == 5


def test_a_table_past_the_count_limit_is_reported_by_its_estimate_on_postgresql(
    make_settings: Callable[..., Settings], monkeypatch: pytest.MonkeyPatch
) -> None:
    from sqlalchemy import text

    app = create_app(make_settings(prune_interval=0))
    ctx = app.state.mcpauth
    monkeypatch.setattr(pruning, "COUNT_LIMIT", 10)

    def add(first: int, last: int) -> None:
        with ctx.db.write() as session:
            for index in range(first, last):
                session.add(Interaction(id=f"i-{index}", request={}, created_at=0, expires_at=1))

    add(0, 25)
    postgresql = ctx.db.engine.dialect.name == "postgresql"
    if postgresql:
        with ctx.db.engine.connect() as conn:
            conn.execute(text("ANALYZE interactions"))  # what autovacuum does by itself
            conn.commit()
    add(25, 30)  # not in the estimate yet
    # SQLite counts every row; PostgreSQL reads ten and takes the planner's estimate
    assert pruning.table_rows(ctx.db)["interactions"] == (25 if postgresql else 30)
    monkeypatch.setattr(pruning, "COUNT_LIMIT", 1000)
    assert pruning.table_rows(ctx.db)["interactions"] == 30  # under the limit: counted


def test_db_prune_reports_what_it_deleted(tmp_path: Any) -> None:
    import json

    from ..support import run_cli

    env = {"MCPAUTH_DATABASE_URL": f"sqlite:///{tmp_path / 'a.db'}", "MCPAUTH_SECRET_KEY": "k" * 32}
    done = run_cli(["db", "prune"], env=env)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["skipped"] is False
    assert set(report["pruned"]) >= {"authorization_codes", "interactions", "refresh_tokens"}
    assert report["rows"] == dict.fromkeys(report["pruned"], 0)  # and what is left


def _dead_rows(app: Starlette, number: int) -> None:
    from mcpauth.server.storage.models import UsedAssertion

    with app.state.mcpauth.db.write() as session:
        for index in range(number):
            session.add(Interaction(id=f"old-{index}", request={}, created_at=0, expires_at=1))
            session.add(UsedAssertion(key=f"used-{index}", expires_at=1))


def _at_once(apps: list[Starlette], run: Callable[[Any], dict[str, int] | None]) -> list[Any]:
    """``run(ctx)`` in one thread per app, released together; the results and errors."""
    import threading

    barrier = threading.Barrier(len(apps))
    results: list[Any] = []

    def replica(app: Starlette) -> None:
        try:
            barrier.wait(timeout=30)
            results.append(run(app.state.mcpauth))
        except BaseException as exc:
            results.append(exc)

    threads = [threading.Thread(target=replica, args=(app,)) for app in apps]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads)
    return results


def test_two_replicas_prune_at_once_without_errors_or_double_work(
    make_settings: Callable[..., Settings],
) -> None:
    """Two replicas (separate engines, one database) start the pruner at the same moment: on
    PostgreSQL one takes the advisory lock and the other skips; every dead row is deleted
    exactly once, nothing fails."""
    from mcpauth.server.storage.models import UsedAssertion

    first = create_app(make_settings())
    second = create_app(make_settings())  # another replica on the same database
    _dead_rows(first, 5000)
    results = _at_once([first, second], lambda ctx: pruning.prune(ctx.db, ctx.settings, ctx.now()))
    assert not [r for r in results if isinstance(r, BaseException)]
    done = [r for r in results if r is not None]
    if first.state.mcpauth.db.engine.dialect.name == "postgresql":
        assert len(done) >= 1  # one held the lock (the other skipped, or ran after it)
    for table in ("interactions", "used_assertions"):
        assert sum(r[table] for r in done) == 5000  # every row deleted exactly once
    assert count(first, Interaction) == count(first, UsedAssertion) == 0


def test_replicas_without_the_lock_still_delete_each_row_once(
    make_settings: Callable[..., Settings],
) -> None:
    """Batches are idempotent: pruners racing without the lock (SQLite has none; a replica
    could also run while another holds a long batch) neither fail nor count a row twice."""
    from mcpauth.server.storage.models import UsedAssertion

    apps = [create_app(make_settings()) for _ in range(3)]
    _dead_rows(apps[0], 5000)
    rules = [rule for rule in pruning.RULES if rule.name in ("interactions", "used_assertions")]

    def unlocked(ctx: Any) -> dict[str, int]:
        return {
            rule.name: pruning._prune_table(ctx.db, rule, ctx.settings, ctx.now()) for rule in rules
        }

    results = _at_once(apps, unlocked)
    assert not [r for r in results if isinstance(r, BaseException)], results
    # each racer passes over the table once; a row another deleted first is not counted
    again = unlocked(apps[0].state.mcpauth)
    for rule in rules:
        assert sum(r[rule.name] for r in results) + again[rule.name] == 5000
    assert count(apps[0], Interaction) == count(apps[0], UsedAssertion) == 0


async def test_self_registered_clients_expire_when_unused_and_admin_clients_never(
    short_app: Starlette,
) -> None:
    from mcpauth.server.storage.models import Client

    transport = httpx2.ASGITransport(app=short_app, client=("203.0.113.7", 50000))
    with freeze_time("2027-03-01 00:00:00") as clock:
        async with httpx2.AsyncClient(transport=transport, base_url=ISSUER) as http:
            for _ in range(300):  # a flood of registrations nobody uses
                await register_public_client(http)
            used = await register_public_client(http)
            issued = await tokens(http, used, scope="mcp:tools offline_access")
            admin.add_client(
                short_app.state.mcpauth, name="ops", redirect_uris=["https://o.example/cb"]
            )
            assert count(short_app, Client) == 302
            clock.tick(DAY + 60)  # past self_registered_client_unused_ttl (a day)
            assert (
                await refresh(http, used["client_id"], issued["refresh_token"])
            ).status_code == 200
            assert run_pruner(short_app)["clients"] == 300
            assert count(short_app, Client) == 2  # the used one and the admin's
            clock.tick(91 * DAY)  # past self_registered_client_idle_ttl: unused since
            assert run_pruner(short_app)["clients"] == 1
            assert count(short_app, Client) == 1  # the admin's never expires
            assert count(short_app, Grant) == 0
            assert count(short_app, RefreshToken) == 0


async def test_a_self_registered_confidential_client_is_told_when_the_pruner_may_delete_it(
    short_app: Starlette,
) -> None:
    """``client_secret_expires_at`` is never 0 ("never") for a client the pruner deletes: at
    registration the end of its unused period; once it has a grant, as long as that grant
    keeps it (an RFC 7592 read). Pruning at the told second keeps the client; after it, an
    unused client goes (docs/security.md T33)."""
    import time

    from mcpauth.server.storage.models import Client

    transport = httpx2.ASGITransport(app=short_app, client=("203.0.113.7", 50000))
    with freeze_time("2027-03-01 00:00:00") as clock:
        async with httpx2.AsyncClient(transport=transport, base_url=ISSUER) as http:

            async def read(registered: dict[str, Any]) -> int:
                token = registered["registration_access_token"]
                response = await http.get(
                    registered["registration_client_uri"],
                    headers={"Authorization": f"Bearer {token}"},
                )
                assert response.status_code == 200, response.text
                registered["registration_access_token"] = response.json()[
                    "registration_access_token"
                ]  # RFC 7592 §3: each read rotates it
                return int(response.json()["client_secret_expires_at"])

            start = int(time.time())
            used, unused = [
                await register_public_client(http, token_endpoint_auth_method="client_secret_post")
                for _ in range(2)
            ]
            assert used["client_secret_expires_at"] == start + DAY
            assert await read(used) == start + DAY
            operator = admin.add_client(
                short_app.state.mcpauth,
                name="ops",
                redirect_uris=["https://o.example/cb"],
                auth_method="client_secret_basic",
            )
            assert operator["client_secret_expires_at"] == 0  # never pruned, never expires

            clock.tick(3600)
            granted_at = int(time.time())
            code, verifier = await get_code(
                http, used["client_id"], scope="mcp:tools offline_access"
            )
            response = await redeem(
                http, used["client_id"], code, verifier, client_secret=used["client_secret"]
            )
            assert response.status_code == 200, response.text
            # the grant keeps it while the grant lives (refresh_token_ttl: two days here)
            assert await read(used) == granted_at + 2 * DAY
            assert await read(unused) == start + DAY

            clock.move_to(datetime.fromtimestamp(start + DAY, UTC))
            assert run_pruner(short_app)["clients"] == 0  # the told second: both kept
            clock.tick(1)
            assert run_pruner(short_app)["clients"] == 1  # past it: the unused one goes
            with short_app.state.mcpauth.db.read() as session:
                assert session.get(Client, unused["client_id"]) is None
                assert session.get(Client, used["client_id"]) is not None

            clock.move_to(datetime.fromtimestamp(granted_at + 2 * DAY, UTC))
            assert run_pruner(short_app)["clients"] == 0
            clock.tick(1)
            run_pruner(short_app)  # the grant has ended: it goes, then the client
            assert run_pruner(short_app)["clients"] == 1
            with short_app.state.mcpauth.db.read() as session:
                assert session.get(Client, used["client_id"]) is None


def test_batches_page_through_keys_and_recheck_before_deleting(
    make_settings: Callable[..., Settings], password_hash: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each batch is found by a read in key order after the last one (so live rows ahead of
    the dead ones are passed once, composite keys too) and deleted by key with the rule checked
    again: a row that came back to life in between stays."""
    from mcpauth.server.storage.models import Consent

    monkeypatch.setattr(pruning, "BATCH", 10)
    app = create_app(make_settings())
    ctx = app.state.mcpauth
    user = add_user(app, "carol", password_hash)
    client = admin.add_client(ctx, name="ops", redirect_uris=["https://o.example/cb"])
    with ctx.db.write() as session:
        for index in range(5):  # live, and first in key order ("0-..." < "zz-...")
            session.add(Consent(user_id=user, client_id=client["client_id"],
                                resource=f"0-{index}", updated_at=0))  # fmt: skip
        for index in range(25):  # their client is gone
            session.add(Consent(user_id=user, client_id=f"zz-gone-{index:02}",
                                resource="r", updated_at=0))  # fmt: skip
    assert run_pruner(app)["consents"] == 25
    assert count(app, Consent) == 5

    with ctx.db.write() as session:
        for index in range(3):
            session.add(Interaction(id=f"old-{index}", request={}, created_at=0, expires_at=1))
    rule = next(rule for rule in pruning.RULES if rule.name == "interactions")
    found = pruning._dead_keys(ctx.db, rule, ctx.settings, ctx.now(), None)
    assert found == [("old-0",), ("old-1",), ("old-2",)]
    with ctx.db.write() as session:
        revived = session.get(Interaction, "old-1")
        assert revived is not None
        revived.expires_at = ctx.now() + 600
    assert pruning._delete_batch(ctx.db, rule, ctx.settings, ctx.now(), found) == 2
    assert count(app, Interaction) == 1


def test_refresh_tokens_are_found_through_their_dead_grants(
    make_settings: Callable[..., Settings], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The refresh-token rule walks the dead grants (batch by batch) and reaches their tokens
    through the grant_id index: every token of a dead grant goes, a live grant keeps its."""
    monkeypatch.setattr(pruning, "BATCH", 10)
    app = create_app(make_settings())
    ctx = app.state.mcpauth
    client = admin.add_client(ctx, name="ops", redirect_uris=["https://o.example/cb"])
    now = ctx.now()

    def grant(grant_id: str, revoked_at: int | None, tokens: int) -> None:
        with ctx.db.write() as session:
            session.add(Grant(id=grant_id, user_id="u", client_id=client["client_id"],
                              resource="r", created_at=now, last_used_at=now,
                              revoked_at=revoked_at))  # fmt: skip
            for index in range(tokens):
                session.add(RefreshToken(digest=f"{grant_id}-{index:02}", grant_id=grant_id,
                                         client_id=client["client_id"], resource="r",
                                         created_at=now, expires_at=now + 600))  # fmt: skip

    grant("a-live", None, 12)
    for index in range(25):
        grant(f"b-dead-{index:02}", now - 1, 3 if index % 2 else 12)
    assert run_pruner(app)["refresh_tokens"] == 13 * 12 + 12 * 3
    assert count(app, RefreshToken) == 12
    assert count(app, Grant) == 1
