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
import base64
import hashlib
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urljoin, urlsplit

import httpx

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.oauth import forms  # noqa: E402
from tests.pg import PostgresServer, _migrate_template, start_server  # noqa: E402

HERE = Path(__file__).resolve().parent
LUA = HERE / "token.lua"
MCPAUTH = str(Path(sys.executable).parent / "mcpauth")
SERVER_CPU, LOAD_CPU = "0", "1"
RESOURCE = "https://mcp.example.com/mcp"
REDIRECT_URI = "http://127.0.0.1/callback"
USER, PASSWORD = "bench", "bench-password-123"
SECRET = "bench-secret-key-0123456789abcdef"
VERIFIER = "bench-verifier-" + "v" * 43
CHALLENGE = (
    base64.urlsafe_b64encode(hashlib.sha256(VERIFIER.encode()).digest()).rstrip(b"=").decode()
)


@dataclass
class Cluster:
    issuer: str
    ports: list[int]
    pids: list[int]
    client_id: str
    token_path: str
    cookies: httpx.Cookies


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cli(env: dict[str, str], *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        [MCPAUTH, *args], env=env, input=stdin, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"mcpauth {' '.join(args)} failed: {done.stderr}")
    return done.stdout


def wait_health(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.TransportError:
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(log.read_text()) from None
            time.sleep(0.1)


@contextmanager
def cluster(workdir: Path, database: str, replicas: int) -> Iterator[Cluster]:
    env = {
        **os.environ,
        "MCPAUTH_SECRET_KEY": SECRET,
        "MCPAUTH_DATABASE_URL": database,
        "HOME": str(workdir),
        "XDG_DATA_HOME": str(workdir / "data"),
        # every request comes from 127.0.0.1: limits high enough never to bite, still counted
        "MCPAUTH_RATE_LIMIT_TOKEN": str(10**9),
        "MCPAUTH_RATE_LIMIT_AUTHORIZE": str(10**9),
        # codes are minted before the run, more slowly than they are redeemed
        "MCPAUTH_AUTHORIZATION_CODE_TTL": "600",
    }
    cli(env, "users", "add", USER, "--password-stdin", stdin=PASSWORD + "\n")
    cli(env, "resources", "add", RESOURCE, "--scope", "mcp:read", "--default-scope", "mcp:read")
    client = json.loads(
        cli(
            env,
            "clients",
            "add",
            "--name",
            "bench",
            "--redirect-uri",
            REDIRECT_URI,
            "--grant-type",
            "authorization_code",
            "--grant-type",
            "refresh_token",
            "--auth-method",
            "none",
            "--first-party",
        )
    )
    ports = [free_port() for _ in range(replicas)]
    issuer = f"http://127.0.0.1:{ports[0]}"
    with ExitStack() as stack:
        processes = []
        for port in ports:
            log = workdir / f"server-{port}.log"
            handle = stack.enter_context(open(log, "wb"))
            process = subprocess.Popen(
                [
                    "taskset",
                    "-c",
                    SERVER_CPU,
                    MCPAUTH,
                    "serve",
                    "--issuer",
                    issuer,
                    "--port",
                    str(port),
                    "--log-level",
                    "warning",
                ],
                env=env,
                stdout=handle,
                stderr=subprocess.STDOUT,
            )
            stack.callback(stop, process)
            processes.append(process)
            wait_health(f"http://127.0.0.1:{port}/health", process, log)
        metadata = httpx.get(f"{issuer}/.well-known/oauth-authorization-server").json()
        yield Cluster(
            issuer,
            ports,
            [p.pid for p in processes],
            client["client_id"],
            urlsplit(metadata["token_endpoint"]).path,
            sign_in(issuer, client["client_id"]),
        )


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def authorize_url(issuer: str, client_id: str) -> str:
    params = {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": REDIRECT_URI,
        "code_challenge": CHALLENGE,
        "code_challenge_method": "S256",
        "state": "bench",
        "resource": RESOURCE,
    }
    return f"{issuer}/authorize?{urlencode(params)}"


def code_from(response: httpx.Response) -> str:
    location = response.headers.get("location", "")
    if response.status_code != 303 or not location.startswith(REDIRECT_URI):
        raise SystemExit(f"expected a redirect with a code, got {response.status_code}: {location}")
    return parse_qs(urlsplit(location).query)["code"][0]


def sign_in(issuer: str, client_id: str) -> httpx.Cookies:
    with httpx.Client(timeout=30) as http:
        page = http.get(authorize_url(issuer, client_id))
        page = http.get(urljoin(issuer, page.headers["location"]))
        form = forms(page.text)[0]
        login = {**form.fields, "username": USER, "password": PASSWORD}
        done = http.post(urljoin(str(page.request.url), form.action), data=login)
        code_from(http.get(urljoin(issuer, done.headers["location"])))
        return http.cookies


async def mint_codes(c: Cluster, count: int, parallel: int = 8) -> list[str]:
    codes: list[str] = []
    url = authorize_url(c.issuer, c.client_id)

    async def worker(http: httpx.AsyncClient) -> None:
        while len(codes) < count:
            started = await http.get(url)
            codes.append(code_from(await http.get(urljoin(c.issuer, started.headers["location"]))))

    async with httpx.AsyncClient(cookies=c.cookies, timeout=30) as http:
        await asyncio.gather(*(worker(http) for _ in range(parallel)))
    return codes


def code_bodies(c: Cluster, codes: list[str]) -> list[str]:
    return [
        urlencode(
            {
                "grant_type": "authorization_code",
                "code": code,
                "redirect_uri": REDIRECT_URI,
                "code_verifier": VERIFIER,
                "client_id": c.client_id,
                "resource": RESOURCE,
            }
        )
        for code in codes
    ]


def refresh_bodies(c: Cluster, tokens: list[str]) -> list[str]:
    return [
        urlencode({"grant_type": "refresh_token", "refresh_token": t, "client_id": c.client_id})
        for t in tokens
    ]


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
        command = [
            "taskset", "-c", LOAD_CPU, "wrk", "-t1", f"-c{max(1, connections // len(c.ports))}",
            f"-d{duration}s", "--timeout", "10s", "-s", str(LUA),
            f"http://127.0.0.1:{port}{c.token_path if bodies else '/health'}",
        ]  # fmt: skip
        runs.append((subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True), sink))
    total: dict[str, Any] = {"ok": 0, "requests": 0, "bad": 0, "exhausted": 0, "tokens": []}
    p50, p99, seconds = [], [], []
    for process, sink in runs:
        out, _ = process.communicate(timeout=duration + 60)
        match = re.search(r"^BENCH (\{.*\})$", out, re.MULTILINE)
        if process.returncode != 0 or match is None:
            raise SystemExit(f"wrk failed: {out}")
        result = json.loads(match.group(1))
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
        return code_bodies(c, asyncio.run(mint_codes(c, n)))

    def refreshes(n: int) -> list[str]:
        nonlocal tokens
        while len(tokens) < n:
            more = asyncio.run(mint_codes(c, min(n - len(tokens), 3000)))
            got = wrk(c, code_bodies(c, more), duration=60, connections=16, workdir=workdir)
            tokens += got["tokens"]
        taken, tokens = tokens[:n], tokens[n:]
        return refresh_bodies(c, taken)

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
    values = [r[kind][key] for r in rounds]
    spread = f" ({min(values):.0f}-{max(values):.0f})" if len(values) > 1 else ""
    return f"{statistics.median(values):.0f}{spread}"


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
