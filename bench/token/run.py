"""Token endpoint benchmark: authorization-code exchanges per second and refreshes per second
against one `mcpauth serve` process on SQLite, with `GET /health` on the same server as the peer
(the ceiling of its HTTP stack) measured in the same run.

    .venv/bin/python bench/token/run.py [--duration 10] [--connections 16] [--rounds 3]
                                        [--src DIR] [--baseline DIR] [--json FILE]

The server runs pinned to CPU 0, wrk (one thread, token.lua) and this script to CPU 1. mcpauth
is imported from this checkout (``--src``: another one); ``--baseline DIR`` also measures the
mcpauth of another checkout (``git worktree add --detach DIR main``) in the same rounds, the
two servers taking turns (the order flips every round), each on a fresh database.

Codes and refresh tokens are single use, so every request of a measured run carries its own.
They are written straight into the server's SQLite file before each run, as consent and an
exchange write them (a grant per code, a grant per refresh token): minting them through
`/authorize` (two requests and about 10 ms of server CPU a code) could not keep ahead of the
token endpoint. A 2 s calibration run (which also warms the server up) sizes each batch. Every
request must succeed: a single non-200 fails the run; running out of credentials discards the
measurement and repeats it with twice as many.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import secrets
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx2

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, for bench/
from bench import common

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
LUA = HERE / "token.lua"
SERVER_CPU = "0"
LOAD_CPU = 1
CREDENTIAL_TTL = 600  # the written codes and refresh tokens outlive the round
RATE_LIMIT = 10**9  # requests per minute
ATTEMPTS = 4
WORKLOADS = ("authorization_code exchange", "refresh_token", "GET /health (peer)")
OURS, BASELINE = "mcpauth", "mcpauth (baseline)"


@dataclass
class Server:
    name: str
    issuer: str
    process: subprocess.Popen[bytes]
    client_id: str
    token_path: str
    database: Path


@contextmanager
def server(workdir: Path, name: str, src: Path) -> Iterator[Server]:
    """`mcpauth serve`, imported from ``src``, on a fresh SQLite file with the bench user, the
    resource and a first-party public client."""
    workdir = workdir / name.replace(" ", "-").strip("()")
    workdir.mkdir()
    database = workdir / "mcpauth.db"
    # all load comes from one address: the per-address limits stay on (their counting is part
    # of every request's cost, as shipped) but are raised out of reach
    env = common.mcpauth_env(
        workdir,
        f"sqlite:///{database}",
        PYTHONPATH=str(src.resolve()),
        MCPAUTH_RATE_LIMIT_TOKEN=str(RATE_LIMIT),
    )
    client_id = common.setup_authorization_code(env)
    port = common.free_port()
    issuer = f"http://127.0.0.1:{port}"
    command = common.serve_command(SERVER_CPU, issuer, port)
    log = workdir / "server.log"
    process = common.spawn(command, log, env=env)
    try:
        common.wait_ready(process, f"{issuer}/health", log)
        metadata = httpx2.get(f"{issuer}/.well-known/oauth-authorization-server").json()
        token_path = urlsplit(metadata["token_endpoint"]).path
        yield Server(name, issuer, process, client_id, token_path, database)
    except BaseException:
        tail = log.read_text(errors="replace").splitlines()[-40:]
        print("--- server log (tail) ---", *tail, sep="\n", file=sys.stderr)
        raise
    finally:
        common.stop(process)


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def _insert(db: sqlite3.Connection, table: str, rows: list[dict[str, Any]]) -> None:
    names = list(rows[0])
    columns, marks = ", ".join(names), ", ".join(f":{n}" for n in names)
    # the table and column names are this script's own constants
    db.executemany(f"INSERT INTO {table} ({columns}) VALUES ({marks})", rows)  # noqa: S608


def write_credentials(srv: Server, kind: str, count: int) -> list[str]:
    """``count`` fresh codes (``kind`` "code") or refresh tokens ("refresh"), each of its own
    grant for the bench user, written into the server's database as consent (a grant and its
    code) or an exchange (a grant and its refresh token) writes them."""
    now = int(time.time())
    values = [secrets.token_urlsafe(32) for _ in range(count)]
    with sqlite3.connect(srv.database, timeout=30, isolation_level=None) as db:
        users = db.execute("SELECT id FROM users WHERE username = ?", (common.USER,))
        (user_id,) = users.fetchone()
        shared = {"client_id": srv.client_id, "resource": common.RESOURCE, "scope": common.SCOPE}
        grants = [
            {"id": secrets.token_hex(16), "user_id": user_id, "created_at": now, **shared}
            for _ in values
        ]
        expiring = {"created_at": now, "expires_at": now + CREDENTIAL_TTL, **shared}
        if kind == "code":
            table, rows = (
                "authorization_codes",
                [
                    {"digest": _digest(v), "grant_id": g["id"], "user_id": user_id, **expiring}
                    | {"redirect_uri": common.REDIRECT_URI, "code_challenge": common.CHALLENGE}
                    | {"offline": 0, "auth_time": now}
                    for v, g in zip(values, grants, strict=True)
                ],
            )
        else:
            table, rows = (
                "refresh_tokens",
                [
                    {"digest": _digest(v), "grant_id": g["id"], **expiring}
                    for v, g in zip(values, grants, strict=True)
                ],
            )
        db.execute("BEGIN IMMEDIATE")
        _insert(db, "grants", [g | {"last_used_at": now} for g in grants])
        _insert(db, table, rows)
        db.execute("COMMIT")
    return values


def bodies(srv: Server, kind: str, count: int) -> list[str]:
    """``count`` single-use token request bodies of ``kind`` ("code" or "refresh")."""
    credentials = write_credentials(srv, kind, count)
    if kind == "code":
        return common.code_bodies(srv.client_id, credentials)
    return common.refresh_bodies(srv.client_id, credentials)


def wrk(
    srv: Server, lines: list[str], *, duration: float, connections: int, workdir: Path
) -> dict[str, Any]:
    """One wrk run over ``lines`` (empty: GET /health). Returns wrk's numbers plus CPU use."""
    source = workdir / "bodies.txt"
    source.write_text("".join(b + "\n" for b in lines))
    env = {**os.environ, "BENCH_INPUT": str(source), "BENCH_PATH": srv.token_path}
    command = common.wrk_command(
        str(LOAD_CPU), LUA, srv.issuer + srv.token_path, connections=connections, duration=duration
    )
    # token runs count only answered token requests; the peer run counts GET /health
    return common.measure(command, env, srv.process.pid, counted="ok" if lines else "requests")


def checked(result: dict[str, Any], what: str, *, expect_exhausted: bool = False) -> dict[str, Any]:
    if result["bad"] or result["socket_errors"]:
        raise SystemExit(f"{what}: {result['bad']} failed requests, first: {result['first_error']}")
    if result["exhausted"] and not expect_exhausted:
        raise SystemExit(f"{what}: ran out of credentials")
    return result


def token_round(srv: Server, kind: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """A calibration run (2 s, also the warm-up), then the measured run with enough
    credentials for 1.5 times the calibrated rate."""
    what = f"{srv.name} {kind}"
    supply: Callable[[int], list[str]] = lambda n: bodies(srv, kind, n)  # noqa: E731
    batch = 2000
    while True:
        probe = wrk(srv, supply(batch), duration=2, connections=args.connections, workdir=workdir)
        checked(probe, f"{what} calibration", expect_exhausted=True)
        if not probe["exhausted"]:
            break
        batch *= 2
    rate = probe["ok"] / probe["seconds"]
    for _ in range(ATTEMPTS):
        need = int(rate * args.duration * 1.5) + 200
        result = wrk(
            srv, supply(need), duration=args.duration, connections=args.connections, workdir=workdir
        )
        checked(result, what, expect_exhausted=True)
        if not result["exhausted"]:
            result["credentials"] = need
            return result
        # the calibration under-estimated the rate (a noisy machine): again, with more
        rate = max(rate, result["ok"] / result["seconds"]) * 2
    raise SystemExit(f"{what}: ran out of credentials {ATTEMPTS} times")


def health_round(srv: Server, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    return checked(
        wrk(srv, [], duration=args.duration, connections=args.connections, workdir=workdir),
        f"{srv.name} health",
        expect_exhausted=True,
    )


def _table(rows: dict[str, dict[str, list[dict[str, Any]]]]) -> list[str]:
    fmt = common.median_range
    lines = [
        "| server | workload | req/s | vs /health | p50 ms | p90 ms | p99 ms | p99.9 ms "
        "| wrk CPU | server CPU | server CPU ms/req | run s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, workloads in rows.items():
        health = statistics.median(r["rps"] for r in workloads["GET /health (peer)"])
        for workload, results in workloads.items():
            ratio = statistics.median(r["rps"] for r in results) / health
            lines.append(
                f"| {name} | {workload} | {fmt(results, 'rps')} | {ratio:.2f} "
                f"| {fmt(results, 'p50_us', 1e-3, 1)} | {fmt(results, 'p90_us', 1e-3, 1)} "
                f"| {fmt(results, 'p99_us', 1e-3, 1)} | {fmt(results, 'p999_us', 1e-3, 1)} "
                f"| {fmt(results, 'load_cpu', 100)} % | {fmt(results, 'server_cpu', 100)} % "
                f"| {fmt(results, 'server_cpu_ms', 1, 2)} | {fmt(results, 'seconds', 1, 1)} |"
            )
    return lines


def _against_baseline(rows: dict[str, dict[str, list[dict[str, Any]]]]) -> list[str]:
    lines = ["", "mcpauth / baseline, same rounds:"]
    for workload in WORKLOADS:
        ours, base = rows[OURS][workload], rows[BASELINE][workload]
        median = statistics.median
        rate = median(r["rps"] for r in ours) / median(r["rps"] for r in base)
        p99 = median(r["p99_us"] for r in ours) / median(r["p99_us"] for r in base)
        paired = [a["rps"] / b["rps"] for a, b in zip(ours, base, strict=True)]
        lines.append(
            f"- {workload}: req/s {rate:.2f}x (per round {[round(x, 2) for x in paired]}), "
            f"p99 {p99:.2f}x"
        )
    return lines


def report(rows: dict[str, dict[str, list[dict[str, Any]]]], args: argparse.Namespace) -> str:
    wrk_max = max(r["load_cpu"] for w in rows.values() for rs in w.values() for r in rs)
    lines = [
        f"rounds: {args.rounds}, {args.duration} s each, wrk -t1 -c{args.connections}; "
        f"server on CPU {SERVER_CPU}, wrk on CPU {LOAD_CPU}; {platform.python_version()}, "
        f"{os.cpu_count()} CPUs; mcpauth from {args.src}"
        + (f", baseline from {args.baseline}" if args.baseline else "")
        + f"; load average before/after: {args.load_before:.1f}/{os.getloadavg()[0]:.1f}",
        "",
        *_table(rows),
        *(_against_baseline(rows) if args.baseline else []),
        "",
        f"load generator: at most {wrk_max * 100:.0f} % of its CPU "
        + ("(not the bottleneck)" if wrk_max < 0.7 else "(may be the bottleneck)"),
        "Every exchange and refresh answered 200. Numbers are medians over the rounds, "
        "(min-max) in brackets.",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=int, default=10, help="seconds per measured run")
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--json", type=Path, help="also write the raw numbers here")
    parser.add_argument("--src", type=Path, default=ROOT, help="import mcpauth from this checkout")
    parser.add_argument(
        "--baseline",
        type=Path,
        help="also measure mcpauth imported from this checkout (an earlier commit), in the "
        "same rounds, as the 'before' of a change",
    )
    args = parser.parse_args()
    common.require_tools("wrk", "taskset")
    os.sched_setaffinity(0, {LOAD_CPU})
    args.load_before = os.getloadavg()[0]
    trees = [(OURS, args.src)] + ([(BASELINE, args.baseline)] if args.baseline else [])
    rows: dict[str, dict[str, list[dict[str, Any]]]] = {
        name: {w: [] for w in WORKLOADS} for name, _ in trees
    }
    for round_ in range(args.rounds):
        for name, tree in trees if round_ % 2 == 0 else trees[::-1]:
            with tempfile.TemporaryDirectory(prefix="mcpauth-bench-") as tmp:
                workdir = Path(tmp)
                with server(workdir, name, tree) as srv:
                    done = rows[name]
                    done[WORKLOADS[0]].append(token_round(srv, "code", args, workdir))
                    done[WORKLOADS[1]].append(token_round(srv, "refresh", args, workdir))
                    done[WORKLOADS[2]].append(health_round(srv, args, workdir))
                    print(
                        f"round {round_ + 1} {name}: "
                        + ", ".join(
                            f"{w} {done[w][-1]['rps']:.0f}/s p99 "
                            f"{done[w][-1]['p99_us'] / 1000:.1f} ms"
                            for w in WORKLOADS
                        ),
                        flush=True,
                    )
    print()
    print(report(rows, args))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
