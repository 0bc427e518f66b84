"""Load-then-transact against suspend-and-replay: the token endpoint's throughput and the
stalling-fetch defences of two trees of mcpauth, measured side by side in one run.

    .venv/bin/python bench/threads/run.py [--base-ref main] [--base PATH] [--head PATH]
                                          [--duration 3] [--racers 50] [--rounds 1]

``--base`` defaults to a temporary `git worktree` of ``--base-ref``; ``--head`` to this tree.
Each tree's server runs the same serve script (uvicorn with ``create_app``, the tree first on
PYTHONPATH) on a fresh SQLite file, pinned to CPU 0; wrk (one thread, ../token/token.lua) and
this script run on CPU 1. Per tree, in turn within each round:

- authorization_code exchange and refresh_token (a first-party public client, codes minted just
  before through `/authorize` with a signed-in session, each code and refresh token used once);
- client_credentials with ``private_key_jwt`` (an inline JWKS; a fresh ES256 assertion per
  request, its ``jti`` recorded in the database);
- ``/health/ready`` and a private_key_jwt client_credentials token timed while ``--racers``
  requests (half /authorize, half /token) wait for a client metadata document from a TLS host
  that accepts, reads the request and never answers (the fetch deadline is 3 s).

Every token request must be answered 200 and every readiness probe 200.
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
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx2
import jwt
from cryptography.hazmat.primitives.asymmetric import ec

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the repository root, for bench/ and tests/
from bench import common  # noqa: E402
from tests.e2e.test_cimd_https import make_certificates  # noqa: E402
from tests.e2e.test_cimd_stall import StallingServer  # noqa: E402

LUA = ROOT / "bench" / "token" / "token.lua"
SERVER_CPU, LOAD_CPU = "0", 1
CONNECTIONS = 16
STALL_SECONDS = 3.0
PROBES = 5
ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
SERVE = """
import json, ssl, sys
import uvicorn
from mcpauth.server import Settings, create_app

settings = Settings(**json.loads(open(sys.argv[1]).read()))
context = ssl.create_default_context(cafile=sys.argv[2])
app = create_app(settings, outbound_ssl_context=context)
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[3]), log_level="warning")
"""


@dataclass
class Server:
    name: str
    issuer: str
    token_url: str
    process: subprocess.Popen[bytes]
    public_id: str
    bot_id: str
    bot_key: ec.EllipticCurvePrivateKey


def _bot(env: dict[str, str], workdir: Path) -> tuple[str, ec.EllipticCurvePrivateKey]:
    """A client_credentials client authenticating with private_key_jwt (inline JWKS)."""
    key = ec.generate_private_key(ec.SECP256R1())
    public = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(key.public_key()))
    jwks = workdir / "bot-jwks.json"
    jwks.write_text(json.dumps({"keys": [{**public, "kid": "bot", "alg": "ES256"}]}))
    command = ["clients", "add", "--name", "bot", "--grant-type", "client_credentials"]
    command += ["--auth-method", "private_key_jwt", "--jwks-file", str(jwks)]
    command += ["--scope", common.SCOPE]
    return str(json.loads(common.mcpauth_cli(env, *command))["client_id"]), key


@contextmanager
def server(name: str, tree: Path, workdir: Path, ca_file: Path) -> Iterator[Server]:
    port = common.free_port()
    issuer = f"http://127.0.0.1:{port}"
    database = f"sqlite:///{workdir / 'mcpauth.db'}"
    env = {**common.mcpauth_env(workdir, database), "PYTHONPATH": str(tree)}
    public_id = common.setup_authorization_code(env)
    bot_id, bot_key = _bot(env, workdir)
    values = {
        "issuer": issuer,
        "database_url": database,
        "secret_key": common.SECRET_KEY,
        "cimd_allow_hosts": ["127.0.0.1"],
        "cimd_timeout": STALL_SECONDS,
        "rate_limit_token": 10**9,
        "rate_limit_authorize": 10**9,
        "log_level": "warning",
    }
    (workdir / "settings.json").write_text(json.dumps(values))
    (workdir / "serve.py").write_text(SERVE)
    command = ["taskset", "-c", SERVER_CPU, sys.executable, str(workdir / "serve.py")]
    command += [str(workdir / "settings.json"), str(ca_file), str(port)]
    log = workdir / "server.log"
    process = common.spawn(command, log, env=env, cwd=workdir)
    try:
        common.wait_ready(process, f"{issuer}/health", log)
        token_url = httpx2.get(f"{issuer}/.well-known/oauth-authorization-server").json()[
            "token_endpoint"
        ]
        yield Server(name, issuer, token_url, process, public_id, bot_id, bot_key)
    except BaseException:
        print(*log.read_text(errors="replace").splitlines()[-40:], sep="\n", file=sys.stderr)
        raise
    finally:
        common.stop(process)


def assertion_bodies(srv: Server, count: int) -> list[str]:
    now = int(time.time())
    bodies = []
    for _ in range(count):
        claims = {"iss": srv.bot_id, "sub": srv.bot_id, "aud": srv.token_url}
        claims |= {"iat": now, "exp": now + 240, "jti": uuid.uuid4().hex}
        assertion = jwt.encode(claims, srv.bot_key, algorithm="ES256", headers={"kid": "bot"})
        form = {"grant_type": "client_credentials", "client_assertion_type": ASSERTION_TYPE}
        form |= {"client_assertion": assertion, "resource": common.RESOURCE}
        bodies.append(urlencode(form))
    return bodies


def wrk(srv: Server, bodies: list[str], workdir: Path, duration: float) -> dict[str, Any]:
    source, sink = workdir / "bodies.txt", workdir / "refresh-tokens.txt"
    source.write_text("".join(b + "\n" for b in bodies))
    sink.unlink(missing_ok=True)
    path = "/" + srv.token_url.split("/", 3)[3]
    env = {**os.environ, "BENCH_INPUT": str(source), "BENCH_PATH": path}
    env["BENCH_OUTPUT"] = str(sink)
    command = common.wrk_command(
        str(LOAD_CPU), LUA, srv.token_url, connections=CONNECTIONS, duration=duration
    )
    result = common.measure(command, env, srv.process.pid)
    if result["bad"] or result["socket_errors"]:
        raise SystemExit(f"{srv.name}: {result['bad']} failed, first: {result['first_error']}")
    result["refresh_tokens"] = sink.read_text().split() if sink.exists() else []
    return result


async def _timed(request: Any) -> float:
    started = time.monotonic()
    response: httpx2.Response = await request
    if response.status_code != 200:
        raise SystemExit(f"{response.request.url}: {response.status_code} {response.text[:200]}")
    return (time.monotonic() - started) * 1000


async def stalled(srv: Server, stalling: StallingServer, racers: int) -> dict[str, Any]:
    """Readiness and a private_key_jwt token timed while ``racers`` requests wait for one
    stalling metadata document."""
    url = stalling.url(f"/clients/{srv.name}.json")
    limits = httpx2.Limits(max_connections=racers + 10, max_keepalive_connections=racers + 10)
    bodies = assertion_bodies(srv, PROBES)
    async with httpx2.AsyncClient(timeout=30, limits=limits) as http:
        params = {"response_type": "code", "client_id": url, "redirect_uri": common.REDIRECT_URI}
        params |= {"code_challenge": common.CHALLENGE, "code_challenge_method": "S256"}
        form = {"grant_type": "authorization_code", "code": "x", "client_id": url}
        waiting = [
            asyncio.ensure_future(
                http.get(f"{srv.issuer}/authorize", params=params)
                if n % 2
                else http.post(srv.token_url, data=form)
            )
            for n in range(racers)
        ]
        await asyncio.to_thread(stalling.wait_for_requests, len(stalling.requests) + 1)
        ready, token = [], []
        for body in bodies:
            ready.append(await _timed(http.get(f"{srv.issuer}/health/ready")))
            headers = {"Content-Type": "application/x-www-form-urlencoded"}
            token.append(await _timed(http.post(srv.token_url, content=body, headers=headers)))
        still = sum(not w.done() for w in waiting)
        answers = await asyncio.gather(*waiting)
    refused = sum(a.status_code in (400, 401) for a in answers)
    return {"ready_ms": ready, "token_ms": token, "still_waiting": still, "refused": refused}


def measure_tree(
    name: str, tree: Path, args: argparse.Namespace, stalling: StallingServer, ca: Path
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix=f"mcpauth-threads-{name}-") as tmp:
        workdir = Path(tmp)
        with server(name, tree, workdir, ca) as srv:
            cookies = common.sign_in(srv.issuer, srv.public_id)
            codes = asyncio.run(
                common.mint_codes(
                    srv.issuer, srv.public_id, cookies, args.codes, parallel=4, budget=40
                )
            )
            exchange = wrk(srv, common.code_bodies(srv.public_id, codes), workdir, args.duration)
            tokens = exchange.pop("refresh_tokens")
            refresh = wrk(srv, common.refresh_bodies(srv.public_id, tokens), workdir, args.duration)
            refresh.pop("refresh_tokens")
            bodies = assertion_bodies(srv, args.assertions)
            machine = wrk(srv, bodies, workdir, args.duration)
            machine.pop("refresh_tokens")
            stall = asyncio.run(stalled(srv, stalling, args.racers))
    return {
        "authorization_code exchange": exchange,
        "refresh_token": refresh,
        "client_credentials, private_key_jwt": machine,
        "stall": stall,
    }


def report(rows: dict[str, list[dict[str, Any]]], args: argparse.Namespace) -> str:
    fmt = common.median_range
    lines = [
        f"rounds: {args.rounds}, {args.duration} s per workload, wrk -t1 -c{CONNECTIONS}; server "
        f"on CPU {SERVER_CPU}, wrk on CPU {LOAD_CPU}; {platform.python_version()}, "
        f"{os.cpu_count()} CPUs; load average before/after: {args.load_before:.1f}/"
        f"{os.getloadavg()[0]:.1f}",
        f"base: {args.base_label}; head: {args.head_label}",
        "",
        "| tree | workload | req/s | p50 ms | p99 ms | server CPU ms/req | exhausted |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in ("base", "head"):
        for workload in ("authorization_code exchange", "refresh_token"):
            lines.append(_row(name, workload, [r[workload] for r in rows[name]]))
        workload = "client_credentials, private_key_jwt"
        lines.append(_row(name, workload, [r[workload] for r in rows[name]]))
    lines += [
        "",
        f"With {args.racers} requests waiting for a stalling client metadata document "
        f"({PROBES} sequential probes per round, ms):",
        "",
        "| tree | /health/ready p50 | max | private_key_jwt token p50 | max | still waiting "
        "| racers refused |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in ("base", "head"):
        stalls = [r["stall"] for r in rows[name]]
        ready = [v for s in stalls for v in s["ready_ms"]]
        token = [v for s in stalls for v in s["token_ms"]]
        lines.append(
            f"| {name} | {statistics.median(ready):.1f} | {max(ready):.1f} "
            f"| {statistics.median(token):.1f} | {max(token):.1f} "
            f"| {fmt(stalls, 'still_waiting')} | {fmt(stalls, 'refused')} |"
        )
    del fmt
    return "\n".join(lines)


def _row(name: str, workload: str, results: list[dict[str, Any]]) -> str:
    fmt = common.median_range
    return (
        f"| {name} | {workload} | {fmt(results, 'rps')} | {fmt(results, 'p50_us', 1e-3, 1)} "
        f"| {fmt(results, 'p99_us', 1e-3, 1)} | {fmt(results, 'server_cpu_ms', 1, 2)} "
        f"| {sum(r['exhausted'] for r in results)} |"
    )


@contextmanager
def base_tree(args: argparse.Namespace) -> Iterator[Path]:
    if args.base is not None:
        yield args.base
        return
    with tempfile.TemporaryDirectory(prefix="mcpauth-base-") as tmp:
        tree = Path(tmp) / "tree"
        git = ["git", "-C", str(ROOT)]
        subprocess.run([*git, "worktree", "add", "--detach", str(tree), args.base_ref], check=True)
        try:
            yield tree
        finally:
            subprocess.run([*git, "worktree", "remove", "--force", str(tree)], check=False)


def _label(tree: Path) -> str:
    done = subprocess.run(
        ["git", "-C", str(tree), "log", "-1", "--format=%h %s"], capture_output=True, text=True
    )
    return done.stdout.strip()[:72]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-ref", default="main")
    parser.add_argument("--base", type=Path, help="a tree to measure as the base instead")
    parser.add_argument("--head", type=Path, default=ROOT)
    parser.add_argument("--duration", type=int, default=3, help="seconds per workload")
    parser.add_argument("--codes", type=int, default=1500, help="codes minted per tree and round")
    parser.add_argument("--assertions", type=int, default=4000)
    parser.add_argument("--racers", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--json", type=Path, help="also write the raw numbers here")
    args = parser.parse_args()
    common.require_tools("wrk", "taskset")
    os.sched_setaffinity(0, {LOAD_CPU})
    args.load_before = os.getloadavg()[0]
    rows: dict[str, list[dict[str, Any]]] = {"base": [], "head": []}
    with tempfile.TemporaryDirectory(prefix="mcpauth-threads-tls-") as tls, base_tree(args) as base:
        args.base_label, args.head_label = _label(base), _label(args.head)
        ca, leaf, key = make_certificates(Path(tls))
        stalling = StallingServer(leaf, key)
        try:
            for _ in range(args.rounds):
                for name, tree in (("base", base), ("head", args.head)):
                    rows[name].append(measure_tree(name, tree, args, stalling, ca))
        finally:
            stalling.close()
    print(report(rows, args))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
