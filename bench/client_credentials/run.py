"""client_credentials token issuance per second: `mcpauth serve` against node-oidc-provider.

    .venv/bin/python bench/client_credentials/run.py [--duration 10] [--connections 32]
        [--rounds 3] [--json FILE]

Both servers issue ES256-signed JWT access tokens for one resource with one scope to one
confidential client authenticating with client_secret_basic. mcpauth runs as one `mcpauth serve`
process on SQLite in a temporary directory; the peer is `provider.mjs` (npm `oidc-provider`,
installed with `npm install --prefix bench/client_credentials`) on Node 22 from `.node22`. Each
server is a single process pinned to CPU 1 (`taskset -c 1`); wrk (one thread, `cc.lua`) and this
script are pinned to CPU 0. Before measuring, each server must answer 200 with a JWT whose
signature checks against its JWKS and whose `aud` is the resource. The measured runs alternate
between the servers (the order flips every round) after one warm-up run each; every response
must be a 200 with an access token. Reported: medians over the rounds and the ratio
mcpauth/oidc-provider of the median req/s, with wrk's and each server's CPU use.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import platform
import re
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import jwt

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
LUA = HERE / "cc.lua"
PROVIDER = HERE / "provider.mjs"
MCPAUTH = str(Path(sys.executable).parent / "mcpauth")
NODE = ROOT / ".node22" / "node_modules" / ".bin" / "node"
SERVER_CPU = "1"
LOAD_CPU = 0
RESOURCE = "https://mcp.example.com/mcp"
SCOPE = "mcp:read"
MCPAUTH_NAME, PEER_NAME = "mcpauth", "oidc-provider"


@dataclass
class Server:
    name: str
    base: str
    token_url: str
    jwks_url: str
    process: subprocess.Popen[bytes]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cli(env: dict[str, str], *args: str) -> str:
    done = subprocess.run([MCPAUTH, *args], env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"mcpauth {' '.join(args)} failed: {done.stderr}")
    return done.stdout


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def wait_ready(process: subprocess.Popen[bytes], url: str, log: Path) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.TransportError:
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"{url} did not come up:\n{log.read_text()}") from None
            time.sleep(0.1)


@contextmanager
def mcpauth_server(workdir: Path, args: argparse.Namespace) -> Iterator[tuple[Server, str, str]]:
    """`mcpauth serve` with the resource and a client_credentials client; yields the credentials."""
    env = {
        **os.environ,
        **({"PYTHONPATH": str(args.src.resolve())} if args.src else {}),
        # one client from one address sends every request: the per-minute token rate limit
        # (where the server has one) is raised so it never answers 429, but still counts
        "MCPAUTH_RATE_LIMIT_TOKEN": str(args.rate_limit),
        "MCPAUTH_SECRET_KEY": "bench-secret-key-0123456789abcdef",
        "MCPAUTH_DATABASE_URL": f"sqlite:///{workdir / 'mcpauth.db'}",
        "HOME": str(workdir),
        "XDG_DATA_HOME": str(workdir / "data"),
    }
    cli(env, "resources", "add", RESOURCE, "--scope", SCOPE, "--default-scope", SCOPE, "--default")
    client = json.loads(
        cli(
            env,
            "clients",
            "add",
            "--name",
            "bench",
            "--grant-type",
            "client_credentials",
            "--scope",
            SCOPE,
        )
    )
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log_path = workdir / "mcpauth.log"
    command = ["taskset", "-c", SERVER_CPU, MCPAUTH, "serve", "--issuer", base]
    command += ["--port", str(port), "--log-level", "warning"]
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            command,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_ready(process, f"{base}/health", log_path)
        metadata = httpx.get(f"{base}/.well-known/oauth-authorization-server").json()
        server = Server(
            MCPAUTH_NAME, base, metadata["token_endpoint"], metadata["jwks_uri"], process
        )
        yield server, client["client_id"], client["client_secret"]
    finally:
        stop(process)


@contextmanager
def peer_server(workdir: Path, client_id: str, secret: str) -> Iterator[Server]:
    """provider.mjs with the same client credentials, resource and scope."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log_path = workdir / "oidc-provider.log"
    command = ["taskset", "-c", SERVER_CPU, str(NODE), str(PROVIDER), str(port)]
    command += [client_id, secret, RESOURCE, SCOPE]
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            command,
            cwd=HERE,
            env={**os.environ, "NODE_ENV": "production"},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_ready(process, f"{base}/.well-known/openid-configuration", log_path)
        metadata = httpx.get(f"{base}/.well-known/openid-configuration").json()
        yield Server(PEER_NAME, base, metadata["token_endpoint"], metadata["jwks_uri"], process)
    finally:
        stop(process)


def verify(server: Server, auth: str, body: str) -> dict[str, Any]:
    """One token request: 200, an ES256 JWT signed by a key in the server's JWKS, aud = resource."""
    response = httpx.post(
        server.token_url,
        content=body,
        headers={"Authorization": auth, "Content-Type": "application/x-www-form-urlencoded"},
    )
    if response.status_code != 200:
        raise SystemExit(f"{server.name}: {response.status_code} {response.text}")
    token = response.json()["access_token"]
    header = jwt.get_unverified_header(token)
    keys = jwt.PyJWKSet.from_dict(httpx.get(server.jwks_url).json())
    key = next((k for k in keys.keys if k.key_id == header.get("kid")), None)
    if key is None or header.get("alg") != "ES256":
        raise SystemExit(f"{server.name}: unexpected JWT header {header}")
    claims: dict[str, Any] = jwt.decode(
        token, key.key, algorithms=["ES256"], audience=RESOURCE, issuer=server.base
    )
    if claims.get("aud") not in (RESOURCE, [RESOURCE]) or SCOPE not in claims.get("scope", ""):
        raise SystemExit(f"{server.name}: unexpected claims {claims}")
    return {"header": header, "claims": claims, "bytes": len(response.content)}


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wrk(server: Server, auth: str, body: str, *, duration: int, connections: int) -> dict[str, Any]:
    """One wrk run against ``server``'s token endpoint; wrk's numbers plus CPU use."""
    command = ["taskset", "-c", str(LOAD_CPU), "wrk", "-t1", f"-c{connections}"]
    command += [f"-d{duration}s", "--timeout", "10s", "-s", str(LUA), server.token_url]
    env = {**os.environ, "BENCH_AUTH": auth, "BENCH_BODY": body}
    before_children = resource.getrusage(resource.RUSAGE_CHILDREN)
    before_server = cpu_seconds(server.process.pid)
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    server_cpu = cpu_seconds(server.process.pid) - before_server
    after_children = resource.getrusage(resource.RUSAGE_CHILDREN)
    match = re.search(r"^BENCH (\{.*\})$", done.stdout, re.MULTILINE)
    if done.returncode != 0 or match is None:
        raise SystemExit(f"wrk failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    result: dict[str, Any] = json.loads(match.group(1))
    if result["bad"] or result["socket_errors"]:
        raise SystemExit(
            f"{server.name}: {result['bad']} non-2xx, {result['socket_errors']} socket errors; "
            f"first: {result['first_error']}"
        )
    seconds = result["duration_us"] / 1e6
    load_cpu = (after_children.ru_utime - before_children.ru_utime) + (
        after_children.ru_stime - before_children.ru_stime
    )
    result.update(
        seconds=seconds,
        rps=result["ok"] / seconds,
        non_2xx=result["bad"],
        load_cpu=load_cpu / seconds,
        server_cpu=server_cpu / seconds,
        server_cpu_ms=server_cpu * 1000 / max(1, result["ok"]),
    )
    return result


def fmt(results: list[dict[str, Any]], key: str, scale: float = 1.0, digits: int = 0) -> str:
    values = [r[key] * scale for r in results]
    median = statistics.median(values)
    spread = f" ({min(values):.{digits}f}-{max(values):.{digits}f})" if len(values) > 1 else ""
    return f"{median:.{digits}f}{spread}"


def report(rows: dict[str, list[dict[str, Any]]], args: argparse.Namespace) -> str:
    lines = [
        f"rounds: {args.rounds} x {args.duration} s per server, alternating; wrk -t1 "
        f"-c{args.connections} on CPU {LOAD_CPU}; each server one process on CPU {SERVER_CPU}; "
        f"Python {platform.python_version()}, {os.cpu_count()} CPUs; mcpauth from "
        f"{args.src or ROOT}, MCPAUTH_RATE_LIMIT_TOKEN={args.rate_limit}; load average "
        f"before/after: {args.load_before:.1f}/{os.getloadavg()[0]:.1f}",
        "",
        "| server | req/s | p50 ms | p90 ms | p99 ms | non-2xx | wrk CPU | server CPU "
        "| server CPU ms/token |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, results in rows.items():
        lines.append(
            f"| {name} | {fmt(results, 'rps')} | {fmt(results, 'p50_us', 1e-3, 1)} "
            f"| {fmt(results, 'p90_us', 1e-3, 1)} | {fmt(results, 'p99_us', 1e-3, 1)} "
            f"| {sum(r['non_2xx'] for r in results)} | {fmt(results, 'load_cpu', 100)} % "
            f"| {fmt(results, 'server_cpu', 100)} % | {fmt(results, 'server_cpu_ms', 1, 3)} |"
        )
    ours = statistics.median(r["rps"] for r in rows[MCPAUTH_NAME])
    theirs = statistics.median(r["rps"] for r in rows[PEER_NAME])
    wrk_max = max(r["load_cpu"] for results in rows.values() for r in results)
    lines += [
        "",
        f"ratio mcpauth / oidc-provider (median req/s): {ours / theirs:.2f}x",
        f"per-round req/s: mcpauth {[round(r['rps']) for r in rows[MCPAUTH_NAME]]}, "
        f"oidc-provider {[round(r['rps']) for r in rows[PEER_NAME]]}",
        f"load generator: at most {wrk_max * 100:.0f} % of its CPU "
        + ("(not the bottleneck)" if wrk_max < 0.7 else "(may be the bottleneck)"),
        "Numbers are medians over the rounds, (min-max) in brackets.",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=int, default=10, help="seconds per measured run")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=3, help="seconds of warm-up per server")
    parser.add_argument("--json", type=Path, help="also write the raw numbers here")
    parser.add_argument(
        "--rate-limit",
        type=int,
        default=10**9,
        help="MCPAUTH_RATE_LIMIT_TOKEN for the run (0: no rate limiting)",
    )
    parser.add_argument(
        "--src", type=Path, help="import mcpauth from this checkout (PYTHONPATH) instead"
    )
    args = parser.parse_args()
    for tool in ("wrk", "taskset"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is required (apt-get install -y wrk util-linux)")
    if not NODE.exists():
        raise SystemExit(f"{NODE} is missing: npm install --prefix .node22 node@22")
    if not (HERE / "node_modules" / "oidc-provider").exists():
        raise SystemExit("oidc-provider is missing: npm install --prefix bench/client_credentials")
    os.sched_setaffinity(0, {LOAD_CPU})
    args.load_before = os.getloadavg()[0]
    body = urlencode({"grant_type": "client_credentials", "resource": RESOURCE, "scope": SCOPE})
    rows: dict[str, list[dict[str, Any]]] = {MCPAUTH_NAME: [], PEER_NAME: []}
    with tempfile.TemporaryDirectory(prefix="mcpauth-bench-cc-") as tmp:
        workdir = Path(tmp)
        with mcpauth_server(workdir, args) as (ours, client_id, secret):
            auth = "Basic " + base64.b64encode(f"{client_id}:{secret}".encode()).decode()
            with peer_server(workdir, client_id, secret) as peer:
                servers = [ours, peer]
                for server in servers:
                    checked = verify(server, auth, body)
                    print(
                        f"{server.name}: 200, {checked['bytes']} bytes, {checked['header']}, "
                        f"claims {sorted(checked['claims'])}, aud {checked['claims']['aud']}"
                    )
                for server in servers:
                    wrk(server, auth, body, duration=args.warmup, connections=args.connections)
                for round_ in range(args.rounds):
                    for server in servers if round_ % 2 == 0 else servers[::-1]:
                        result = wrk(
                            server, auth, body, duration=args.duration, connections=args.connections
                        )
                        rows[server.name].append(result)
                        print(
                            f"round {round_ + 1} {server.name}: {result['rps']:.0f} req/s, "
                            f"p99 {result['p99_us'] / 1000:.1f} ms, wrk CPU "
                            f"{result['load_cpu'] * 100:.0f} %, server CPU "
                            f"{result['server_cpu'] * 100:.0f} %",
                            flush=True,
                        )
    print()
    print(report(rows, args))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
