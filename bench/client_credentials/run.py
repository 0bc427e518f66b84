"""client_credentials token issuance per second: `mcpauth serve` against node-oidc-provider.

    .venv/bin/python bench/client_credentials/run.py [--duration 10] [--connections 32]
        [--rounds 5] [--json FILE]

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
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx2
import jwt

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, for bench/
from bench import common
from bench.common import RESOURCE, SCOPE

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
LUA = HERE / "cc.lua"
PROVIDER = HERE / "provider.mjs"
NODE = ROOT / ".node22" / "node_modules" / ".bin" / "node"
SERVER_CPU = "1"
LOAD_CPU = 0
MCPAUTH_NAME, PEER_NAME, BASELINE_NAME = "mcpauth", "oidc-provider", "mcpauth (baseline)"


def basic(client_id: str, secret: str) -> str:
    return "Basic " + base64.b64encode(f"{client_id}:{secret}".encode()).decode()


@dataclass
class Server:
    name: str
    base: str
    token_url: str
    jwks_url: str
    process: subprocess.Popen[bytes]


@contextmanager
def mcpauth_server(
    workdir: Path,
    args: argparse.Namespace,
    *,
    src: Path | None = None,
    name: str = MCPAUTH_NAME,
) -> Iterator[tuple[Server, str, str]]:
    """`mcpauth serve` (imported from ``src``, by default this checkout) with the resource and a
    client_credentials client; yields the server and the client's credentials."""
    workdir = workdir / name.replace(" ", "-").strip("()")
    workdir.mkdir(exist_ok=True)
    env = common.mcpauth_env(
        workdir,
        f"sqlite:///{workdir / 'mcpauth.db'}",
        PYTHONPATH=str((src or ROOT).resolve()),
        # one client from one address sends every request: the per-minute token rate limit
        # (where the server has one) is raised so it never answers 429, but still counts
        MCPAUTH_RATE_LIMIT_TOKEN=str(args.rate_limit),
    )
    client_id, secret = common.setup_client_credentials(env)
    port = common.free_port()
    base = f"http://127.0.0.1:{port}"
    log_path = workdir / "mcpauth.log"
    process = common.spawn(common.serve_command(SERVER_CPU, base, port), log_path, env=env)
    try:
        common.wait_ready(process, f"{base}/health", log_path)
        metadata = httpx2.get(f"{base}/.well-known/oauth-authorization-server").json()
        server = Server(name, base, metadata["token_endpoint"], metadata["jwks_uri"], process)
        yield server, client_id, secret
    finally:
        common.stop(process)


@contextmanager
def peer_server(workdir: Path, client_id: str, secret: str) -> Iterator[Server]:
    """provider.mjs with the same client credentials, resource and scope."""
    port = common.free_port()
    base = f"http://127.0.0.1:{port}"
    log_path = workdir / "oidc-provider.log"
    command = ["taskset", "-c", SERVER_CPU, str(NODE), str(PROVIDER), str(port)]
    command += [client_id, secret, RESOURCE, SCOPE]
    env = {**os.environ, "NODE_ENV": "production"}
    process = common.spawn(command, log_path, env=env, cwd=HERE)
    try:
        common.wait_ready(process, f"{base}/.well-known/openid-configuration", log_path)
        metadata = httpx2.get(f"{base}/.well-known/openid-configuration").json()
        yield Server(PEER_NAME, base, metadata["token_endpoint"], metadata["jwks_uri"], process)
    finally:
        common.stop(process)


def verify(server: Server, auth: str, body: str) -> dict[str, Any]:
    """One token request: 200, an ES256 JWT signed by a key in the server's JWKS, aud = resource."""
    response = httpx2.post(
        server.token_url,
        content=body,
        headers={"Authorization": auth, "Content-Type": "application/x-www-form-urlencoded"},
    )
    if response.status_code != 200:
        raise SystemExit(f"{server.name}: {response.status_code} {response.text}")
    token = response.json()["access_token"]
    header = jwt.get_unverified_header(token)
    keys = jwt.PyJWKSet.from_dict(httpx2.get(server.jwks_url).json())
    key = next((k for k in keys.keys if k.key_id == header.get("kid")), None)
    if key is None or header.get("alg") != "ES256":
        raise SystemExit(f"{server.name}: unexpected JWT header {header}")
    claims: dict[str, Any] = jwt.decode(
        token, key.key, algorithms=["ES256"], audience=RESOURCE, issuer=server.base
    )
    if claims.get("aud") not in (RESOURCE, [RESOURCE]) or SCOPE not in claims.get("scope", ""):
        raise SystemExit(f"{server.name}: unexpected claims {claims}")
    return {"header": header, "claims": claims, "bytes": len(response.content)}


def wrk(server: Server, auth: str, body: str, *, duration: int, connections: int) -> dict[str, Any]:
    """One wrk run against ``server``'s token endpoint; wrk's numbers plus CPU use."""
    command = common.wrk_command(
        str(LOAD_CPU), LUA, server.token_url, connections=connections, duration=duration
    )
    env = {**os.environ, "BENCH_AUTH": auth, "BENCH_BODY": body}
    result = common.measure(command, env, server.process.pid)
    if result["bad"] or result["socket_errors"]:
        raise SystemExit(
            f"{server.name}: {result['bad']} non-2xx, {result['socket_errors']} socket errors; "
            f"first: {result['first_error']}"
        )
    result["non_2xx"] = result["bad"]
    return result


def report(rows: dict[str, list[dict[str, Any]]], args: argparse.Namespace) -> str:
    fmt = common.median_range
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
    our_cpu = statistics.median(r["server_cpu_ms"] for r in rows[MCPAUTH_NAME])
    their_cpu = statistics.median(r["server_cpu_ms"] for r in rows[PEER_NAME])
    paired = [a["rps"] / b["rps"] for a, b in zip(rows[MCPAUTH_NAME], rows[PEER_NAME], strict=True)]
    lines += [
        "",
        f"ratio mcpauth / oidc-provider (median req/s): {ours / theirs:.2f}x",
        f"per-round ratios (each round measures both back to back): "
        f"{[round(x, 2) for x in paired]}, median {statistics.median(paired):.2f}x",
        f"CPU time per token, oidc-provider / mcpauth (medians): {their_cpu / our_cpu:.2f}x",
        *(
            [
                f"ratio mcpauth / baseline {args.baseline} (median req/s): "
                f"{ours / statistics.median(r['rps'] for r in rows[BASELINE_NAME]):.2f}x"
            ]
            if BASELINE_NAME in rows
            else []
        ),
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
    parser.add_argument("--rounds", type=int, default=5)
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
    parser.add_argument(
        "--baseline",
        type=Path,
        help="also measure mcpauth imported from this checkout (an earlier commit), in the "
        "same rounds, as the 'before' of a change",
    )
    args = parser.parse_args()
    common.require_tools("wrk", "taskset")
    if not NODE.exists():
        raise SystemExit(f"{NODE} is missing: npm install --prefix .node22 node@22")
    if not (HERE / "node_modules" / "oidc-provider").exists():
        raise SystemExit("oidc-provider is missing: npm install --prefix bench/client_credentials")
    os.sched_setaffinity(0, {LOAD_CPU})
    args.load_before = os.getloadavg()[0]
    body = urlencode({"grant_type": "client_credentials", "resource": RESOURCE, "scope": SCOPE})
    rows: dict[str, list[dict[str, Any]]] = {MCPAUTH_NAME: [], PEER_NAME: []}
    if args.baseline:
        rows[BASELINE_NAME] = []
    with tempfile.TemporaryDirectory(prefix="mcpauth-bench-cc-") as tmp, ExitStack() as stack:
        workdir = Path(tmp)
        ours, client_id, secret = stack.enter_context(mcpauth_server(workdir, args, src=args.src))
        auth = {ours.name: basic(client_id, secret)}
        peer = stack.enter_context(peer_server(workdir, client_id, secret))
        auth[peer.name] = auth[ours.name]
        servers = [ours, peer]
        if args.baseline:
            baseline, base_id, base_secret = stack.enter_context(
                mcpauth_server(workdir, args, src=args.baseline, name=BASELINE_NAME)
            )
            auth[baseline.name] = basic(base_id, base_secret)
            servers.append(baseline)
        for server in servers:
            checked = verify(server, auth[server.name], body)
            print(
                f"{server.name}: 200, {checked['bytes']} bytes, {checked['header']}, "
                f"claims {sorted(checked['claims'])}, aud {checked['claims']['aud']}"
            )
        for server in servers:
            wrk(server, auth[server.name], body, duration=args.warmup, connections=args.connections)
        for round_ in range(args.rounds):
            for server in servers if round_ % 2 == 0 else servers[::-1]:
                result = wrk(
                    server,
                    auth[server.name],
                    body,
                    duration=args.duration,
                    connections=args.connections,
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
