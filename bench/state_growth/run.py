"""Cost that stays flat as data grows: authorization-code exchanges and refreshes (p50, p99,
req/s) with 10 thousand and with 1 million rows in the clients, grants and refresh-token tables,
on SQLite and on PostgreSQL; then the pruner's throughput on 1 million expired interactions and
its effect on concurrent refreshes. The peer of the 1 M figures is the 10 k figures of the same
engine in the same run.

    .venv/bin/python bench/state_growth/run.py [--duration 8] [--rounds 2] [--rows 1000000]

The rows are written in bulk with SQL (``INSERT ... SELECT`` from a generated series) after
`mcpauth` set up the database and before the load, in the shapes `mcpauth` writes
(mcpauth/server/storage/models.py): self-registered (DCR) public clients with a registration
access token digest, one grant per client for a user of its own, and for half the grants a
refresh-token family of two (one rotated, one live); digests are 64 random hex digits, ids 32.
PostgreSQL gets an ANALYZE after the fill (autovacuum's job in production); SQLite none (mcpauth
never runs one). The periodic pruner is off during the growth runs (measured on its own).

The load is bench/postgres's: one `mcpauth serve` pinned to CPU 0 (with PostgreSQL), wrk `-t1`
on CPU 1, 16 connections, every request a single-use code or refresh token minted beforehand
through /authorize by a signed-in first-party client, every response checked (a non-200 fails
the run).

Pruning: 1 M interactions that expired before the run are filled in; a refresh load runs once
without pruning, then again while `mcpauth db prune` (a separate process on CPU 0, as a cron job
or a replica's pruner would share the server's core) deletes them. The rows per second are the
pruner's count over its wall time.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import platform
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
from sqlalchemy import create_engine, text

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # for bench/ and tests/

from bench import common  # noqa: E402
from bench.postgres import run as pgbench  # noqa: E402
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
    )
    client_id = common.setup_authorization_code(env)
    port = common.free_port()
    issuer = f"http://127.0.0.1:{port}"
    with ExitStack() as stack:
        log = workdir / "server.log"
        process = common.spawn(common.serve_command(SERVER_CPU, issuer, port), log, env=env)
        stack.callback(common.stop, process)
        common.wait_ready(process, f"{issuer}/health", log, timeout=60)
        metadata = httpx.get(f"{issuer}/.well-known/oauth-authorization-server").json()
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
        if engine.dialect.name == "postgresql":
            conn.execute(text("ANALYZE"))
    engine.dispose()
    return time.monotonic() - started


def fill_expired_interactions(database: str, rows: int) -> float:
    """``rows`` interactions (validated authorization requests) that expired an hour ago."""
    engine = create_engine(database)
    q = _sql(engine.dialect.name)
    now = int(time.time())
    request = json.dumps(
        {
            "client_id": "f" + "0" * 23,
            "redirect_uri": "http://127.0.0.1:33418/callback",
            "response_type": "code",
            "scope": common.SCOPE,
            "state": "x" * 43,
            "code_challenge": "c" * 43,
            "code_challenge_method": "S256",
            "resource": common.RESOURCE,
        }
    )
    started = time.monotonic()
    with engine.begin() as conn:
        conn.execute(
            text(
                q["series"] + "INSERT INTO interactions (id, request, created_at, expires_at) "
                f"SELECT {q['interaction']}, :request, :now - 4200, :now - 3600 " + q["from"]
            ),
            {"n": rows, "request": request, "now": now},
        )
        if engine.dialect.name == "postgresql":
            conn.execute(text("ANALYZE"))
    engine.dispose()
    return time.monotonic() - started


# --- load --------------------------------------------------------------------------------------


class Credentials:
    """Single-use codes and the refresh tokens harvested from their exchanges.

    Minting thousands of codes through /authorize costs minutes per configuration on this
    shared machine, so a few are minted that way (a signed-in first-party client) and the rest
    are copies of the last one's rows (its grant and its code, with a fresh grant id and a fresh
    code whose SHA-256 digest is stored): exactly the rows /authorize writes, so the exchange
    does the same work."""

    def __init__(self, c: pgbench.Cluster, database: str, workdir: Path) -> None:
        self.c, self.workdir, self.tokens = c, workdir, list[str]()
        self.engine = create_engine(database)
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

    def codes(self, n: int) -> list[str]:
        now = int(time.time())
        codes = [secrets.token_urlsafe(32) for _ in range(n)]
        grants = [{**self.grant_row, "id": secrets.token_hex(16), "created_at": now,
                   "last_used_at": now} for _ in codes]  # fmt: skip
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
        while len(self.tokens) < n:
            got = pgbench.wrk(
                self.c,
                self.codes(min(max(n - len(self.tokens), 500), 5000)),
                duration=min(60, n // 200 + 2),  # wrk runs its whole -d even when exhausted
                connections=16,
                workdir=self.workdir,
            )
            if got["bad"]:
                raise SystemExit(f"exchange: {got['bad']} failed: {got['first_error']}")
            self.tokens += got["tokens"]
        taken, self.tokens = self.tokens[:n], self.tokens[n:]
        return common.refresh_bodies(self.c.client_id, taken)


def _insert(table: str, row: dict[str, Any]) -> Any:
    columns = ", ".join(row)
    values = ", ".join(":" + c for c in row)
    return text(f"INSERT INTO {table} ({columns}) VALUES ({values})")  # noqa: S608 (our names)


def growth_round(
    c: pgbench.Cluster, database: str, args: argparse.Namespace, workdir: Path
) -> dict[str, Any]:
    creds = Credentials(c, database, workdir)
    exchange = pgbench.measured(c, creds.codes, args, workdir, "exchange")
    creds.tokens += exchange["harvest"]
    refresh = pgbench.measured(c, creds.refreshes, args, workdir, "refresh")
    return {"exchange": exchange, "refresh": refresh}


def prune_round(
    c: pgbench.Cluster, database: str, args: argparse.Namespace, workdir: Path
) -> dict[str, Any]:
    """Refreshes without pruning, then the same while `mcpauth db prune` deletes the expired
    interactions; the pruner's rows and seconds."""
    creds = Credentials(c, database, workdir)
    quiet = pgbench.measured(c, creds.refreshes, args, workdir, "refresh, no pruning")
    bodies = creds.refreshes(int(quiet["rps"] * args.duration * 3) + 300)
    env = common.mcpauth_env(workdir, database)
    command = ["taskset", "-c", SERVER_CPU, common.MCPAUTH, "db", "prune"]
    started = time.monotonic()
    pruner = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True)
    during = pgbench.wrk(c, bodies, duration=args.duration, connections=args.connections,
                         workdir=workdir)  # fmt: skip
    wrk_ended = time.monotonic()
    out, _ = pruner.communicate(timeout=1800)
    pruned_in = time.monotonic() - started
    if pruner.returncode != 0:
        raise SystemExit(f"mcpauth db prune failed: {out}")
    if during["bad"] or during["exhausted"]:
        raise SystemExit(f"refresh while pruning: {during['bad']} failed, {during['first_error']}")
    deleted = json.loads(out)["pruned"]["interactions"]
    return {
        "quiet": quiet,
        "during": during,
        "deleted": deleted,
        "prune_seconds": pruned_in,
        "overlap": min(1.0, pruned_in / (wrk_ended - started)),
    }


# --- main --------------------------------------------------------------------------------------


def database_for(engine: str, pg: PostgresServer, workdir: Path) -> str:
    if engine == "PostgreSQL":
        return pg.url(pg.create_database())
    return f"sqlite:///{workdir / 'mcpauth.db'}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=int, default=8, help="seconds per measured run")
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--rows", type=int, default=1_000_000, help="the large size")
    parser.add_argument("--skip-prune", action="store_true")
    parser.add_argument("--json", type=Path, help="also write the raw numbers here")
    args = parser.parse_args()
    common.require_tools("wrk", "taskset")
    load_before = os.getloadavg()[0]
    growth: dict[tuple[str, int], list[dict[str, Any]]] = {}
    fills: dict[tuple[str, int], list[float]] = {}
    pruning: dict[str, dict[str, Any]] = {}
    pg = start_server()
    try:
        _migrate_template(pg)
        pgbench.pin(pg.process.pid)
        for _ in range(args.rounds):
            for engine in ("SQLite", "PostgreSQL"):
                for rows in (SMALL, args.rows):
                    with tempfile.TemporaryDirectory(prefix="mcpauth-bench-growth-") as tmp:
                        workdir = Path(tmp)
                        database = database_for(engine, pg, workdir)
                        with server(workdir, database) as c:
                            fills.setdefault((engine, rows), []).append(fill_state(database, rows))
                            result = growth_round(c, database, args, workdir)
                        growth.setdefault((engine, rows), []).append(result)
                        print(f"{engine} {rows}: {summary(result)}", file=sys.stderr, flush=True)
        if not args.skip_prune:
            for engine in ("SQLite", "PostgreSQL"):
                with tempfile.TemporaryDirectory(prefix="mcpauth-bench-prune-") as tmp:
                    workdir = Path(tmp)
                    database = database_for(engine, pg, workdir)
                    with server(workdir, database) as c:
                        fill_expired_interactions(database, args.rows)
                        pruning[engine] = prune_round(c, database, args, workdir)
                    p = pruning[engine]
                    print(
                        f"{engine} prune: {p['deleted']} rows in {p['prune_seconds']:.1f} s",
                        file=sys.stderr,
                        flush=True,
                    )
    finally:
        pg.stop()
    print(report(growth, fills, pruning, args, load_before))
    if args.json:
        raw = {
            "growth": {f"{e} {r}": pgbench.strip({"x": v})["x"] for (e, r), v in growth.items()},
            "fill_seconds": {f"{e} {r}": v for (e, r), v in fills.items()},
            "pruning": {
                e: {k: v for k, v in p.items() if k not in ("quiet", "during")}
                | {k: {f: x for f, x in p[k].items() if f not in ("tokens", "harvest")}
                   for k in ("quiet", "during")}
                for e, p in pruning.items()
            },
        }  # fmt: skip
        args.json.write_text(json.dumps(raw, indent=2))
    return 0


def summary(result: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v['rps']:.0f}/s p99 {v['p99_ms']:.1f} ms" for k, v in result.items())


def report(
    growth: dict[tuple[str, int], list[dict[str, Any]]],
    fills: dict[tuple[str, int], list[float]],
    pruning: dict[str, dict[str, Any]],
    args: argparse.Namespace,
    load_before: float,
) -> str:
    def med(rounds: list[dict[str, Any]], kind: str, key: str) -> float:
        return statistics.median(r[kind][key] for r in rounds)

    lines = [
        f"rounds: {args.rounds}, {args.duration} s each, {args.connections} connections; server "
        f"and PostgreSQL on CPU {SERVER_CPU}, wrk on CPU {LOAD_CPU}; Python "
        f"{platform.python_version()}, {os.cpu_count()} CPUs; load average before/after: "
        f"{load_before:.1f}/{os.getloadavg()[0]:.1f}",
        "",
        "| engine | rows per table | fill s | exchanges/s | p50/p99 ms | refreshes/s | p50/p99 ms "
        "| p99 vs 10 k (exchange, refresh) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for (engine, rows), rounds in growth.items():
        small = growth[(engine, SMALL)]
        ratio = [
            med(rounds, k, "p99_ms") / med(small, k, "p99_ms") for k in ("exchange", "refresh")
        ]
        lines.append(
            f"| {engine} | {rows:,} | {statistics.median(fills[(engine, rows)]):.1f} "
            f"| {common.median_range([r['exchange'] for r in rounds], 'rps')} "
            f"| {common.median_range([r['exchange'] for r in rounds], 'p50_ms')}/"
            f"{common.median_range([r['exchange'] for r in rounds], 'p99_ms')} "
            f"| {common.median_range([r['refresh'] for r in rounds], 'rps')} "
            f"| {common.median_range([r['refresh'] for r in rounds], 'p50_ms')}/"
            f"{common.median_range([r['refresh'] for r in rounds], 'p99_ms')} "
            f"| {ratio[0]:.2f}x, {ratio[1]:.2f}x |"
        )
    lines += ["", "Medians over the rounds, (min-max) in brackets; every request answered 200."]
    if pruning:
        lines += [
            "",
            "| engine | expired interactions deleted | prune s | rows/s | refreshes/s quiet "
            "| p50/p99 ms quiet | refreshes/s pruning | p50/p99 ms pruning | pruning during wrk |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for engine, p in pruning.items():
            q, d = p["quiet"], p["during"]
            lines.append(
                f"| {engine} | {p['deleted']:,} | {p['prune_seconds']:.1f} "
                f"| {p['deleted'] / p['prune_seconds']:,.0f} | {q['rps']:.0f} "
                f"| {q['p50_ms']:.1f}/{q['p99_ms']:.1f} | {d['rps']:.0f} "
                f"| {d['p50_ms']:.1f}/{d['p99_ms']:.1f} | {p['overlap']:.0%} |"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
