"""Cost that stays flat as data grows: authorization-code exchanges and refreshes (p50, p99,
req/s) with 10 thousand and with 1 million rows in the clients, grants and refresh-token tables,
on SQLite and on PostgreSQL; then the pruner on the 1 M database: its throughput (rows deleted
per second) on about 1 million dead rows of every kind it deletes, exchange and refresh p50/p99
while it runs against the same without it, its idle pass (nothing dead, everything scanned),
and the cost of the rows-per-table metric. The peer of the 1 M figures is the 10 k figures of
the same engine in the same run; the peer of the figures under pruning is the same load on the
same database just before.

    .venv/bin/python bench/state_growth/run.py [--duration 4] [--rounds 2] [--rows 1000000]
        [--dead 1000000] [--own-process-pruner] [--skip-prune] [--json FILE]

Four databases (SQLite and PostgreSQL, 10 k and 1 M rows) are set up and filled once, each with
its own `mcpauth serve` (the periodic pruner off); every round measures each of them in turn,
the order reversed in even rounds, so a busy spell on this shared machine does not fall on one
configuration only.

The rows are written in bulk with SQL (``INSERT ... SELECT`` from a generated series) after
`mcpauth` set up the database and before the load, in the shapes `mcpauth` writes
(mcpauth/server/storage/models.py): self-registered (DCR) public clients with a registration
access token digest, one grant per client for a user of its own, and for half the grants a
refresh-token family of two (one rotated, one live); digests are 64 random hex digits, ids 32.
After a fill PostgreSQL gets a VACUUM ANALYZE (autovacuum's work on a database that grew over
months; otherwise it vacuums the fresh million-row tables during the measurement) and SQLite a
WAL checkpoint (otherwise a checkpoint of the fill's pages falls on a request).

The load is bench/postgres's: one `mcpauth serve` pinned to CPU 0 (with PostgreSQL), wrk `-t1`
on CPU 1, 16 connections, every request a single-use code or refresh token and every response
checked (a non-200 fails the run). Credentials: 16 codes are minted through /authorize by a
signed-in first-party client; the rest are copies of the last one's rows written with SQL (a
grant and a code, or a grant and a refresh token, with fresh ids and the SHA-256 digest of a
fresh secret): exactly the rows /authorize and /token write, so the server does the same work
(minting thousands over HTTP took minutes per configuration on this machine). Each measured run
gets 1.6 times what the previous run of its configuration used (a 1 s warm-up sizes the first);
a run that runs out is repeated with twice as many. The credentials add rows: the last table
gives the rows each configuration ended with.

Pruning: about 1 million dead rows are written into the 1 M database (``--dead``; expired
interactions, expired codes, grants past ``refresh_token_ttl`` with their two refresh tokens,
used assertions, revoked token ids, rate counters, throttle rows, self-registered clients
never used), the exchange and refresh loads run once, then again while the server's own pruner
(what its periodic task runs, started by SIGUSR1 through a wrapper of `mcpauth serve`) deletes
them; with ``--own-process-pruner`` the same again with a pruner in a process of its own on CPU
0 (a cron job's `mcpauth db prune`, or another replica). Rows per second are the pruner's count
over its own time (without an interpreter's start); "overlap" is the share of each load's run
during which the pruner was still running. Then `mcpauth db prune` runs again with nothing to
delete (the idle pass every ``prune_interval`` costs), and the metric's ``table_rows`` is
timed.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import platform
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx2
from sqlalchemy import create_engine, text

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # for bench/ and tests/

from bench import common  # noqa: E402
from bench.postgres import run as pgbench  # noqa: E402
from mcpauth.server.storage.database import Database, make_engine  # noqa: E402
from mcpauth.server.storage.prune import table_rows  # noqa: E402
from tests.pg import PostgresServer, _migrate_template, start_server  # noqa: E402

SERVER_CPU, LOAD_CPU = pgbench.SERVER_CPU, pgbench.LOAD_CPU
SMALL = 10_000
DAY = 86400


@contextmanager
def server(workdir: Path, database: str) -> Iterator[pgbench.Cluster]:
    env = common.mcpauth_env(
        workdir,
        database,
        MCPAUTH_RATE_LIMIT_TOKEN=str(10**9),
        MCPAUTH_RATE_LIMIT_AUTHORIZE=str(10**9),
        MCPAUTH_AUTHORIZATION_CODE_TTL="600",
        MCPAUTH_PRUNE_INTERVAL="0",  # the pruner is measured on its own
        BENCH_PRUNE_OUTPUT=str(workdir / "pruned.json"),
    )
    client_id = common.setup_authorization_code(env)
    port = common.free_port()
    issuer = f"http://127.0.0.1:{port}"
    with ExitStack() as stack:
        log = workdir / "server.log"
        serve = (sys.executable, "-c", SERVE_WITH_PRUNER)
        process = common.spawn(common.serve_command(SERVER_CPU, issuer, port, serve), log, env=env)
        stack.callback(common.stop, process)
        common.wait_ready(process, f"{issuer}/health", log, timeout=60)
        metadata = httpx2.get(f"{issuer}/.well-known/oauth-authorization-server").json()
        yield pgbench.Cluster(
            issuer,
            [port],
            [process.pid],
            client_id,
            urlsplit(metadata["token_endpoint"]).path,
            common.sign_in(issuer, client_id),
        )


# --- bulk fill ---------------------------------------------------------------------------------


def _sql(dialect: str) -> dict[str, str]:
    """Engine-specific pieces: a series 0..:n-1 named s(i), random hex of 64 and 32 digits, and
    ids derived from i (the same client id and grant id in every table)."""
    if dialect == "sqlite":
        return {
            "series": "WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s "
            "WHERE i + 1 < :n) ",
            "from": "FROM s",
            "hex64": "lower(hex(randomblob(32)))",
            "hex32": "lower(hex(randomblob(16)))",
            "client": "('f' || printf('%023d', i))",
            "grant": "printf('%032x', i)",
            "interaction": "printf('%032x', i)",
        }
    return {
        "series": "",
        "from": "FROM generate_series(0, :n - 1) AS s(i)",
        "hex64": "(md5(random()::text) || md5(random()::text))",
        "hex32": "md5(random()::text)",
        "client": "('f' || lpad(i::text, 23, '0'))",
        "grant": "lpad(to_hex(i), 32, '0')",
        "interaction": "lpad(to_hex(i), 32, '0')",
    }


def settle(engine: Any) -> None:
    """What a database that grew over months has had and a bulk fill has not: PostgreSQL's
    autovacuum (VACUUM ANALYZE, else it runs during the measurement), SQLite's WAL written back
    into the database file (else a checkpoint of the fill's pages falls on a request)."""
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        if engine.dialect.name == "postgresql":
            conn.execute(text("VACUUM ANALYZE"))
        else:
            conn.execute(text("PRAGMA wal_checkpoint(TRUNCATE)"))


def fill_state(database: str, rows: int) -> float:
    """``rows`` DCR clients, ``rows`` grants (one per client), ``rows`` refresh tokens (a
    rotated and a live one for each of the first half of the grants); the seconds it took."""
    engine = create_engine(database)
    q = _sql(engine.dialect.name)
    now = int(time.time())
    started = time.monotonic()
    redirect = json.dumps(["http://127.0.0.1:33418/callback"])
    metadata = json.dumps({"client_name": "Some MCP client", "software_id": "mcp-client"})
    with engine.begin() as conn:
        conn.execute(
            text(
                q["series"] + "INSERT INTO clients (client_id, secret_digest, secret_expires_at, "
                "client_name, redirect_uris, grant_types, response_types, "
                "token_endpoint_auth_method, application_type, scope, jwks, jwks_uri, "
                "client_metadata, first_party, introspect, registration_token_digest, source, "
                f"created_at) SELECT {q['client']}, NULL, 0, 'Some MCP client', :redirect, "
                """'["authorization_code", "refresh_token"]', '["code"]', 'none', 'native', """
                f"NULL, NULL, NULL, :metadata, false, false, {q['hex64']}, 'dcr', "
                f":now - (i % 30) * {DAY} " + q["from"]
            ),
            {"n": rows, "redirect": redirect, "metadata": metadata, "now": now},
        )
        conn.execute(
            text(
                q["series"] + "INSERT INTO grants (id, user_id, client_id, resource, scope, "
                f"created_at, last_used_at, revoked_at) SELECT {q['grant']}, {q['hex32']}, "
                f"{q['client']}, :resource, :scope, :now - (i % 30) * {DAY}, :now, NULL "
                + q["from"]
            ),
            {"n": rows, "resource": common.RESOURCE, "scope": common.SCOPE, "now": now},
        )
        for rotated in ("NULL", ":now - 3600"):  # a rotated token and its live successor
            conn.execute(
                text(
                    q["series"] + "INSERT INTO refresh_tokens (digest, grant_id, client_id, "
                    f"scope, resource, created_at, expires_at, rotated_at) SELECT {q['hex64']}, "
                    f"{q['grant']}, {q['client']}, :scope, :resource, :now - 7200, "
                    f":now + 30 * {DAY}, {rotated} " + q["from"]
                ),
                {"n": rows // 2, "resource": common.RESOURCE, "scope": common.SCOPE, "now": now},
            )
    settle(engine)
    engine.dispose()
    return time.monotonic() - started


# --- dead rows ---------------------------------------------------------------------------------


def dead_mix(total: int) -> dict[str, int]:
    """How ``total`` dead rows are spread over what the pruner deletes."""
    return {
        "interactions": total * 25 // 100,
        "authorization_codes": total * 15 // 100,
        "dead_grants": total * 10 // 100,  # each with a rotated and a live refresh token
        "used_assertions": total * 10 // 100,
        "revoked_access_tokens": total * 5 // 100,
        "rate_counters": total * 5 // 100,
        "throttles": total * 5 // 100,
        "unused_clients": total * 5 // 100,
    }


def fill_dead(database: str, rows: int, total: int) -> float:
    """About ``total`` rows the pruner deletes, next to the ``rows`` live ones of fill_state;
    the seconds it took."""
    engine = create_engine(database)
    q = _sql(engine.dialect.name)
    mix = dead_mix(total)
    now = int(time.time())
    hour, month = 3600, 31 * DAY  # past refresh_token_ttl (30 days by default)
    request = json.dumps({"client_id": "f" + "0" * 23, "state": "x" * 43, "scopes": [common.SCOPE]})
    prefix = "'d' || "  # dead grants and unused clients: ids apart from the live ones
    statements = [
        (
            "interactions",
            "INSERT INTO interactions (id, request, created_at, expires_at) "
            f"SELECT {q['interaction']}, :request, :now - 4200, :now - {hour}",
        ),
        (
            "authorization_codes",
            "INSERT INTO authorization_codes (digest, grant_id, client_id, user_id, redirect_uri, "
            "code_challenge, resource, scope, offline, auth_time, created_at, expires_at, "
            f"redeemed_at) SELECT {q['hex64']}, {q['grant']}, {q['client']}, {q['hex32']}, "
            f"'http://127.0.0.1:33418/callback', {q['hex32']} || 'abcdefghijk', :resource, "
            f":scope, false, :now - {hour}, :now - {hour}, :now - {hour} + 60, NULL",
        ),
        (
            "dead_grants",
            "INSERT INTO grants (id, user_id, client_id, resource, scope, created_at, "
            f"last_used_at, revoked_at) SELECT {prefix}{q['grant']}, {q['hex32']}, "
            f"{q['client']}, :resource, :scope, :now - {month}, :now - {month} + {DAY}, NULL",
        ),
        (
            "used_assertions",
            f"INSERT INTO used_assertions (key, expires_at) SELECT {q['hex64']}, :now - {hour}",
        ),
        (
            "revoked_access_tokens",
            "INSERT INTO revoked_access_tokens (jti, expires_at) "
            f"SELECT {q['hex32']}, :now - {hour}",
        ),
        (
            "rate_counters",
            "INSERT INTO rate_counters (key, window_start, count) "
            f"SELECT 'rate:/token:ip:' || {q['hex32']}, :now - {hour}, 1",
        ),
        (
            "throttles",
            "INSERT INTO throttles (key, failures, window_start, locked_until) "
            f"SELECT 'client-ip:' || {q['hex32']}, 1, :now - 2 * {hour}, 0",
        ),
        (
            "unused_clients",
            "INSERT INTO clients (client_id, secret_digest, secret_expires_at, client_name, "
            "redirect_uris, grant_types, response_types, token_endpoint_auth_method, "
            "application_type, scope, jwks, jwks_uri, client_metadata, first_party, introspect, "
            f"registration_token_digest, source, created_at) SELECT {prefix}{q['client']}, "
            """NULL, 0, 'Never used', '["http://127.0.0.1/cb"]', '["authorization_code"]', """
            """'["code"]', 'none', 'native', NULL, NULL, NULL, '{}', false, false, """
            f"{q['hex64']}, 'dcr', :now - 2 * {DAY}",
        ),
    ]
    values = {"request": request, "resource": common.RESOURCE, "scope": common.SCOPE, "now": now}
    started = time.monotonic()
    with engine.begin() as conn:
        for name, insert in statements:
            conn.execute(text(q["series"] + insert + " " + q["from"]), {"n": mix[name], **values})
        for rotated in ("NULL", f":now - {month} + {DAY}"):  # the dead grants' two tokens
            conn.execute(
                text(
                    q["series"] + "INSERT INTO refresh_tokens (digest, grant_id, client_id, "
                    f"scope, resource, created_at, expires_at, rotated_at) SELECT {q['hex64']}, "
                    f"{prefix}{q['grant']}, {q['client']}, :scope, :resource, :now - {month}, "
                    f":now - {DAY}, {rotated} " + q["from"]
                ),
                {"n": mix["dead_grants"], **values},
            )
    settle(engine)
    engine.dispose()
    return time.monotonic() - started


# --- load --------------------------------------------------------------------------------------


class Credentials:
    """Single-use codes and refresh tokens for one server, written with SQL as copies of the
    rows of the last of 16 codes minted through /authorize (see the module docstring)."""

    def __init__(self, c: pgbench.Cluster, database: str) -> None:
        self.c = c
        self.engine = make_engine(database)  # SQLite: waits for the write lock as mcpauth does
        asyncio.run(pgbench.mint_codes(c, 16))
        with self.engine.connect() as conn:
            code = (
                conn.execute(
                    text("SELECT * FROM authorization_codes ORDER BY created_at DESC LIMIT 1")
                )
                .mappings()
                .one()
            )
            grant = (
                conn.execute(text("SELECT * FROM grants WHERE id = :id"), {"id": code["grant_id"]})
                .mappings()
                .one()
            )
        self.code_row, self.grant_row = dict(code), dict(grant)

    def _grants(self, n: int, now: int) -> list[dict[str, Any]]:
        return [
            {**self.grant_row, "id": secrets.token_hex(16), "created_at": now, "last_used_at": now}
            for _ in range(n)
        ]

    def codes(self, n: int) -> list[str]:
        now = int(time.time())
        codes = [secrets.token_urlsafe(32) for _ in range(n)]
        grants = self._grants(n, now)
        rows = [
            {**self.code_row, "digest": hashlib.sha256(code.encode()).hexdigest(),
             "grant_id": grant["id"], "created_at": now, "expires_at": now + 600,
             "redeemed_at": None}
            for code, grant in zip(codes, grants, strict=True)
        ]  # fmt: skip
        with self.engine.begin() as conn:
            conn.execute(_insert("grants", self.grant_row), grants)
            conn.execute(_insert("authorization_codes", self.code_row), rows)
        return common.code_bodies(self.c.client_id, codes)

    def refreshes(self, n: int) -> list[str]:
        now = int(time.time())
        tokens = [secrets.token_urlsafe(32) for _ in range(n)]
        grants = self._grants(n, now)
        rows = [
            {"digest": hashlib.sha256(token.encode()).hexdigest(), "grant_id": grant["id"],
             "client_id": self.code_row["client_id"], "scope": self.code_row["scope"],
             "resource": self.code_row["resource"], "created_at": now,
             "expires_at": now + 14 * DAY, "rotated_at": None}
            for token, grant in zip(tokens, grants, strict=True)
        ]  # fmt: skip
        with self.engine.begin() as conn:
            conn.execute(_insert("grants", self.grant_row), grants)
            conn.execute(_insert("refresh_tokens", rows[0]), rows)
        return common.refresh_bodies(self.c.client_id, tokens)

    def dispose(self) -> None:
        self.engine.dispose()


def _insert(table: str, row: dict[str, Any]) -> Any:
    columns = ", ".join(row)
    values = ", ".join(":" + c for c in row)
    return text(f"INSERT INTO {table} ({columns}) VALUES ({values})")  # noqa: S608 (our names)


@dataclass
class Config:
    """One engine and size: its database, its server and what its loads last used."""

    engine: str
    rows: int
    workdir: Path
    database: str
    cluster: pgbench.Cluster
    credentials: Credentials
    fill_seconds: float
    rate: dict[str, float] = field(default_factory=dict)  # requests/s of its last run
    results: list[dict[str, Any]] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.engine} {self.rows:,}"


def load(config: Config, kind: str, args: argparse.Namespace) -> dict[str, Any]:
    """One ``kind`` ("exchange" or "refresh") run of ``args.duration`` seconds with enough
    single-use credentials (the first sized by a 1 s warm-up); every answer must be 200. The
    result has ``window``: when wrk started and ended (time.monotonic)."""
    make = config.credentials.codes if kind == "exchange" else config.credentials.refreshes
    if kind not in config.rate:  # warm-up: sizes the first measured run, not reported
        warm = wrk(config, make(1500), 1, args)
        config.rate[kind] = warm["ok"] / warm["seconds"]
    need = int(config.rate[kind] * args.duration * 1.6) + 300
    for _ in range(3):
        bodies = make(need)
        started = time.monotonic()
        result = wrk(config, bodies, args.duration, args)
        result["window"] = (started, time.monotonic())
        if not result["exhausted"]:
            config.rate[kind] = result["rps"]
            return result
        need *= 2
    raise SystemExit(f"{config.name} {kind}: ran out of credentials three times")


def wrk(config: Config, bodies: list[str], duration: int, args: argparse.Namespace) -> Any:
    result = pgbench.wrk(
        config.cluster, bodies, duration=duration, connections=args.connections,
        workdir=config.workdir,
    )  # fmt: skip
    if result["bad"]:
        raise SystemExit(f"{config.name}: {result['bad']} failed: {result['first_error']}")
    result.pop("tokens", None)
    return result


# `mcpauth serve` that prunes once on SIGUSR1, as its periodic task does: storage.prune.prune on
# the app's own database (the write lock that requests take on SQLite) in a worker thread; the
# rows and its start and end (the machine's monotonic clock) go to BENCH_PRUNE_OUTPUT.
SERVE_WITH_PRUNER = """
import json, os, signal, sys, threading, time
import mcpauth.server.app as server_app
from mcpauth import cli
from mcpauth.server.storage.prune import prune
apps = []
create_app = server_app.create_app
server_app.create_app = lambda *a, **k: apps.append(create_app(*a, **k)) or apps[-1]
def run():
    ctx, started = apps[0].state.mcpauth, time.monotonic()
    counts = prune(ctx.db, ctx.settings, ctx.now())
    ended = time.monotonic()
    output = os.environ["BENCH_PRUNE_OUTPUT"]
    with open(output + ".tmp", "w") as handle:
        json.dump({"pruned": counts, "started": started, "ended": ended}, handle)
    os.rename(output + ".tmp", output)
signal.signal(signal.SIGUSR1, lambda *_: threading.Thread(target=run).start())
sys.exit(cli.main(sys.argv[1:]))
"""
# The pruner of a cron job (`mcpauth db prune`) or of another replica: a process of its own that
# says when it starts pruning (after its imports) and when it ends.
OWN_PROCESS_PRUNER = """
import json, time
from mcpauth.server.config import load_settings
from mcpauth.server.storage.database import Database, make_engine
from mcpauth.server.storage.prune import prune
settings = load_settings()
db = Database(make_engine(settings.database_url))
print(time.monotonic(), flush=True)
started = time.monotonic()
counts = prune(db, settings, int(time.time()))
print(json.dumps({"pruned": counts, "started": started, "ended": time.monotonic()}))
db.dispose()
"""


def overlap(window: tuple[float, float], pruning: tuple[float, float]) -> float:
    """The share of ``window`` during which the pruner ran."""
    shared = min(window[1], pruning[1]) - max(window[0], pruning[0])
    return max(0.0, shared) / (window[1] - window[0])


def growth_round(config: Config, args: argparse.Namespace) -> dict[str, Any]:
    return {"exchange": load(config, "exchange", args), "refresh": load(config, "refresh", args)}


def pruning_in_serve(config: Config, args: argparse.Namespace) -> dict[str, Any]:
    """Both loads while the server's own pruner runs (SIGUSR1); what it deleted and when."""
    output = config.workdir / "pruned.json"
    output.unlink(missing_ok=True)
    os.kill(config.cluster.pids[0], signal.SIGUSR1)
    during = {"exchange": load(config, "exchange", args), "refresh": load(config, "refresh", args)}
    for _ in range(18000):  # until it has finished (at most half an hour)
        if output.exists():
            break
        time.sleep(0.1)
    return {"during": during, **json.loads(output.read_text())}


def pruning_in_own_process(config: Config, args: argparse.Namespace) -> dict[str, Any]:
    """Both loads while a pruner process of its own runs (on the server's CPU)."""
    env = common.mcpauth_env(config.workdir, config.database)
    pruner = subprocess.Popen(
        ["taskset", "-c", SERVER_CPU, sys.executable, "-c", OWN_PROCESS_PRUNER],
        env=env, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert pruner.stdout is not None
    pruner.stdout.readline()  # its imports are done: pruning starts
    output: list[str] = []
    waiter = threading.Thread(target=lambda: output.append(pruner.communicate(timeout=1800)[0]))
    waiter.start()
    during = {"exchange": load(config, "exchange", args), "refresh": load(config, "refresh", args)}
    waiter.join()
    if pruner.returncode != 0:
        raise SystemExit(f"the pruner failed: {output}")
    return {"during": during, **json.loads(output[0])}


def prune_round(config: Config, args: argparse.Namespace) -> dict[str, Any]:
    """For the pruner in `serve` (and with --own-process-pruner in a process of its own): dead
    rows written, both loads without pruning, then while it deletes them. Then an idle pass and
    a timed table_rows."""
    runs = {}
    modes = [("in serve", pruning_in_serve)]
    if args.own_process_pruner:
        modes.append(("own process", pruning_in_own_process))
    for where, prune_during in modes:
        fill = fill_dead(config.database, config.rows, args.dead)
        quiet = {k: load(config, k, args) for k in ("exchange", "refresh")}
        run = prune_during(config, args)
        for result in run["during"].values():
            result["overlap"] = overlap(result["window"], (run["started"], run["ended"]))
        run.update(
            quiet=quiet,
            fill_seconds=fill,
            deleted=sum(run["pruned"].values()),
            seconds=run["ended"] - run["started"],
        )
        runs[where] = run
        print(f"{config.engine} prune {where}: {run['deleted']:,} rows in {run['seconds']:.1f} s",
              file=sys.stderr, flush=True)  # fmt: skip
    env = common.mcpauth_env(config.workdir, config.database)
    idle = json.loads(common.mcpauth_cli(env, "db", "prune"))
    database = Database(create_engine(config.database))
    counting = time.monotonic()
    table_rows(database)
    counted = time.monotonic() - counting
    database.dispose()
    return {
        "runs": runs,
        "idle_seconds": idle["seconds"],
        "idle_deleted": sum(idle["pruned"].values()),
        "table_rows_seconds": counted,
    }


# --- main --------------------------------------------------------------------------------------


def database_for(engine: str, pg: PostgresServer, workdir: Path) -> str:
    if engine == "PostgreSQL":
        return pg.url(pg.create_database())
    return f"sqlite:///{workdir / 'mcpauth.db'}"


@contextmanager
def configs(
    pg: PostgresServer, sizes: tuple[int, ...], engines: tuple[str, ...] = ("SQLite", "PostgreSQL")
) -> Iterator[list[Config]]:
    """A filled database and a running server for each engine and size."""
    with ExitStack() as stack:
        made = []
        for engine in engines:
            for rows in sizes:
                workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="mcpauth-")))
                database = database_for(engine, pg, workdir)
                c = stack.enter_context(server(workdir, database))
                fill = fill_state(database, rows)
                credentials = Credentials(c, database)
                stack.callback(credentials.dispose)
                made.append(Config(engine, rows, workdir, database, c, credentials, fill))
                print(f"{made[-1].name}: filled in {fill:.1f} s", file=sys.stderr, flush=True)
        yield made


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=int, default=4, help="seconds per measured run")
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--rows", type=int, default=1_000_000, help="the large size")
    parser.add_argument("--dead", type=int, default=1_000_000, help="dead rows to prune")
    parser.add_argument("--skip-prune", action="store_true")
    parser.add_argument(
        "--own-process-pruner",
        action="store_true",
        help="also prune from a process of its own (a cron job, another replica)",
    )
    parser.add_argument("--json", type=Path, help="also write the raw numbers here")
    parser.add_argument(
        "--engines",
        default="SQLite,PostgreSQL",
        help="comma-separated: which engines to measure (default both)",
    )
    args = parser.parse_args()
    common.require_tools("wrk", "taskset")
    began, load_before = time.monotonic(), os.getloadavg()[0]
    pruning: dict[str, dict[str, Any]] = {}
    pg = start_server()
    try:
        _migrate_template(pg)
        pgbench.pin(pg.process.pid)
        engines = tuple(e.strip() for e in args.engines.split(",") if e.strip())
        with configs(pg, (SMALL, args.rows), engines) as all_configs:
            for index in range(args.rounds):
                order = all_configs if index % 2 == 0 else all_configs[::-1]
                for config in order:
                    config.results.append(growth_round(config, args))
                    print(f"{config.name}: {summary(config.results[-1])}", file=sys.stderr,
                          flush=True)  # fmt: skip
            if not args.skip_prune:
                for config in all_configs:
                    if config.rows != args.rows:
                        continue
                    pruning[config.engine] = prune_round(config, args)
            final_rows = {}
            for config in all_configs:
                database = Database(create_engine(config.database))
                final_rows[config.name] = table_rows(database)
                database.dispose()
    finally:
        pg.stop()
    minutes = (time.monotonic() - began) / 60
    print(report(all_configs, final_rows, pruning, args, load_before, minutes))
    if args.json:
        raw = {
            "growth": {c.name: c.results for c in all_configs},
            "fill_seconds": {c.name: c.fill_seconds for c in all_configs},
            "final_rows": final_rows,
            "pruning": pruning,
            "minutes": minutes,
        }
        args.json.write_text(json.dumps(raw, indent=2, default=str))
    return 0


def summary(result: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v['rps']:.0f}/s p99 {v['p99_ms']:.1f} ms" for k, v in result.items())


def report(
    all_configs: list[Config],
    final_rows: dict[str, dict[str, int]],
    pruning: dict[str, dict[str, Any]],
    args: argparse.Namespace,
    load_before: float,
    minutes: float,
) -> str:
    def med(config: Config, kind: str, key: str) -> float:
        return statistics.median(r[kind][key] for r in config.results)

    def runs(config: Config, kind: str, key: str) -> str:
        return common.median_range([r[kind] for r in config.results], key)

    lines = [
        f"rounds: {args.rounds}, {args.duration} s each, {args.connections} connections; server "
        f"and PostgreSQL on CPU {SERVER_CPU}, wrk on CPU {LOAD_CPU}; Python "
        f"{platform.python_version()}, {os.cpu_count()} CPUs; load average before/after: "
        f"{load_before:.1f}/{os.getloadavg()[0]:.1f}; the whole run {minutes:.1f} min",
        "",
        "| engine | rows per table | fill s | exchanges/s | p50/p99 ms | refreshes/s | p50/p99 ms "
        "| p99 vs 10 k (exchange, refresh) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    small = {c.engine: c for c in all_configs if c.rows == SMALL}
    for config in all_configs:
        peer = small[config.engine]
        ratio = [med(config, k, "p99_ms") / med(peer, k, "p99_ms") for k in ("exchange", "refresh")]
        lines.append(
            f"| {config.engine} | {config.rows:,} | {config.fill_seconds:.1f} "
            f"| {runs(config, 'exchange', 'rps')} "
            f"| {runs(config, 'exchange', 'p50_ms')}/{runs(config, 'exchange', 'p99_ms')} "
            f"| {runs(config, 'refresh', 'rps')} "
            f"| {runs(config, 'refresh', 'p50_ms')}/{runs(config, 'refresh', 'p99_ms')} "
            f"| {ratio[0]:.2f}x, {ratio[1]:.2f}x |"
        )
    lines += [
        "",
        "Medians over the rounds, (min-max) in brackets; every request answered 200. Rows at the "
        "end (the credentials add some): "
        + "; ".join(
            f"{name}: "
            + ", ".join(
                f"{t} {final_rows[name][t]:,}" for t in ("clients", "grants", "refresh_tokens")
            )
            for name in final_rows
        )
        + ".",
    ]
    if pruning:
        lines += [
            "",
            "| engine | pruner | dead rows deleted | prune s | rows/s | load | quiet req/s "
            "| quiet p50/p99 ms | pruning req/s | pruning p50/p99 ms | overlap |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for engine, p in pruning.items():
            for where, run in p["runs"].items():
                for kind in ("exchange", "refresh"):
                    q, d = run["quiet"][kind], run["during"][kind]
                    lead = (
                        f"| {engine} | {where} | {run['deleted']:,} | {run['seconds']:.1f} "
                        f"| {run['deleted'] / run['seconds']:,.0f} "
                        if kind == "exchange"
                        else "| | | | | "
                    )
                    lines.append(
                        f"{lead}| {kind} | {q['rps']:.0f} | {q['p50_ms']:.1f}/{q['p99_ms']:.1f} "
                        f"| {d['rps']:.0f} | {d['p50_ms']:.1f}/{d['p99_ms']:.1f} "
                        f"| {d['overlap']:.0%} |"
                    )
        for engine, p in pruning.items():
            run = p["runs"]["in serve"]
            lines.append(
                f"\n{engine}: deleted by table "
                + ", ".join(f"{t} {n:,}" for t, n in run["pruned"].items() if n)
                + f" (dead rows written in {run['fill_seconds']:.1f} s); the idle pass "
                f"(nothing dead) {p['idle_seconds']:.1f} s; table_rows "
                f"{p['table_rows_seconds']:.2f} s."
            )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
