"""DPoP benchmark: what checking a DPoP proof on every request costs mcpauth's middleware, in
requests per second and in server CPU time per request, against the same middleware with a
Bearer token and against the MCP SDK's own bearer auth, in the same rounds; around a trivial
ASGI app (so the protection is what is measured) and around the official SDK's ``tools/call``
(so the share of a real request is seen). Also the cost of making a proof (the client) and of
checking one (the server), and the middleware's own time for a Bearer and a DPoP request, in
process.

    .venv/bin/python bench/dpop/run.py [--duration 2] [--epochs 4] [--rounds 3]
        [--connections 16] [--baseline PATH]

Each server is one uvicorn worker pinned to CPU 1 (bench/dpop/apps.py, and bench/middleware/
apps.py for ``tools/call``); wrk (one thread, bench/dpop/dpop.lua) is pinned to CPU 0. A DPoP row
sends each request with a proof of its own, made beforehand for that URL and token (proofs are
single use: the runner makes more than the same round's Bearer row could send). Server and wrk
CPU time come from /proc (bench/common.py ``measure``). Every response must be a 200. In each
of ``--epochs`` epochs every server is started and warmed, then each of ``--rounds`` rounds
runs wrk against each in turn, the order rotating (a DPoP row after its Bearer row). With
``--baseline PATH`` (a checkout of an earlier commit) every mcpauth row runs again with mcpauth
imported from that checkout (the same apps) in the same rounds, and the in-process figures
(bench/dpop/inprocess.py) are taken for both checkouts: the before and after of a change.
Results go to RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx2
from cryptography.hazmat.primitives.asymmetric import ec

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, for bench/
from bench import common
from bench.middleware import run as middleware
from mcpauth import jwt
from mcpauth.dpop import make_proof

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
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
    # the Bearer row the row is compared with (by default the app's), and whose rate sizes the
    # proofs of a DPoP row
    bearer_row: str = ""
    baseline: bool = False  # run from the baseline checkout


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
    Row(
        "verify",
        "trivial app + mcpauth middleware, Bearer + one bare ES256 verification per request",
        APPS,
        "mcpauth-verify",
        "Bearer",
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
    Row(
        "tools-verify",
        "SDK tools/call + mcpauth middleware, Bearer + one bare ES256 verification per request",
        APPS,
        "tools-verify",
        "Bearer",
        "tools-bearer",
    ),
)  # fmt: skip


def all_rows(baseline: Path | None) -> tuple[Row, ...]:
    """ROWS, and with a baseline checkout every mcpauth row again, run from it."""
    if baseline is None:
        return ROWS
    again = [
        replace(
            row,
            key=f"{row.key}-base",
            name=f"{row.name} (baseline)",
            bearer_row=f"{row.bearer_row}-base" if row.bearer_row else "",
            baseline=True,
        )
        for row in ROWS
        if row.role == "mcpauth"
    ]
    return (*ROWS, *again)


def start(
    apps: Path, role: str, *args: str, src: Path = ROOT
) -> tuple[subprocess.Popen[bytes], str, Any]:
    """``apps.py role`` with mcpauth imported from the checkout ``src`` (this one, or a
    baseline), pinned to the server CPU, on a listening socket of its own."""
    sock = middleware.listening_socket()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    command = ["taskset", "-c", SERVER_CPU, sys.executable, str(apps), role]
    command += ["--fd", str(sock.fileno()), *[a.replace("{url}", url) for a in args]]
    env = {**os.environ, "PYTHONPATH": str(src)}
    return subprocess.Popen(command, pass_fds=(sock.fileno(),), env=env), url, sock


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
    """``args.epochs`` times: every row's server started and warmed, then ``args.rounds``
    rounds of one wrk run per row, the order rotating each round (the Bearer rows first: a DPoP
    row's proofs are counted from its Bearer row's rate). Fresh processes each epoch average
    out what is particular to one process."""
    client_key = ec.generate_private_key(ec.SECP256R1())
    jkt = jwt.thumbprint(jwt.public_jwk(client_key.public_key(), kid="", alg="ES256"))
    rows = all_rows(args.baseline)
    results: dict[str, list[dict[str, Any]]] = {row.key: [] for row in rows}
    for epoch in range(args.epochs):
        servers: dict[str, tuple[subprocess.Popen[bytes], str, Any, str]] = {}
        try:
            for row in rows:
                src = args.baseline if row.baseline else ROOT
                proc, base, sock = start(
                    row.apps, row.role, "--issuer", issuer, "--resource", "{url}/mcp", src=src
                )
                url = f"{base}/mcp"
                token = mint(key, issuer, url, jkt if row.scheme == "DPoP" else None)
                servers[row.key] = (proc, url, sock, token)
            for row in rows:
                _, url, _, token = servers[row.key]
                warm(url, row, token, client_key)
            for round_ in range(args.rounds):
                shift = (epoch + round_) % len(rows)
                for row in sorted(rows[shift:] + rows[:shift], key=lambda r: bool(r.bearer_row)):
                    proc, url, _, token = servers[row.key]
                    proofs = None
                    if row.scheme == "DPoP":
                        # more than the Bearer row of this round sent: DPoP is never faster
                        rate = results[row.bearer_row][-1]["rps"]
                        proofs = workdir / "proofs.txt"
                        count = int(rate * args.duration * 1.3) + 2000
                        proofs.write_text(
                            "".join(proof(client_key, url, token) + "\n" for _ in range(count))
                        )
                    results[row.key].append(run_row(row, url, proc.pid, token, proofs, args))
        finally:
            for proc, _, sock, _ in servers.values():
                middleware.stop(proc, sock)
    return results


def in_process(src: Path, n: int) -> dict[str, float]:
    """bench/dpop/inprocess.py's figures for the mcpauth of the checkout ``src``."""
    done = subprocess.run(
        [sys.executable, str(HERE / "inprocess.py"), str(n)],
        env={**os.environ, "PYTHONPATH": str(src)},
        capture_output=True,
        text=True,
        check=True,
    )
    figures: dict[str, float] = json.loads(done.stdout)
    return figures


def report(
    args: argparse.Namespace,
    results: dict[str, list[dict[str, Any]]],
    figures: dict[str, dict[str, float]],
    loads: tuple[float, float],
) -> str:
    rows = all_rows(args.baseline)

    def med(key: str, field: str) -> float:
        return float(statistics.median(r[field] for r in results[key]))

    def bearer_of(row: Row) -> str:
        if row.bearer_row:
            return row.bearer_row
        return ("bearer" if row.apps == APPS else "tools-bearer") + (
            "-base" if row.baseline else ""
        )

    def ratio(key: str, bearer: str) -> float:
        """The median over rounds of the row's rate over its Bearer row's in the same round."""
        pairs = zip(results[key], results[bearer], strict=True)
        return float(statistics.median(r["rps"] / b["rps"] for r, b in pairs))

    def added_us(key: str, bearer: str) -> float:
        """The median over rounds of the server CPU per request above the Bearer row's."""
        pairs = zip(results[key], results[bearer], strict=True)
        return float(
            statistics.median((r["server_cpu_ms"] - b["server_cpu_ms"]) * 1000 for r, b in pairs)
        )

    rps = {row.key: med(row.key, "rps") for row in rows}
    ours = figures["after"]
    floor = ours["es256_verify"] + ours["replay_insert"]
    tools = ratio("tools-dpop", "tools-bearer")
    added = added_us("tools-dpop", "tools-bearer")
    before = ""
    if args.baseline is not None:
        old = figures["before"]
        before = (
            f" Before (baseline checkout): {ratio('tools-dpop-base', 'tools-bearer-base'):.2f}x, "
            f"+{added_us('tools-dpop-base', 'tools-bearer-base'):.0f} µs, a proof check "
            f"{old['check']:.0f} µs."
        )
    command = " ".join([".venv/bin/python", "bench/dpop/run.py", *sys.argv[1:]])
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    wrk_max = max(r["load_cpu"] for runs in results.values() for r in runs) * 100
    unsaturated = [row.name for row in rows if med(row.key, "server_cpu") < 0.9]
    lines = [
        "# DPoP at the protected resource: a bound token with a proof per request vs Bearer",
        "",
        f"**An SDK `tools/call` with a DPoP-bound token and a fresh proof per request: "
        f"{rps['tools-dpop']:.0f} req/s = {tools:.2f}x the same middleware with Bearer "
        f"({rps['tools-bearer']:.0f} req/s), +{added:.0f} µs of server CPU per request; a proof "
        f"check costs {ours['check']:.0f} µs = {ours['check'] / floor:.2f}x one ES256 "
        f"verification plus a replay-record insert ({ours['es256_verify']:.0f} + "
        f"{ours['replay_insert']:.0f} µs).{before} One bare ES256 verification per request, "
        f"without a proof, adds +{added_us('tools-verify', 'tools-bearer'):.0f} µs of server "
        "CPU to the same Bearer request: 0.90x of Bearer allows about "
        f"+{med('tools-bearer', 'server_cpu_ms') * 1000 / 9:.0f} µs.**",
        f"Command: `{command}` ({when}).",
        "Peer: the same middleware with a Bearer token, and the MCP SDK's own bearer auth "
        "(BearerAuthBackend + RequireAuthMiddleware, verifying with mcpauth's JWTVerifier through "
        "ForSDK), around the same app in the same rounds; the app unprotected as the floor"
        + (f"; the baseline rows run {args.baseline}" if args.baseline is not None else "")
        + ".",
        "Caveat: 2 shared cores; compare the rows of one run only.",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs shared with other work, Python "
        f"{platform.python_version()}; {common.load_note(*loads)}. "
        "Servers: bench/dpop/apps.py (a trivial ASGI app: reads the request, answers a fixed "
        "JSON-RPC result) and bench/middleware/apps.py (the official SDK's stateless "
        f"tools/call), one uvicorn worker pinned to CPU {SERVER_CPU}; load: "
        f"`taskset -c {LOAD_CPU} wrk -t1 -c{args.connections} -d{args.duration}s` with "
        "bench/dpop/dpop.lua, a proof of its own per DPoP request (made beforehand for that URL "
        f"and token). {args.epochs} epochs, each starting every server afresh and warming it, "
        f"then {args.rounds} rounds of one run per row in an order that rotates: "
        f"{args.epochs * args.rounds} runs per row; medians, with (min-max). Every response "
        "was a 200.",
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
        "| app | req/s | ratio to Bearer | server CPU µs/request | above Bearer, µs | "
        "server CPU % | wrk CPU % | p50 µs | p99 µs |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        runs = results[row.key]
        lines.append(
            f"| {row.name} | {common.median_range(runs, 'rps')} | "
            f"{ratio(row.key, bearer_of(row)):.2f} | "
            f"{common.median_range(runs, 'server_cpu_ms', 1000)} | "
            f"{added_us(row.key, bearer_of(row)):+.0f} | "
            f"{common.median_range(runs, 'server_cpu', 100)} | "
            f"{common.median_range(runs, 'load_cpu', 100)} | "
            f"{statistics.median(r['p50_us'] for r in runs):.0f} | "
            f"{statistics.median(r['p99_us'] for r in runs):.0f} |"
        )
    lines += [
        "",
        "Ratios and the CPU above Bearer are medians over the rounds of each round's own "
        "figure (the row against its Bearer row run in the same round), so drift between "
        "rounds cancels.",
    ]
    checkouts = [("after", "this checkout")]
    if args.baseline is not None:
        checkouts.append(("before", "baseline"))
    lines += [
        "",
        "## Proofs in process (ES256, median µs)",
        "",
        "| | " + " | ".join(name for _, name in checkouts) + " |",
        "|---|" + "---|" * len(checkouts),
    ]
    labels = [
        ("make", "make a proof (client)"),
        ("check", "check a proof (server: parse, key, signature, htm, htu, iat, ath, jkt)"),
        ("es256_verify", "one bare ES256 verification of the same proof (the floor)"),
        ("es256_verify_cold", "the same with the caches cold (Python code touching 4 MiB "
         "before each)"),
        ("replay_insert", "one insert into the replay record"),
        ("middleware_bearer", "the middleware on a Bearer request (cached token, no HTTP server)"),
        ("middleware_dpop", "the middleware on a DPoP request (the same, plus the proof and its "
         "replay record)"),
        ("replay_insert_sustained", "one insert into a replay record holding 330 s of 1000 "
         "proofs/s, as many expiring (mean CPU µs, 4 MiB copied before each)"),
        ("replay_gc_visits", "the objects a full collection visits in that record"),
        ("replay_mib", "that record's memory (MiB)"),
    ]  # fmt: skip
    for field, label in labels:
        lines.append(
            f"| {label} | " + " | ".join(f"{figures[c][field]:.1f}" for c, _ in checkouts) + " |"
        )
    lines += [
        "",
        "The middleware keeps a verified token (no signature check on a warm Bearer request); a "
        "proof is new on every request, so its signature is always checked and its `jti` goes "
        "into the bounded in-memory replay record. What a proof check adds to the signature: "
        "the key of the proof's header (kept per header, bounded, so a client's key is parsed "
        "once), the strict base64url of the payload and signature, the claims, `ath` (the "
        "SHA-256 of the token), the `jkt` comparison and the replay key. Of the "
        f"{added_us('dpop', 'bearer'):.0f} µs of server CPU a DPoP request adds around "
        f"the trivial app, {ours['middleware_dpop'] - ours['middleware_bearer']:.0f} µs are "
        "what the middleware's own code costs in process, where it runs again and again with "
        "hot caches. A server runs it between other work: one ES256 verification alone costs "
        f"{ours['es256_verify_cold']:.0f} µs with the caches cold (above), and the HTTP "
        f"server reads the proof's {ours['proof_bytes']:.0f} bytes more per request. The "
        "SDK's bearer auth verifies the token's signature on every request (it keeps no "
        "verified tokens).",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=4, help="fresh server processes")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per epoch")
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--proofs", type=int, default=2000, help="proofs timed in process")
    parser.add_argument("--baseline", type=Path, help="a checkout of an earlier commit")
    args = parser.parse_args()
    common.require_tools("wrk", "taskset")
    load_before = os.getloadavg()[0]
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
    figures = {"after": in_process(ROOT, args.proofs)}
    if args.baseline is not None:
        figures["before"] = in_process(args.baseline, args.proofs)
    text = report(args, results, figures, (load_before, os.getloadavg()[0]))
    (HERE / "RESULTS.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
