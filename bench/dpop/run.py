"""DPoP benchmark: requests/s of an official-SDK ``tools/call`` protected by mcpauth's
middleware with a DPoP-bound token and a fresh proof per request, against the same app with a
Bearer token and the app unprotected, in the same rounds; plus the cost of making a proof (the
client) and of checking one (the server), in process.

    .venv/bin/python bench/dpop/run.py [--duration 10] [--rounds 3] [--connections 16]

The servers are bench/middleware/apps.py's, one uvicorn worker pinned to CPU 1; wrk on CPU 0
sends each request with a proof of its own, made beforehand for that URL and token (proofs are
single use: the file holds more than a run sends). Results go to RESULTS.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from cryptography.hazmat.primitives.asymmetric import ec

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, for bench/
from bench import common
from bench.middleware import run as middleware
from mcpauth import jwt
from mcpauth.dpop import check_proof, make_proof

HERE = Path(__file__).parent
LUA = HERE / "dpop.lua"
PROOFS_PER_SECOND = 1500  # more than one server can answer: no proof is sent twice
ROWS = ("plain", "bearer", "dpop")
NAMES = {
    "plain": "SDK app, unprotected",
    "bearer": "SDK app + mcpauth middleware, Bearer token (peer)",
    "dpop": "SDK app + mcpauth middleware, DPoP-bound token + proof per request",
}


def mint(key: jwt.PrivateKey, issuer: str, resource: str, jkt: str | None) -> str:
    now = int(time.time())
    claims = {
        "iss": issuer, "sub": "bench", "aud": resource, "client_id": "bench-client",
        "scope": "mcp:basic", "iat": now, "exp": now + 3600, "jti": secrets.token_hex(8),
    }  # fmt: skip
    if jkt is not None:
        claims["cnf"] = {"jkt": jkt}
    return jwt.encode(claims, key, alg="ES256", kid=middleware.KID)


def proofs_file(
    path: Path, client_key: ec.EllipticCurvePrivateKey, url: str, token: str, n: int
) -> None:
    with path.open("w") as out:
        for _ in range(n):
            out.write(
                make_proof(client_key, alg="ES256", method="POST", url=url, access_token=token)
            )
            out.write("\n")


def warm_dpop(url: str, token: str, client_key: ec.EllipticCurvePrivateKey) -> None:
    with httpx.Client(timeout=30) as client:
        for _ in range(50):
            proof = make_proof(client_key, alg="ES256", method="POST", url=url, access_token=token)
            headers = {**middleware.HEADERS, "Authorization": f"DPoP {token}", "DPoP": proof}
            response = client.post(url, json=middleware.BODY, headers=headers)
            if response.status_code != 200:
                raise RuntimeError(f"{url} answered {response.status_code}: {response.text[:200]}")


def wrk_dpop(
    url: str, token: str, proofs: Path, duration: int, connections: int
) -> dict[str, float]:
    command = common.wrk_command(
        "0", LUA, url, connections=connections, duration=duration, timeout=None
    )
    env = {"BENCH_TOKEN": token, "BENCH_PROOFS": str(proofs)}
    out = subprocess.run(command, capture_output=True, text=True, check=True, env=env).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    stats = dict(re.findall(r"(\w+)=(\d+)", out.split("BENCH", 1)[1]))
    return {"rps": rps, **{k: float(v) for k, v in stats.items()}}


def throughput(
    args: argparse.Namespace, key: jwt.PrivateKey, issuer: str, workdir: Path
) -> dict[str, list[dict[str, float]]]:
    client_key = ec.generate_private_key(ec.SECP256R1())
    jkt = jwt.thumbprint(jwt.public_jwk(client_key.public_key(), kid="", alg="ES256"))
    results: dict[str, list[dict[str, float]]] = {row: [] for row in ROWS}
    for _ in range(args.rounds):
        for row in ROWS:
            role = "plain" if row == "plain" else "mcpauth"
            proc, base, sock = middleware.start(role, "--issuer", issuer, "--resource", "{url}/mcp")
            url = f"{base}/mcp"
            try:
                if row == "dpop":
                    token = mint(key, issuer, url, jkt)
                    warm_dpop(url, token, client_key)
                    proofs = workdir / "proofs.txt"
                    proofs_file(proofs, client_key, url, token, PROOFS_PER_SECOND * args.duration)
                    results[row].append(
                        wrk_dpop(url, token, proofs, args.duration, args.connections)
                    )
                else:
                    token = mint(key, issuer, url, None) if row == "bearer" else ""
                    middleware.warm(url, token)
                    results[row].append(middleware.wrk(url, token, args.duration, args.connections))
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
        proof = make_proof(key, alg="ES256", method="POST", url=url, access_token=token)
        t1 = time.perf_counter()
        check_proof([proof], method="POST", url=url, access_token=token)
        t2 = time.perf_counter()
        made.append(t1 - t0)
        checked.append(t2 - t1)
    return {"make": statistics.median(made) * 1e6, "check": statistics.median(checked) * 1e6}


def report(
    args: argparse.Namespace, results: dict[str, list[dict[str, float]]], costs: dict[str, float]
) -> str:
    med = {row: statistics.median(r["rps"] for r in runs) for row, runs in results.items()}
    p50 = {row: statistics.median(r["p50_us"] for r in runs) for row, runs in results.items()}
    command = " ".join([".venv/bin/python", "bench/dpop/run.py", *sys.argv[1:]])
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    overhead_us = (1 / med["dpop"] - 1 / med["bearer"]) * 1e6
    lines = [
        "# DPoP at the protected resource: a bound token with a proof per request vs Bearer",
        "",
        f"**{med['dpop']:.0f} req/s with a DPoP-bound token and a fresh proof per request = "
        f"{med['dpop'] / med['bearer']:.2f}x the same middleware with a Bearer token "
        f"({med['bearer']:.0f} req/s), {med['dpop'] / med['plain']:.2f}x the unprotected app "
        f"({med['plain']:.0f} req/s); about {overhead_us:.0f} µs of server time per request; "
        f"a proof costs {costs['make']:.0f} µs to make and {costs['check']:.0f} µs to check.**",
        f"Command: `{command}` ({when}).",
        "Peer: the same official MCP SDK app and middleware with a Bearer token, and the app "
        "unprotected, in the same rounds.",
        "Caveat: 2 shared cores; compare the rows of one run only.",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs shared with other work, Python "
        f"{platform.python_version()}. Server: bench/middleware/apps.py, one uvicorn worker "
        f"pinned to CPU 1; load: `taskset -c 0 wrk -t1 -c{args.connections} -d{args.duration}s`, "
        "Bearer rows with bench/middleware/tools_call.lua, the DPoP row with bench/dpop/dpop.lua "
        "(a proof of its own per request, made beforehand for that URL and token).",
        f"Rounds: {args.rounds}, rows interleaved; medians reported.",
        "",
        "## Throughput (requests/s)",
        "",
        "| app | median req/s | runs | ratio to Bearer | p50 µs | non-2xx |",
        "|---|---|---|---|---|---|",
    ]
    for row in ROWS:
        runs = ", ".join(f"{r['rps']:.0f}" for r in results[row])
        non2xx = int(sum(r.get("non2xx", 0) for r in results[row]))
        lines.append(
            f"| {NAMES[row]} | {med[row]:.0f} | {runs} | {med[row] / med['bearer']:.3f} | "
            f"{p50[row]:.0f} | {non2xx} |"
        )
    lines += [
        "",
        "## Proofs in process (ES256, median µs)",
        "",
        f"| make a proof (client) | {costs['make']:.1f} |",
        "|---|---|",
        "| check a proof (server: parse, key, signature, htm, htu, iat, ath) | "
        f"{costs['check']:.1f} |",
        "",
        "The verified token is cached by the middleware (no signature check on warm Bearer "
        "requests); a proof is new on every request, so its signature is always checked, and "
        "its `jti` goes into the bounded in-memory replay record.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", type=int, default=10)
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
        proc, issuer, sock = middleware.start(
            "as", "--issuer", "{url}", "--key-file", str(key_file)
        )
        try:
            results = throughput(args, key, issuer, workdir)
        finally:
            middleware.stop(proc, sock)
    text = report(args, results, proof_costs(args.proofs))
    (HERE / "RESULTS.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
