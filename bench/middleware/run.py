"""Middleware benchmark: requests/s and server CPU per request of an official-SDK
``tools/call`` unprotected and protected by mcpauth's ProtectedResourceMiddleware (a warm Bearer
token, a per-tool scope policy), in the same rounds; with ``--baseline PATH`` also the
middleware of an earlier checkout (the "before" of a change), and when FastMCP is installed the
SDK's auth with FastMCP's JWTVerifier; plus cold token verification against a bare signature
check.

    .venv/bin/python bench/middleware/run.py [--duration 3] [--epochs 5] [--rounds 4]
        [--connections 16]
        [--baseline PATH]

Servers run pinned to CPU 1 (one uvicorn worker each; a baseline server runs the same apps.py
with the baseline checkout first on PYTHONPATH), wrk (one thread) to CPU 0. In each of
``--epochs`` epochs every server is started and warmed, then each of ``--rounds`` rounds runs
wrk against each server in turn, the order rotating; server and wrk CPU time come from /proc
(bench/common.py ``measure``).
Every response must be a 200. Results go to RESULTS.md.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import platform
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx2
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, utils
from jwt.utils import base64url_decode

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, for bench/
from bench import common
from mcpauth import jwt
from mcpauth.middleware import JWTVerifier

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
APPS = HERE / "apps.py"
LUA = HERE / "tools_call.lua"
SERVER_CPU, LOAD_CPU = "1", "0"
KID = "bench-key"
BODY = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "tools/call",
    "params": {"name": "add", "arguments": {"a": 1, "b": 2}},
}
NOTES = """## Where the time goes

- Per warm request the middleware reads the request headers it needs and strips the token and
  the proof in one pass, takes the SHA-256 digest of the token and finds the caller it built
  when the token was first verified (the SDK's `AuthenticatedUser` included), and sets the
  caller in the scope and the context variables; nothing is logged and no metric is kept on
  this path. It reads the JSON-RPC body (once, replayed to the app) only when the policy names
  a scope the caller lacks: the body rows.
- The FastMCP peer, when installed, verifies the signature on every request (no verified-token
  cache).
"""

NAMES = {
    "plain": "SDK app, unprotected (the floor)",
    "mcpauth": "SDK app + ProtectedResourceMiddleware (warm Bearer, per-tool policy)",
    "mcpauth-body": "the same, a per-tool policy the token does not cover (the body read)",
    "baseline": "SDK app + ProtectedResourceMiddleware, baseline checkout (before)",
    "baseline-body": "the same, a policy the token does not cover, baseline checkout (before)",
    "fastmcp": "SDK app + SDK auth with FastMCP `JWTVerifier` (peer)",
    "plain-frozen": "SDK app, unprotected, `gc.freeze()` after start-up",
    "mcpauth-frozen": "SDK app + ProtectedResourceMiddleware(gc_freeze=True) (warm Bearer)",
}
# each row's role in apps.py, and whether it runs from the baseline checkout
ROLES = {
    "plain": ("plain", False),
    "mcpauth": ("mcpauth", False),
    "mcpauth-body": ("mcpauth-body", False),
    "baseline": ("mcpauth", True),
    "baseline-body": ("mcpauth-body", True),
    "fastmcp": ("fastmcp", False),
    "plain-frozen": ("plain-frozen", False),
    "mcpauth-frozen": ("mcpauth-frozen", False),
}
HEADERS = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-06-18"}


def listening_socket() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    sock.set_inheritable(True)
    return sock


def start(
    role: str, *args: str, src: Path | None = None
) -> tuple[subprocess.Popen[bytes], str, socket.socket]:
    """``apps.py role`` pinned to the server CPU on a listening socket of its own, importing
    mcpauth from the checkout ``src`` (a baseline), by default this one."""
    sock = listening_socket()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    command = ["taskset", "-c", SERVER_CPU, sys.executable, str(APPS), role]
    command += ["--fd", str(sock.fileno()), *[a.replace("{url}", url) for a in args]]
    # mcpauth from this checkout (or the baseline), never from wherever it is installed
    env = {**os.environ, "PYTHONPATH": str(src or ROOT)}
    proc = subprocess.Popen(command, pass_fds=(sock.fileno(),), env=env)
    return proc, url, sock


def stop(proc: subprocess.Popen[bytes], sock: socket.socket) -> None:
    common.stop(proc)
    sock.close()


def mint(key: jwt.PrivateKey, issuer: str, resource: str) -> str:
    now = int(time.time())
    claims = {
        "iss": issuer, "sub": "bench", "aud": resource, "client_id": "bench-client",
        "scope": "mcp:basic", "iat": now, "exp": now + 3600, "jti": secrets.token_hex(8),
    }  # fmt: skip
    return jwt.encode(claims, key, alg="ES256", kid=KID)


def wrk(url: str, token: str, pid: int, args: argparse.Namespace) -> dict[str, Any]:
    command = common.wrk_command(
        LOAD_CPU, LUA, url, connections=args.connections, duration=args.duration, timeout=None
    )
    result = common.measure(command, {"BENCH_TOKEN": token}, pid)
    if result["bad"] or result["socket_errors"]:
        raise SystemExit(f"{url}: an invalid run: {result}")
    return result


def warm(url: str, token: str) -> None:
    headers = {**HEADERS, "Authorization": f"Bearer {token}"} if token else HEADERS
    with httpx2.Client(timeout=30) as client:
        for _ in range(50):
            response = client.post(url, json=BODY, headers=headers)
            if response.status_code != 200:
                raise RuntimeError(f"{url} answered {response.status_code}: {response.text[:200]}")


def rows(args: argparse.Namespace) -> list[str]:
    found = ["plain", "mcpauth", "mcpauth-body"]
    if args.baseline is not None:
        found += ["baseline", "baseline-body"]
    if importlib.util.find_spec("fastmcp") is not None:
        found.append("fastmcp")
    if args.gc_freeze:
        found += ["plain-frozen", "mcpauth-frozen"]
    return found


def throughput(
    args: argparse.Namespace, key: jwt.PrivateKey, issuer: str
) -> dict[str, list[dict[str, Any]]]:
    """``args.epochs`` times: every row's server started and warmed, then ``args.rounds``
    rounds of one wrk run per row, the order rotating each round. Short runs in many rounds
    put the drift of the shared machine on every row alike; fresh processes each epoch
    average out what is particular to one process (its memory layout, its hash seed)."""
    keys = rows(args)
    results: dict[str, list[dict[str, Any]]] = {row: [] for row in keys}
    for epoch in range(args.epochs):
        servers: dict[str, tuple[subprocess.Popen[bytes], str, socket.socket, str]] = {}
        try:
            for row in keys:
                role, from_baseline = ROLES[row]
                src = args.baseline if from_baseline else None
                proc, base, sock = start(
                    role, "--issuer", issuer, "--resource", "{url}/mcp", src=src
                )
                url = f"{base}/mcp"
                servers[row] = (proc, url, sock, mint(key, issuer, url) if row != "plain" else "")
            for _, url, _, token in servers.values():
                warm(url, token)
            for round_ in range(args.rounds):
                shift = (epoch + round_) % len(keys)
                for row in keys[shift:] + keys[:shift]:
                    proc, url, _, token = servers[row]
                    results[row].append(wrk(url, token, proc.pid, args))
        finally:
            for proc, _, sock, _ in servers.values():
                stop(proc, sock)
    return results


def cold_verification(key: jwt.PrivateKey, issuer: str, n: int) -> dict[str, float]:
    """Median microseconds per first-seen token: mcpauth's JWTVerifier (keys already fetched,
    no result cache), FastMCP's JWTVerifier, and a bare cryptography ECDSA verify."""
    resource = "http://127.0.0.1/mcp"
    tokens = [mint(key, issuer, resource) for _ in range(n)]
    public = key.public_key()
    assert isinstance(public, ec.EllipticCurvePublicKey)

    def bare(token: str) -> None:
        head, payload, sig = token.split(".")
        raw = base64url_decode(sig)
        der = utils.encode_dss_signature(
            int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big")
        )
        public.verify(der, f"{head}.{payload}".encode(), ec.ECDSA(hashes.SHA256()))

    async def theirs_for() -> Any:
        from cryptography.hazmat.primitives import serialization
        from fastmcp.server.auth.providers.jwt import JWTVerifier as FastVerifier

        pem = public.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        return FastVerifier(
            public_key=pem.decode(), issuer=issuer, audience=resource, algorithm="ES256"
        )

    async def run() -> dict[str, float]:
        async with httpx2.AsyncClient() as http:
            ours = JWTVerifier(issuer, resource, http=http)
            await ours.verify_token(tokens[0])
            theirs = await theirs_for() if importlib.util.find_spec("fastmcp") else None
            timings: dict[str, list[float]] = {"mcpauth": [], "cryptography": []}
            if theirs is not None:
                timings["fastmcp"] = []
            for token in tokens:
                t0 = time.perf_counter()
                await ours.verify_token(token)
                t1 = time.perf_counter()
                bare(token)
                t2 = time.perf_counter()
                timings["mcpauth"].append(t1 - t0)
                timings["cryptography"].append(t2 - t1)
                if theirs is not None:
                    t3 = time.perf_counter()
                    if await theirs.verify_token(token) is None:
                        raise SystemExit("FastMCP refused a good token")
                    timings["fastmcp"].append(time.perf_counter() - t3)
        return {name: statistics.median(values) * 1e6 for name, values in timings.items()}

    return asyncio.run(run())


def report(
    args: argparse.Namespace,
    results: dict[str, list[dict[str, Any]]],
    cold: dict[str, float],
    loads: tuple[float, float],
) -> str:
    def med(row: str, field: str) -> float:
        return float(statistics.median(r[field] for r in results[row]))

    def paired(row: str, field: str) -> float:
        """The median over rounds of the unprotected app's ``field`` over the row's, each
        round against itself: what drifts from round to round cancels out."""
        pairs = zip(results["plain"], results[row], strict=True)
        if field == "rps":
            return float(statistics.median(r[field] / p[field] for p, r in pairs))
        return float(statistics.median(p[field] / r[field] for p, r in pairs))

    rps = {row: med(row, "rps") for row in results}
    cpu_us = {row: med(row, "server_cpu_ms") * 1000 for row in results}
    rate_ratio = {row: paired(row, "rps") for row in results}
    cpu_ratio_of = {row: paired(row, "server_cpu_ms") for row in results}
    ratio = rate_ratio["mcpauth"]
    cpu_ratio = cpu_ratio_of["mcpauth"]
    command = " ".join([".venv/bin/python", "bench/middleware/run.py", *sys.argv[1:]])
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    wrk_max = max(r["load_cpu"] for runs in results.values() for r in runs) * 100
    before = ""
    if "baseline" in results:
        before = (
            f"; before (baseline checkout): {rate_ratio['baseline']:.2f}x by rate, "
            f"{cpu_ratio_of['baseline']:.2f}x by CPU "
            f"(+{cpu_us['baseline'] - cpu_us['plain']:.0f} µs)"
        )
    frozen = ""
    if "mcpauth-frozen" in results:
        pairs = list(zip(results["plain-frozen"], results["mcpauth-frozen"], strict=True))
        by_rate = statistics.median(m["rps"] / p["rps"] for p, m in pairs)
        by_cpu = statistics.median(p["server_cpu_ms"] / m["server_cpu_ms"] for p, m in pairs)
        frozen = (
            f"; with the start-up heap frozen in both (`gc_freeze=True`, `gc.freeze()`) "
            f"{by_rate:.2f}x by rate, {by_cpu:.2f}x by CPU ({cpu_us['mcpauth-frozen']:.0f} vs "
            f"{cpu_us['plain-frozen']:.0f} µs; the freeze alone takes the unprotected app from "
            f"{cpu_us['plain']:.0f} to {cpu_us['plain-frozen']:.0f} µs)"
        )
    lines = [
        "# Middleware: a protected MCP `tools/call` against the same SDK app unprotected",
        "",
        f"**A warm Bearer `tools/call` through ProtectedResourceMiddleware: {rps['mcpauth']:.0f} "
        f"req/s, {ratio:.2f}x the unprotected SDK app ({rps['plain']:.0f} req/s) in the same "
        f"rounds; by server CPU per request {cpu_ratio:.2f}x ({cpu_us['mcpauth']:.0f} vs "
        f"{cpu_us['plain']:.0f} µs, {cpu_us['mcpauth'] - cpu_us['plain']:+.0f} µs)"
        f"{before}{frozen}; "
        "with a policy the token does not cover (the body read): "
        f"{rate_ratio['mcpauth-body']:.2f}x by rate, {cpu_ratio_of['mcpauth-body']:.2f}x by "
        "CPU.**",
        f"Command: `{command}` ({when}).",
        "Peer: the same official MCP SDK app unprotected, in the same rounds (the floor: one "
        "HTTP request through uvicorn and the SDK)"
        + (f"; the baseline is the same middleware from {args.baseline}" if args.baseline else "")
        + ("; FastMCP's `JWTVerifier` through the SDK's auth" if "fastmcp" in results else "")
        + ".",
        "Caveat: 2 shared cores; compare the rows of one run only.",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs shared with other work, Python "
        f"{platform.python_version()}; {common.load_note(*loads)}. "
        f"Server: one uvicorn worker pinned to CPU {SERVER_CPU}; load: `taskset -c {LOAD_CPU} "
        f"wrk -t1 -c{args.connections} -d{args.duration}s -s bench/middleware/tools_call.lua "
        "URL`, `BENCH_TOKEN` a minted ES256 token. Workload: a stateless JSON-response "
        "`tools/call` of a trivial tool on the official MCP SDK "
        "(`MCPServer.streamable_http_app(stateless_http=True, json_response=True)`), the policy "
        '`ScopePolicy(required="mcp:basic", tools={"add": "mcp:basic"})`, which the token '
        "(`mcp:basic`) covers, so no decision depends on the body; in the body rows "
        '`tools={"add": "mcp:basic", "reset": "mcp:admin"}`, which it does not cover, so '
        "the middleware reads and parses the JSON-RPC body of every call (the baseline reads "
        f"it in both). {args.epochs} epochs, each starting every server afresh and warming "
        f"it, then {args.rounds} rounds of one run per row in an order that rotates: "
        f"{args.epochs * args.rounds} runs per row; medians, with (min-max). Every response "
        "was a 200.",
        f"The load generator is not the bottleneck: wrk used at most {wrk_max:.0f}% of its core."
        + (
            " The server used less than 90% of its core in some rows: the rate was then "
            "bounded by scheduling on the shared machine; server CPU per request is the "
            "steadier measure."
            if any(med(row, "server_cpu") < 0.9 for row in results)
            else ""
        ),
        "",
        "## Per request",
        "",
        "| app | req/s | ratio to unprotected | server CPU µs/request | CPU ratio | server CPU % "
        "| wrk CPU % | p50 µs | p99 µs |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row, runs in results.items():
        lines.append(
            f"| {NAMES[row]} | {common.median_range(runs, 'rps')} | "
            f"{rate_ratio[row]:.3f} | {common.median_range(runs, 'server_cpu_ms', 1000)} | "
            f"{cpu_ratio_of[row]:.3f} | "
            f"{common.median_range(runs, 'server_cpu', 100)} | "
            f"{common.median_range(runs, 'load_cpu', 100)} | "
            f"{statistics.median(r['p50_us'] for r in runs):.0f} | "
            f"{statistics.median(r['p99_us'] for r in runs):.0f} |"
        )
    lines += [
        "",
        "Ratios are medians over the rounds of each round's own ratio (the row against the "
        "unprotected app run next to it), so drift between rounds cancels; the CPU ratio is "
        "the unprotected app's server CPU per request over the row's, the rate the row would "
        "reach on a core of its own.",
        "",
        "## Cold (first-seen) token verification, median microseconds",
        "",
        "| verifier | µs/token | ratio to bare signature |",
        "|---|---|---|",
    ]
    for name, value in cold.items():
        lines.append(f"| {name} | {value:.1f} | {value / cold['cryptography']:.2f} |")
    lines += [
        "",
        "`mcpauth` = `JWTVerifier.verify_token` with the JWKS already fetched (header checks, "
        "PyJWT decode + claim checks); `cryptography` = ECDSA P-256 verify of the same signing "
        "input only"
        + (
            "; `fastmcp` = FastMCP `JWTVerifier.verify_token` with a static public key"
            if "fastmcp" in cold
            else "; FastMCP is not installed here, so its row is left out"
        )
        + ". Warm requests in the throughput run pay no signature check: verified tokens are "
        "kept by SHA-256 digest until they expire.",
        "",
        NOTES,
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=5, help="fresh server processes")
    parser.add_argument("--rounds", type=int, default=4, help="rounds per epoch")
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--cold-tokens", type=int, default=2000)
    parser.add_argument("--baseline", type=Path, help="a checkout of an earlier commit")
    parser.add_argument(
        "--gc-freeze", action="store_true", help="also both apps with the start-up heap frozen"
    )
    args = parser.parse_args()
    common.require_tools("wrk", "taskset")
    load_before = os.getloadavg()[0]
    key = jwt.generate_private_key("ES256")
    with tempfile.TemporaryDirectory() as tmp:
        key_file = Path(tmp) / "key.pem"
        key_file.write_bytes(jwt.private_key_to_pem(key))
        proc, issuer, sock = start("as", "--issuer", "{url}", "--key-file", str(key_file))
        try:
            results = throughput(args, key, issuer)
            cold = cold_verification(key, issuer, args.cold_tokens)
        finally:
            stop(proc, sock)
    text = report(args, results, cold, (load_before, os.getloadavg()[0]))
    (HERE / "RESULTS.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
