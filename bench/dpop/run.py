"""DPoP benchmark: what checking a DPoP proof on every request costs mcpauth's middleware, in
requests per second and in server CPU time per request, against the same middleware with a
Bearer token and against the MCP SDK's own bearer auth, in the same rounds; around a trivial
ASGI app (so the protection is what is measured) and around the official SDK's ``tools/call``
(so the share of a real request is seen). Also the cost of making a proof (the client) and of
checking one (the server), and the middleware's own time for a Bearer and a DPoP request, in
process.

    .venv/bin/python bench/dpop/run.py [--duration 3] [--rounds 3] [--connections 16]

Each server is one uvicorn worker pinned to CPU 1 (bench/dpop/apps.py, and bench/middleware/
apps.py for ``tools/call``); wrk (one thread, bench/dpop/dpop.lua) is pinned to CPU 0. A DPoP row
sends each request with a proof of its own, made beforehand for that URL and token (proofs are
single use: the runner makes more than the same round's Bearer row could send). Server and wrk
CPU time come from /proc (bench/common.py ``measure``). Every response must be a 200. Results
go to RESULTS.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
from cryptography.hazmat.primitives.asymmetric import ec

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, for bench/
from bench import common
from bench.middleware import run as middleware
from mcpauth import jwt
from mcpauth.dpop import check_proof, make_proof

HERE = Path(__file__).parent
APPS = HERE / "apps.py"
TOOLS_APPS = HERE.parent / "middleware" / "apps.py"
LUA = HERE / "dpop.lua"
SERVER_CPU, LOAD_CPU = "1", "0"
BODY = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "tools/call",
    "params": {"name": "add", "arguments": {"a": 1, "b": 2}},
}
HEADERS = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-06-18"}


@dataclass(frozen=True)
class Row:
    key: str
    name: str
    apps: Path
    role: str
    scheme: str  # "", "Bearer" or "DPoP"
    bearer_row: str = ""  # for a DPoP row: the Bearer row whose rate sizes the proofs


ROWS = (
    Row("bare", "trivial app, unprotected", APPS, "bare", ""),
    Row("bearer", "trivial app + mcpauth middleware, Bearer (peer)", APPS, "mcpauth", "Bearer"),
    Row(
        "dpop",
        "trivial app + mcpauth middleware, DPoP-bound token + proof per request",
        APPS,
        "mcpauth",
        "DPoP",
        "bearer",
    ),
    Row("sdk", "trivial app + the MCP SDK's own bearer auth (peer)", APPS, "sdk", "Bearer"),
    Row("tools-bare", "SDK tools/call, unprotected", TOOLS_APPS, "plain", ""),
    Row("tools-bearer", "SDK tools/call + mcpauth middleware, Bearer", TOOLS_APPS, "mcpauth",
        "Bearer"),
    Row(
        "tools-dpop",
        "SDK tools/call + mcpauth middleware, DPoP-bound + proof per request",
        TOOLS_APPS,
        "mcpauth",
        "DPoP",
        "tools-bearer",
    ),
)  # fmt: skip


def start(apps: Path, role: str, *args: str) -> tuple[subprocess.Popen[bytes], str, Any]:
    """``apps.py role`` pinned to the server CPU on a listening socket of its own."""
    sock = middleware.listening_socket()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    command = ["taskset", "-c", SERVER_CPU, sys.executable, str(apps), role]
    command += ["--fd", str(sock.fileno()), *[a.replace("{url}", url) for a in args]]
    return subprocess.Popen(command, pass_fds=(sock.fileno(),)), url, sock


def mint(key: jwt.PrivateKey, issuer: str, resource: str, jkt: str | None) -> str:
    now = int(time.time())
    claims: dict[str, Any] = {
        "iss": issuer, "sub": "bench", "aud": resource, "client_id": "bench-client",
        "scope": "mcp:basic", "iat": now, "exp": now + 3600, "jti": secrets.token_hex(8),
    }  # fmt: skip
    if jkt is not None:
        claims["cnf"] = {"jkt": jkt}
    return jwt.encode(claims, key, alg="ES256", kid=middleware.KID)


def proof(client_key: ec.EllipticCurvePrivateKey, url: str, token: str) -> str:
    return make_proof(client_key, alg="ES256", method="POST", url=url, access_token=token)


def warm(url: str, row: Row, token: str, client_key: ec.EllipticCurvePrivateKey) -> None:
    """Fifty requests that must all be 200 (the JWKS fetched, the token cached)."""
    with httpx2.Client(timeout=30) as client:
        for _ in range(50):
            headers = dict(HEADERS)
            if row.scheme:
                headers["Authorization"] = f"{row.scheme} {token}"
            if row.scheme == "DPoP":
                headers["DPoP"] = proof(client_key, url, token)
            response = client.post(url, json=BODY, headers=headers)
            if response.status_code != 200:
                raise SystemExit(
                    f"{row.key}: {url} answered {response.status_code}: {response.text}"
                )


def run_row(
    row: Row,
    url: str,
    pid: int,
    token: str,
    proofs: Path | None,
    args: argparse.Namespace,
) -> dict[str, Any]:
    command = common.wrk_command(
        LOAD_CPU, LUA, url, connections=args.connections, duration=args.duration
    )
    env = {"BENCH_SCHEME": row.scheme, "BENCH_TOKEN": token, "BENCH_PROOFS": str(proofs or "")}
    result = common.measure(command, env, pid)
    if result["bad"] or result["exhausted"] or result["socket_errors"]:
        raise SystemExit(f"{row.key}: an invalid run: {result}")
    return result


def throughput(
    args: argparse.Namespace, key: jwt.PrivateKey, issuer: str, workdir: Path
) -> dict[str, list[dict[str, Any]]]:
    client_key = ec.generate_private_key(ec.SECP256R1())
    jkt = jwt.thumbprint(jwt.public_jwk(client_key.public_key(), kid="", alg="ES256"))
    results: dict[str, list[dict[str, Any]]] = {row.key: [] for row in ROWS}
    for _ in range(args.rounds):
        for row in ROWS:
            proc, base, sock = start(
                row.apps, row.role, "--issuer", issuer, "--resource", "{url}/mcp"
            )
            url = f"{base}/mcp"
            try:
                token = mint(key, issuer, url, jkt if row.scheme == "DPoP" else None)
                warm(url, row, token, client_key)
                proofs = None
                if row.scheme == "DPoP":
                    # more than the Bearer row of this round sent: a DPoP row is never faster
                    rate = results[row.bearer_row][-1]["rps"]
                    proofs = workdir / "proofs.txt"
                    count = int(rate * args.duration * 1.3) + 2000
                    proofs.write_text(
                        "".join(proof(client_key, url, token) + "\n" for _ in range(count))
                    )
                results[row.key].append(run_row(row, url, proc.pid, token, proofs, args))
            finally:
                middleware.stop(proc, sock)
    return results


def proof_costs(n: int) -> dict[str, float]:
    """Median microseconds to make a proof (client) and to check one (server, without the
    replay record), ES256."""
    key = ec.generate_private_key(ec.SECP256R1())
    url, token = "https://mcp.example.com/mcp", "t" * 600
    made, checked = [], []
    for _ in range(n):
        t0 = time.perf_counter()
        made_proof = make_proof(key, alg="ES256", method="POST", url=url, access_token=token)
        t1 = time.perf_counter()
        check_proof([made_proof], method="POST", url=url, access_token=token)
        t2 = time.perf_counter()
        made.append(t1 - t0)
        checked.append(t2 - t1)
    return {
        "make": statistics.median(made) * 1e6,
        "check": statistics.median(checked) * 1e6,
        "proof_bytes": len("DPoP: \r\n") + len(made_proof),
    }


async def _middleware_times(n: int) -> dict[str, float]:
    from mcpauth.middleware import ProtectedResourceMiddleware, ScopePolicy, VerifiedToken

    resource = "https://mcp.example.com/mcp"
    client_key = ec.generate_private_key(ec.SECP256R1())
    jkt = jwt.thumbprint(jwt.public_jwk(client_key.public_key(), kid="", alg="ES256"))
    token = "t" * 600

    class Verifier:
        def __init__(self, bound: bool) -> None:
            self.claims = {"cnf": {"jkt": jkt}} if bound else {}

        async def verify_token(self, raw: str) -> VerifiedToken:
            return VerifiedToken(
                subject="bench", client_id="bench", scopes=("mcp:basic",), expires_at=None,
                issuer="https://as.example.com", resource=resource, claims=self.claims,
            )  # fmt: skip

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"{}", "more_body": False}

    statuses: list[int] = []

    async def send(message: Any) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    times: dict[str, float] = {}
    for scheme in ("Bearer", "DPoP"):
        protected = ProtectedResourceMiddleware(
            app,
            resource=resource,
            authorization_servers=["https://as.example.com"],
            verifier=Verifier(scheme == "DPoP"),
            policy=ScopePolicy(required="mcp:basic"),
        )
        proofs = [proof(client_key, resource, token) for _ in range(n)] if scheme == "DPoP" else []
        spent = []
        for i in range(n):
            headers = [(b"authorization", f"{scheme} {token}".encode())]
            if proofs:
                headers.append((b"dpop", proofs[i].encode()))
            scope = {"type": "http", "method": "POST", "path": "/mcp", "raw_path": b"/mcp",
                     "headers": headers, "query_string": b""}  # fmt: skip
            t0 = time.perf_counter()
            await protected(scope, receive, send)
            spent.append(time.perf_counter() - t0)
        times[scheme] = statistics.median(spent) * 1e6
    if set(statuses) != {200}:
        raise SystemExit(f"the in-process middleware answered {sorted(set(statuses))}")
    return times


def middleware_times(n: int) -> dict[str, float]:
    """Median microseconds the middleware itself spends on one request (a cached token, a
    trivial app), Bearer and DPoP with a proof of its own: no HTTP server."""
    return asyncio.run(_middleware_times(n))


def report(
    args: argparse.Namespace,
    results: dict[str, list[dict[str, Any]]],
    costs: dict[str, float],
    times: dict[str, float],
) -> str:
    def med(key: str, field: str) -> float:
        return float(statistics.median(r[field] for r in results[key]))

    rps = {row.key: med(row.key, "rps") for row in ROWS}
    cpu_us = {row.key: med(row.key, "server_cpu_ms") * 1000 for row in ROWS}
    added = cpu_us["dpop"] - cpu_us["bearer"]
    command = " ".join([".venv/bin/python", "bench/dpop/run.py", *sys.argv[1:]])
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    wrk_max = max(r["load_cpu"] for runs in results.values() for r in runs) * 100
    unsaturated = [row.name for row in ROWS if med(row.key, "server_cpu") < 0.9]
    lines = [
        "# DPoP at the protected resource: a bound token with a proof per request vs Bearer",
        "",
        f"**A DPoP-bound token with a fresh proof per request costs {cpu_us['dpop']:.0f} µs of "
        f"server CPU per request through mcpauth's middleware, {added:.0f} µs more than a Bearer "
        f"token through the same middleware ({cpu_us['bearer']:.0f} µs): "
        f"{rps['dpop']:.0f} vs {rps['bearer']:.0f} req/s ({rps['dpop'] / rps['bearer']:.2f}x) "
        f"around a trivial ASGI app; the MCP SDK's own bearer auth there: {rps['sdk']:.0f} req/s, "
        f"{cpu_us['sdk']:.0f} µs. Around an SDK tools/call: {rps['tools-dpop']:.0f} vs "
        f"{rps['tools-bearer']:.0f} req/s ({rps['tools-dpop'] / rps['tools-bearer']:.2f}x).**",
        f"Command: `{command}` ({when}).",
        "Peer: the same middleware with a Bearer token, and the MCP SDK's own bearer auth "
        "(BearerAuthBackend + RequireAuthMiddleware, verifying with mcpauth's JWTVerifier through "
        "ForSDK), around the same app in the same rounds; the app unprotected as the floor.",
        "Caveat: 2 shared cores; compare the rows of one run only.",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs shared with other work, Python "
        f"{platform.python_version()}. Servers: bench/dpop/apps.py (a trivial ASGI app: reads "
        "the request, answers a fixed JSON-RPC result) and bench/middleware/apps.py (the official "
        f"SDK's stateless tools/call), one uvicorn worker pinned to CPU {SERVER_CPU}; load: "
        f"`taskset -c {LOAD_CPU} wrk -t1 -c{args.connections} -d{args.duration}s` with "
        "bench/dpop/dpop.lua, a proof of its own per DPoP request (made beforehand for that URL "
        f"and token). Rounds: {args.rounds}, rows interleaved; medians, with (min-max). Every "
        "response was a 200.",
        f"The load generator is not the bottleneck: wrk used at most {wrk_max:.0f}% of its core. "
        + (
            "Where the server used less than 90% of its own ("
            + "; ".join(unsaturated)
            + "), the rate was bounded by scheduling on the shared machine, not by either "
            "process: compare server CPU per request there."
            if unsaturated
            else "The server used 90% or more of its core in every row."
        ),
        "",
        "## Per request",
        "",
        "| app | req/s | ratio to Bearer | server CPU µs/request | server CPU % | wrk CPU % | "
        "p50 µs | p99 µs |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in ROWS:
        runs = results[row.key]
        base = "bearer" if row.apps == APPS else "tools-bearer"
        lines.append(
            f"| {row.name} | {common.median_range(runs, 'rps')} | {rps[row.key] / rps[base]:.2f} | "
            f"{common.median_range(runs, 'server_cpu_ms', 1000)} | "
            f"{common.median_range(runs, 'server_cpu', 100)} | "
            f"{common.median_range(runs, 'load_cpu', 100)} | "
            f"{statistics.median(r['p50_us'] for r in runs):.0f} | "
            f"{statistics.median(r['p99_us'] for r in runs):.0f} |"
        )
    lines += [
        "",
        "## Proofs in process (ES256, median µs)",
        "",
        f"| make a proof (client) | {costs['make']:.1f} |",
        "|---|---|",
        "| check a proof (server: parse, key, signature, htm, htu, iat, ath) | "
        f"{costs['check']:.1f} |",
        "| the middleware on a Bearer request (cached token, no HTTP server) | "
        f"{times['Bearer']:.1f} |",
        "| the middleware on a DPoP request (the same, plus the proof and its replay record) | "
        f"{times['DPoP']:.1f} |",
        "",
        "The middleware caches a verified token (no signature check on a warm Bearer request); a "
        "proof is new on every request, so its signature is always checked and its `jti` goes "
        "into the bounded in-memory replay record. Of the "
        f"{added:.0f} µs of server CPU a DPoP request adds, {times['DPoP'] - times['Bearer']:.0f} "
        "µs are the middleware's own (in process, above); the rest is spent outside it (the "
        f"HTTP server reads the proof's {costs['proof_bytes']:.0f} bytes more per request). The "
        "SDK's bearer auth "
        "verifies the token's signature on every request (it keeps no verified tokens).",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--proofs", type=int, default=2000, help="proofs timed in process")
    args = parser.parse_args()
    common.require_tools("wrk", "taskset")
    key = jwt.generate_private_key("ES256")
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        key_file = workdir / "key.pem"
        key_file.write_bytes(jwt.private_key_to_pem(key))
        proc, issuer, sock = start(APPS, "as", "--issuer", "{url}", "--key-file", str(key_file))
        try:
            results = throughput(args, key, issuer, workdir)
        finally:
            middleware.stop(proc, sock)
    text = report(args, results, proof_costs(args.proofs), middleware_times(args.proofs))
    (HERE / "RESULTS.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
