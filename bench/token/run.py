"""Token endpoint benchmark: authorization-code exchanges per second and refreshes per second
against one `mcpauth serve` process on SQLite, with `GET /health` on the same server as the peer
(the ceiling of its HTTP stack) measured in the same run.

    .venv/bin/python bench/token/run.py [--duration 10] [--connections 16] [--rounds 3]
                                        [--serialize-writes] [--json FILE]

The server runs pinned to CPU 0, wrk (one thread, token.lua) and this script to CPU 1. Codes are
single use and live 60 s, so each round mints them just before the run: a first-party public
client with a signed-in session cookie gets a code from every `/authorize` without any page
(two requests: `/authorize` → `/interaction/<id>` → redirect with the code). A short calibration
run sizes the batch. The refresh tokens come from the exchange run itself (each exchange returns
one); each refresh token is used once. Every request must succeed: a single non-200 fails the
run; running out of pre-minted credentials discards the measurement and repeats it with more.
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
LUA = HERE / "token.lua"
SERVER_CPU = "0"
LOAD_CPU = 1
CODE_TTL = 60
RATE_LIMIT = 10**9  # requests per minute
MINT_BUDGET = 35.0  # seconds of minting; the batch must be used well within the code TTL
MINT_PARALLEL = 4


@dataclass
class Server:
    issuer: str
    process: subprocess.Popen[bytes]
    client_id: str
    token_path: str


@contextmanager
def server(workdir: Path, *, serialize_writes: bool = False) -> Iterator[Server]:
    # all load comes from one address: the per-address limits stay on (their counting is part
    # of every request's cost, as shipped) but are raised out of reach
    env = common.mcpauth_env(
        workdir,
        f"sqlite:///{workdir / 'mcpauth.db'}",
        MCPAUTH_RATE_LIMIT_TOKEN=str(RATE_LIMIT),
        MCPAUTH_RATE_LIMIT_AUTHORIZE=str(RATE_LIMIT),
    )
    client_id = common.setup_authorization_code(env)
    port = common.free_port()
    issuer = f"http://127.0.0.1:{port}"
    program = [sys.executable, str(HERE / "serialized_serve.py")] if serialize_writes else None
    command = common.serve_command(SERVER_CPU, issuer, port, program or [common.MCPAUTH])
    log = workdir / "server.log"
    process = common.spawn(command, log, env=env)
    try:
        common.wait_ready(process, f"{issuer}/health", log)
        metadata = httpx2.get(f"{issuer}/.well-known/oauth-authorization-server").json()
        token_path = urlsplit(metadata["token_endpoint"]).path
        yield Server(issuer, process, client_id, token_path)
    except BaseException:
        tail = log.read_text(errors="replace").splitlines()[-40:]
        print("--- server log (tail) ---", *tail, sep="\n", file=sys.stderr)
        raise
    finally:
        common.stop(process)


async def mint_codes(srv: Server, cookies: httpx2.Cookies, count: int) -> list[str]:
    """Up to ``count`` codes, as many as MINT_BUDGET seconds of minting yield."""
    return await common.mint_codes(
        srv.issuer, srv.client_id, cookies, count, parallel=MINT_PARALLEL, budget=MINT_BUDGET
    )


def wrk(
    srv: Server,
    bodies: list[str],
    *,
    duration: float,
    connections: int,
    workdir: Path,
    harvest: bool = False,
) -> dict[str, Any]:
    """One wrk run over ``bodies`` (empty: GET /health). Returns wrk's numbers plus CPU use."""
    source, sink = workdir / "bodies.txt", workdir / "refresh-tokens.txt"
    source.write_text("".join(b + "\n" for b in bodies))
    sink.unlink(missing_ok=True)
    env = {
        **os.environ,
        "BENCH_INPUT": str(source),
        "BENCH_PATH": srv.token_path,
        "BENCH_OUTPUT": str(sink) if harvest else "",
    }
    command = common.wrk_command(
        str(LOAD_CPU), LUA, srv.issuer + srv.token_path, connections=connections, duration=duration
    )
    # token runs count only answered token requests; the peer run counts GET /health
    result = common.measure(command, env, srv.process.pid, counted="ok" if bodies else "requests")
    result["refresh_tokens"] = sink.read_text().split() if harvest and sink.exists() else []
    return result


def checked(result: dict[str, Any], what: str, *, expect_exhausted: bool = False) -> dict[str, Any]:
    if result["bad"] or result["socket_errors"]:
        raise SystemExit(f"{what}: {result['bad']} failed requests, first: {result['first_error']}")
    if result["exhausted"] and not expect_exhausted:
        raise SystemExit(f"{what}: ran out of pre-minted credentials")
    return result


def calibrate(
    srv: Server,
    supply: Callable[[int], list[str]],
    args: argparse.Namespace,
    workdir: Path,
    what: str,
) -> dict[str, Any]:
    """A 2 s run with a batch big enough not to run out: estimates the rate (and warms up)."""
    batch = 400
    while True:
        probe = wrk(
            srv,
            supply(batch),
            duration=2,
            connections=args.connections,
            workdir=workdir,
            harvest=True,
        )
        checked(probe, f"{what} calibration", expect_exhausted=True)
        if not probe["exhausted"]:
            probe["rate"] = probe["ok"] / probe["seconds"]
            return probe
        batch *= 2


async def exchange_codes(srv: Server, codes: list[str], parallel: int = 16) -> list[str]:
    """Redeem codes outside any measurement, for their refresh tokens."""
    bodies = common.code_bodies(srv.client_id, codes)
    tokens: list[str] = []

    async def worker(http: httpx2.AsyncClient) -> None:
        while bodies:
            body = bodies.pop()
            response = await http.post(
                srv.issuer + srv.token_path,
                content=body,
                headers={"Content-Type": "application/x-www-form-urlencoded"},
            )
            if response.status_code != 200:
                raise SystemExit(f"exchange: {response.status_code} {response.text[:300]}")
            tokens.append(response.json()["refresh_token"])

    async with httpx2.AsyncClient(timeout=30) as http:
        await asyncio.gather(*(worker(http) for _ in range(parallel)))
    return tokens


class RefreshTokens:
    """A pool of unused refresh tokens, topped up by minting and redeeming more codes."""

    def __init__(self, srv: Server, cookies: httpx2.Cookies, tokens: list[str]) -> None:
        self.srv, self.cookies, self.tokens = srv, cookies, tokens

    def take(self, count: int) -> list[str]:
        while len(self.tokens) < count:
            more = min(count - len(self.tokens), 500)  # small batches: codes live 60 s
            codes = asyncio.run(mint_codes(self.srv, self.cookies, more))
            self.tokens += asyncio.run(exchange_codes(self.srv, codes))
        taken, self.tokens = self.tokens[:count], self.tokens[count:]
        return taken


ATTEMPTS = 4


def exchange_round(
    srv: Server, cookies: httpx2.Cookies, args: argparse.Namespace, workdir: Path
) -> tuple[dict[str, Any], list[str]]:
    probe = calibrate(
        srv,
        lambda n: common.code_bodies(srv.client_id, asyncio.run(mint_codes(srv, cookies, n))),
        args,
        workdir,
        "exchange",
    )
    harvested = probe.pop("refresh_tokens")
    rate = probe["rate"]
    for _ in range(ATTEMPTS):
        need = int(rate * args.duration * 1.5) + 200
        started = time.monotonic()
        codes = asyncio.run(mint_codes(srv, cookies, need))
        minted_in = time.monotonic() - started
        # minting is slower than redeeming and codes live 60 s: when the budget did not cover
        # the whole batch, the run is shortened to what the batch covers
        duration = min(args.duration, int((len(codes) - 200) / (rate * 1.5)))
        if duration < 3 or minted_in + duration > CODE_TTL - 5:
            raise SystemExit(f"minted only {len(codes)} codes in {minted_in:.1f} s")
        result = wrk(
            srv,
            common.code_bodies(srv.client_id, codes),
            duration=duration,
            connections=args.connections,
            workdir=workdir,
            harvest=True,
        )
        harvested += result.pop("refresh_tokens")
        checked(result, "exchange", expect_exhausted=True)
        if not result["exhausted"]:
            result["minted"] = len(codes)
            result["mint_rate"] = len(codes) / minted_in
            return result, harvested
        # the calibration under-estimated the rate (a noisy machine): again, with more codes
        rate = max(rate, result["ok"] / result["seconds"]) * 2
    raise SystemExit(f"exchange: ran out of pre-minted codes {ATTEMPTS} times")


def refresh_round(
    srv: Server, pool: RefreshTokens, args: argparse.Namespace, workdir: Path
) -> dict[str, Any]:
    probe = calibrate(
        srv, lambda n: common.refresh_bodies(srv.client_id, pool.take(n)), args, workdir, "refresh"
    )
    rate = probe["rate"]
    for _ in range(ATTEMPTS):
        need = int(rate * args.duration * 1.5) + 200
        result = wrk(
            srv,
            common.refresh_bodies(srv.client_id, pool.take(need)),
            duration=args.duration,
            connections=args.connections,
            workdir=workdir,
        )
        result.pop("refresh_tokens")
        checked(result, "refresh", expect_exhausted=True)
        if not result["exhausted"]:
            result["refresh_tokens_used"] = need
            return result
        rate = max(rate, result["ok"] / result["seconds"]) * 2
    raise SystemExit(f"refresh: ran out of pre-minted refresh tokens {ATTEMPTS} times")


def health_round(srv: Server, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    result = checked(
        wrk(srv, [], duration=args.duration, connections=args.connections, workdir=workdir),
        "health",
        expect_exhausted=True,
    )
    result.pop("refresh_tokens")
    return result


def report(rows: dict[str, list[dict[str, Any]]], args: argparse.Namespace) -> str:
    fmt = common.median_range
    health = statistics.median(r["rps"] for r in rows["GET /health (peer)"])
    lines = [
        f"{'EXPERIMENT serialized writes; ' if args.serialize_writes else ''}"
        f"rounds: {args.rounds}, {args.duration} s each, wrk -t1 -c{args.connections}; "
        f"server on CPU {SERVER_CPU}, wrk on CPU {LOAD_CPU}; {platform.python_version()}, "
        f"{os.cpu_count()} CPUs; load average before/after: {args.load_before:.1f}/"
        f"{os.getloadavg()[0]:.1f}",
        "",
        "| workload | req/s | vs /health | p50 ms | p90 ms | p99 ms | p99.9 ms "
        "| wrk CPU | server CPU | server CPU ms/req | run s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, results in rows.items():
        ratio = statistics.median(r["rps"] for r in results) / health
        lines.append(
            f"| {name} | {fmt(results, 'rps')} | {ratio:.2f} | {fmt(results, 'p50_us', 1e-3, 1)} "
            f"| {fmt(results, 'p90_us', 1e-3, 1)} | {fmt(results, 'p99_us', 1e-3, 1)} "
            f"| {fmt(results, 'p999_us', 1e-3, 1)} | {fmt(results, 'load_cpu', 100)} % "
            f"| {fmt(results, 'server_cpu', 100)} % | {fmt(results, 'server_cpu_ms', 1, 2)} "
            f"| {fmt(results, 'seconds', 1, 1)} |"
        )
    minted = rows["authorization_code exchange"]
    lines += [
        "",
        f"codes minted per round: {fmt(minted, 'minted')} at {fmt(minted, 'mint_rate')} codes/s "
        "(two requests each, before the run); every exchange and refresh answered 200.",
        "Numbers are medians over the rounds, (min-max) in brackets.",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=int, default=10, help="seconds per measured run")
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--json", type=Path, help="also write the raw numbers here")
    parser.add_argument(
        "--serialize-writes",
        action="store_true",
        help="experiment: serve with write transactions under one in-process lock",
    )
    args = parser.parse_args()
    common.require_tools("wrk", "taskset")
    os.sched_setaffinity(0, {LOAD_CPU})
    args.load_before = os.getloadavg()[0]
    rows: dict[str, list[dict[str, Any]]] = {
        "authorization_code exchange": [],
        "refresh_token": [],
        "GET /health (peer)": [],
    }
    for _ in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="mcpauth-bench-") as tmp:
            workdir = Path(tmp)
            with server(workdir, serialize_writes=args.serialize_writes) as srv:
                cookies = common.sign_in(srv.issuer, srv.client_id)
                exchange, tokens = exchange_round(srv, cookies, args, workdir)
                rows["authorization_code exchange"].append(exchange)
                pool = RefreshTokens(srv, cookies, tokens)
                rows["refresh_token"].append(refresh_round(srv, pool, args, workdir))
                rows["GET /health (peer)"].append(health_round(srv, args, workdir))
    print(report(rows, args))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
