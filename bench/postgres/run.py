"""Token endpoint on PostgreSQL: authorization-code exchanges and refreshes per second with one
and with two `mcpauth serve` processes on one database, against the same workload on SQLite
with one process (the embedded default) and `GET /health` (the HTTP stack's ceiling) as peers
measured in the same run.

    .venv/bin/python bench/postgres/run.py [--duration 8] [--connections 16] [--rounds 2]

PostgreSQL is the tests' throwaway server (tests/pg.py: initdb in a temporary directory, as the
`postgres` user when run as root, fsync off) and, with the mcpauth processes, is pinned to CPU 0;
wrk (one process per replica, each `-t1` with half the connections, `token.lua`) and this
script run on CPU 1. With two replicas each wrk sends to its own replica, as a load balancer
would split the traffic; the rate is the sum. Every request carries its own credential, used
once: codes are minted beforehand by a signed-in first-party client (no consent page), refresh
tokens are collected from the exchange responses. A non-200 or running out of credentials fails
the run. The per-address rate limits are raised out of reach (every request comes from
127.0.0.1) but stay on, so each request still pays for its counter upsert.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx2

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # for bench/ and tests/

from bench import common  # noqa: E402
from tests.pg import PostgresServer, _migrate_template, start_server  # noqa: E402

HERE = Path(__file__).resolve().parent
LUA = HERE / "token.lua"
SERVER_CPU, LOAD_CPU = "0", "1"
MINT_PARALLEL = 8


@dataclass
class Cluster:
    issuer: str
    ports: list[int]
    pids: list[int]
    client_id: str
    token_path: str
    cookies: httpx2.Cookies


@contextmanager
def cluster(workdir: Path, database: str, replicas: int) -> Iterator[Cluster]:
    env = common.mcpauth_env(
        workdir,
        database,
        # every request comes from 127.0.0.1: limits high enough never to bite, still counted
        MCPAUTH_RATE_LIMIT_TOKEN=str(10**9),
        MCPAUTH_RATE_LIMIT_AUTHORIZE=str(10**9),
        # codes are minted before the run, more slowly than they are redeemed
        MCPAUTH_AUTHORIZATION_CODE_TTL="600",
    )
    client_id = common.setup_authorization_code(env)
    ports = [common.free_port() for _ in range(replicas)]
    issuer = f"http://127.0.0.1:{ports[0]}"
    with ExitStack() as stack:
        processes = []
        for port in ports:
            log = workdir / f"server-{port}.log"
            command = common.serve_command(SERVER_CPU, issuer, port)
            process = common.spawn(command, log, env=env)
            stack.callback(common.stop, process)
            processes.append(process)
            common.wait_ready(process, f"http://127.0.0.1:{port}/health", log, timeout=60)
        metadata = httpx2.get(f"{issuer}/.well-known/oauth-authorization-server").json()
        yield Cluster(
            issuer,
            ports,
            [p.pid for p in processes],
            client_id,
            urlsplit(metadata["token_endpoint"]).path,
            common.sign_in(issuer, client_id),
        )


async def mint_codes(c: Cluster, count: int) -> list[str]:
    return await common.mint_codes(c.issuer, c.client_id, c.cookies, count, parallel=MINT_PARALLEL)


def wrk(
    c: Cluster, bodies: list[str], *, duration: float, connections: int, workdir: Path
) -> dict[str, Any]:
    """One wrk per replica, started together, each with its share of ``bodies`` (none: GET
    /health). Returns the summed rate and the refresh tokens of the 200 responses."""
    share = [bodies[i :: len(c.ports)] for i in range(len(c.ports))]
    runs = []
    for index, port in enumerate(c.ports):
        source, sink = workdir / f"bodies-{port}.txt", workdir / f"tokens-{port}.txt"
        source.write_text("".join(b + "\n" for b in share[index]))
        sink.unlink(missing_ok=True)
        env = {
            **os.environ,
            "BENCH_INPUT": str(source),
            "BENCH_PATH": c.token_path,
            "BENCH_OUTPUT": str(sink),
        }
        command = common.wrk_command(
            LOAD_CPU,
            LUA,
            f"http://127.0.0.1:{port}{c.token_path if bodies else '/health'}",
            connections=max(1, connections // len(c.ports)),
            duration=duration,
        )
        runs.append((subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True), sink))
    total: dict[str, Any] = {"ok": 0, "requests": 0, "bad": 0, "exhausted": 0, "tokens": []}
    p50, p99, seconds = [], [], []
    for process, sink in runs:
        out, _ = process.communicate(timeout=duration + 60)
        result = common.bench_line(process.returncode, out)
        for key in ("ok", "requests", "bad", "exhausted"):
            total[key] += result[key]
        total["bad"] += result["socket_errors"]
        total.setdefault("first_error", result["first_error"])
        p50.append(result["p50_us"])
        p99.append(result["p99_us"])
        seconds.append(result["duration_us"] / 1e6)
        if sink.exists():
            total["tokens"] += sink.read_text().split()
    total["seconds"] = max(seconds)
    total["rps"] = (total["ok"] if bodies else total["requests"]) / total["seconds"]
    total["p50_ms"] = max(p50) / 1000
    total["p99_ms"] = max(p99) / 1000
    return total


def measured(
    c: Cluster, make: Any, args: argparse.Namespace, workdir: Path, what: str
) -> dict[str, Any]:
    """A 2 s probe sizes the batch, then the measured run; both must answer every request 200."""
    batch = 300
    while True:
        probe = wrk(c, make(batch), duration=2, connections=args.connections, workdir=workdir)
        if probe["bad"]:
            raise SystemExit(f"{what} probe: {probe['bad']} failed: {probe['first_error']}")
        if not probe["exhausted"]:
            break
        batch *= 2
    need = int(probe["rps"] * args.duration * 3) + 300
    harvest = probe["tokens"]
    for _ in range(4):  # the probe can underestimate (warm-up): retry with a bigger batch
        result = wrk(
            c, make(need), duration=args.duration, connections=args.connections, workdir=workdir
        )
        if result["bad"]:
            raise SystemExit(f"{what}: {result['bad']} failed: {result['first_error']}")
        harvest += result["tokens"]
        if not result["exhausted"]:
            break
        need *= 2
    else:
        raise SystemExit(f"{what}: ran out of credentials four times")
    result["harvest"] = harvest
    return result


def round_(c: Cluster, args: argparse.Namespace, workdir: Path) -> dict[str, dict[str, Any]]:
    tokens: list[str] = []

    def codes(n: int) -> list[str]:
        return common.code_bodies(c.client_id, asyncio.run(mint_codes(c, n)))

    def refreshes(n: int) -> list[str]:
        nonlocal tokens
        while len(tokens) < n:
            more = asyncio.run(mint_codes(c, min(n - len(tokens), 3000)))
            got = wrk(
                c,
                common.code_bodies(c.client_id, more),
                duration=60,
                connections=16,
                workdir=workdir,
            )
            tokens += got["tokens"]
        taken, tokens = tokens[:n], tokens[n:]
        return common.refresh_bodies(c.client_id, taken)

    exchange = measured(c, codes, args, workdir, "exchange")
    tokens += exchange["harvest"]
    refresh = measured(c, refreshes, args, workdir, "refresh")
    health = wrk(c, [], duration=args.duration, connections=args.connections, workdir=workdir)
    return {"exchange": exchange, "refresh": refresh, "health": health}


def pin(pid: int) -> None:
    subprocess.run(
        ["taskset", "-a", "-p", "-c", SERVER_CPU, str(pid)], check=True, capture_output=True
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=int, default=8, help="seconds per measured run")
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", type=Path, help="also write the raw numbers here")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    rows: dict[str, list[dict[str, dict[str, Any]]]] = {}
    pg: PostgresServer = start_server()
    try:
        _migrate_template(pg)
        pin(pg.process.pid)
        configs = [("SQLite, 1 process", None, 1), ("PostgreSQL, 1 process", "pg", 1),
                   ("PostgreSQL, 2 processes", "pg", 2)]  # fmt: skip
        for _ in range(args.rounds):
            for name, engine, replicas in configs:
                with tempfile.TemporaryDirectory(prefix="mcpauth-bench-pg-") as tmp:
                    workdir = Path(tmp)
                    if engine == "pg":
                        database = pg.url(pg.create_database())
                    else:
                        database = f"sqlite:///{workdir / 'mcpauth.db'}"
                    with cluster(workdir, database, replicas) as c:
                        rows.setdefault(name, []).append(round_(c, args, workdir))
                    print(f"{name}: {summary(rows[name][-1])}", file=sys.stderr, flush=True)
    finally:
        pg.stop()
    print(report(rows, args, load_before))
    if args.json:
        args.json.write_text(json.dumps(strip(rows), indent=2))
    return 0


def strip(rows: dict[str, list[dict[str, dict[str, Any]]]]) -> Any:
    return {
        name: [
            {
                k: {f: v for f, v in r.items() if f not in ("tokens", "harvest")}
                for k, r in rnd.items()
            }
            for rnd in rounds
        ]
        for name, rounds in rows.items()
    }


def summary(result: dict[str, dict[str, Any]]) -> str:
    return ", ".join(f"{k} {v['rps']:.0f}/s" for k, v in result.items())


def median(rounds: list[dict[str, dict[str, Any]]], kind: str, key: str) -> str:
    return common.median_range([r[kind] for r in rounds], key)


def report(rows: dict[str, Any], args: argparse.Namespace, load_before: float) -> str:
    base = statistics.median(r["exchange"]["rps"] for r in rows["SQLite, 1 process"])
    base_refresh = statistics.median(r["refresh"]["rps"] for r in rows["SQLite, 1 process"])
    lines = [
        f"rounds: {args.rounds}, {args.duration} s each, {args.connections} connections in all; "
        f"servers and PostgreSQL on CPU {SERVER_CPU}, wrk on CPU {LOAD_CPU}; Python "
        f"{platform.python_version()}, {os.cpu_count()} CPUs; load average before/after: "
        f"{load_before:.1f}/{os.getloadavg()[0]:.1f}",
        "",
        "| setup | exchanges/s | vs SQLite | p50/p99 ms | refreshes/s | vs SQLite | p50/p99 ms "
        "| GET /health/s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, rounds in rows.items():
        ex = statistics.median(r["exchange"]["rps"] for r in rounds)
        rf = statistics.median(r["refresh"]["rps"] for r in rounds)
        lines.append(
            f"| {name} | {median(rounds, 'exchange', 'rps')} | {ex / base:.2f} "
            f"| {median(rounds, 'exchange', 'p50_ms')}/{median(rounds, 'exchange', 'p99_ms')} "
            f"| {median(rounds, 'refresh', 'rps')} | {rf / base_refresh:.2f} "
            f"| {median(rounds, 'refresh', 'p50_ms')}/{median(rounds, 'refresh', 'p99_ms')} "
            f"| {median(rounds, 'health', 'rps')} |"
        )
    lines += ["", "Medians over the rounds, (min-max) in brackets; every request answered 200."]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
